"""Where ops run (docs/design/architecture.md, "Backends"): the backend choice, the cost rule of
"auto", the ops that stay on our kernels and why, and the results of each backend against our
reference kernels on the same model."""

import ast
import os
import subprocess
import sys

import numpy as np
import pytest

import coremlrt
from mil_helpers import save_program

HAS_OPENVINO = "openvino" in coremlrt.available_backends()
needs_openvino = pytest.mark.skipif(not HAS_OPENVINO, reason="this build has no OpenVINO backend")


def conv_net(directory, fp16=False, seed=0):
    """conv (same padding) -> relu -> batch_norm -> max_pool -> conv (groups 2, custom pad) ->
    reduce_mean -> linear -> softmax, on x [1, 4, 32, 32]: enough work for "auto" to pick a
    backend, and every op one the OpenVINO backend lowers. `seed` draws the weights."""
    from coremltools.converters.mil import Builder as mb

    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((8, 4, 3, 3)) / 6).astype(np.float32)
    w2 = (rng.standard_normal((8, 4, 3, 3)) / 6).astype(np.float32)
    wl = (rng.standard_normal((10, 8)) / 3).astype(np.float32)
    stats = [rng.uniform(0.5, 1.5, 8).astype(np.float32) for _ in range(4)]

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4, 32, 32))])
    def prog(x):
        y = mb.relu(x=mb.conv(x=x, weight=w1, pad_type="same", bias=stats[0]))
        y = mb.batch_norm(x=y, mean=stats[1], variance=stats[2], gamma=stats[3], epsilon=1e-3)
        y = mb.max_pool(x=y, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid")
        y = mb.conv(x=y, weight=w2, groups=2, pad_type="custom", pad=[1, 0, 0, 1], strides=[1, 2], bias=stats[0])
        y = mb.reduce_mean(x=y, axes=[2, 3])
        return mb.softmax(x=mb.linear(x=y, weight=wl), axis=-1, name="probs")

    return save_program(prog, directory, name=("conv_fp16" if fp16 else "conv") + (f"_{seed}" if seed else ""), fp16=fp16)


def tiny_net(directory):
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(16,))])
    def prog(x):
        return mb.relu(x=mb.add(x=x, y=1.0), name="y")

    return save_program(prog, directory, name="tiny")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    directory = tmp_path_factory.mktemp("backends")
    x = np.random.default_rng(1).standard_normal((1, 4, 32, 32)).astype(np.float32)
    return {"conv": conv_net(directory), "conv_fp16": conv_net(directory, fp16=True), "tiny": tiny_net(directory), "x": x}


def backends_of(model):
    return {p["backend"] for p in model.placements()}


def test_available_backends_and_unknown_names(models):
    names = coremlrt.available_backends()
    assert names[:2] == ["auto", "reference"]
    with pytest.raises(coremlrt.Error, match="backend 'nope' is not known; this build accepts 'auto', 'reference'"):
        coremlrt.MLModel(models["tiny"], backend="nope")
    with pytest.raises(TypeError):
        coremlrt.MLModel(models["tiny"], backend=3)


def test_reference_runs_every_op_on_our_kernels(models):
    m = coremlrt.MLModel(models["conv"], backend="reference")
    assert backends_of(m) <= {"reference", "folded"}
    assert all(p["reason"] == "" for p in m.placements())


@needs_openvino
@pytest.mark.parametrize("name", ["conv", "conv_fp16"])
def test_openvino_takes_the_whole_network_and_agrees_with_our_kernels(models, name):
    ours = coremlrt.MLModel(models[name], backend="reference")
    theirs = coremlrt.MLModel(models[name], backend="openvino", cache_dir=None)
    placements = [p for p in theirs.placements() if p["backend"] != "folded"]
    assert placements and all(p["backend"] == "openvino" and p["region"] == 0 for p in placements), placements
    expected = ours.predict({"x": models["x"]})["probs"]
    got = theirs.predict({"x": models["x"]})["probs"]
    # fp32: summation order only. fp16: our kernels round every op to fp16, OpenVINO computes
    # in fp32 (fp16 or wider, docs/design/architecture.md law 6): a few fp16 ulps of the softmax.
    tolerance = 1e-5 if name == "conv" else 3e-3
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


@needs_openvino
def test_auto_keeps_a_tiny_model_on_our_kernels_and_says_why(models):
    m = coremlrt.MLModel(models["tiny"])
    assert m.backend == "auto"
    placements = m.placements()
    assert {p["backend"] for p in placements} == {"reference"}
    assert all("too little to pay for a backend call" in p["reason"] for p in placements), placements
    np.testing.assert_array_equal(m.predict({"x": np.arange(-8, 8, dtype=np.float32)})["y"],
                                  np.maximum(np.arange(-8, 8) + 1, 0).astype(np.float32))
    # Forced, the same tiny region runs on OpenVINO.
    forced = coremlrt.MLModel(models["tiny"], backend="openvino", cache_dir=None)
    assert {p["backend"] for p in forced.placements()} == {"openvino"}
    np.testing.assert_array_equal(forced.predict({"x": np.arange(-8, 8, dtype=np.float32)})["y"],
                                  np.maximum(np.arange(-8, 8) + 1, 0).astype(np.float32))


@needs_openvino
def test_auto_hands_a_large_network_to_openvino(models):
    m = coremlrt.MLModel(models["conv"], cache_dir=None)
    assert "openvino" in backends_of(m)


@needs_openvino
def test_low_precision_mode_is_opt_in_and_close(models):
    fp32 = coremlrt.MLModel(models["conv_fp16"], backend="reference").predict({"x": models["x"]})["probs"]
    low = coremlrt.MLModel(models["conv_fp16"], compute_units=coremlrt.ComputeUnit.CPU_AND_NE, cache_dir=None)
    assert "openvino" in backends_of(low)
    # bf16 keeps 8 bits of mantissa: about 0.4 % per rounding, a few of them along the network.
    np.testing.assert_allclose(low.predict({"x": models["x"]})["probs"], fp32, rtol=3e-2, atol=3e-3)


@needs_openvino
@pytest.mark.parametrize("cached", [False, True], ids=["compiled", "from-cache"])
def test_states_stay_ours_with_reasons_and_runtime_indices_are_checked(tmp_path, cached):
    """State ops stay ours; a gather whose indices are computed at run time goes to OpenVINO,
    whose region checks the indices: wrapped negative ones match our kernel, and one out of range
    sends the region to our kernels, which report it (OpenVINO alone would yield zeros). A region
    imported from the cache keeps that check."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    rng = np.random.default_rng(2)
    w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
    table = rng.standard_normal((10, 64)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec((1,), dtype=types.int32), mb.StateTensorSpec((1, 64), dtype=types.fp16)],
                opset_version=ct.target.iOS18)
    def prog(idx, acc):
        row = mb.gather(x=table, indices=idx, axis=0)
        total = mb.add(x=mb.cast(x=mb.read_state(input=acc), dtype="fp32"), y=row)
        mb.coreml_update_state(state=acc, value=mb.cast(x=total, dtype="fp16"))
        y = total
        for _ in range(8):
            y = mb.tanh(x=mb.matmul(x=y, y=w))
        return mb.identity(x=y, name="y")

    path = save_program(prog, tmp_path)
    cache = tmp_path / "cache" if cached else None
    if cached:
        coremlrt.MLModel(path, backend="openvino", cache_dir=cache)
        assert list(cache.glob("*.blob")), "the compiled region should have been cached"
    m = coremlrt.MLModel(path, backend="openvino", cache_dir=cache)
    by_type = {}
    for p in m.placements():
        by_type.setdefault(p["op_type"], set()).add((p["backend"], p["reason"].split(":")[0] if p["reason"] else ""))
    assert by_type["read_state"] == {("reference", "binds a state, which our MLState owns")}
    assert by_type["write_state"] == {("reference", "binds a state, which our MLState owns")}
    assert by_type["gather"] == {("openvino", "")}
    assert by_type["matmul"] == {("openvino", "")}
    ref = coremlrt.MLModel(path, backend="reference")
    states = (m.make_state(), ref.make_state())
    for step, index in enumerate([0, 3, -1, -10, 9]):
        idx = np.array([index], np.int32)
        got, expected = m.predict({"idx": idx}, state=states[0])["y"], ref.predict({"idx": idx}, state=states[1])["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(states[0].read_state("acc"), states[1].read_state("acc"))
    # An index out of range is still our kernel's clear error, not OpenVINO's silent zeros
    # (coremltools adds D to a negative index before the gather: -21 reaches it as -11).
    for index in (10, 12, -21):
        with pytest.raises(coremlrt.Error, match="gather index .* is out of range"):
            m.predict({"idx": np.array([index], np.int32)}, state=states[0])
    # A failed prediction leaves the state as it was.
    np.testing.assert_array_equal(states[0].read_state("acc"), states[1].read_state("acc"))


@needs_openvino
@pytest.mark.parametrize("rows, expected", [(1, "reference"), (4, "reference"), (5, "openvino")])
@pytest.mark.parametrize("fp16", [True, False], ids=["fp16", "fp32"])
def test_auto_keeps_matrix_vector_work_on_our_kernels(tmp_path, rows, expected, fp16):
    """A decode-like step (linear layers on a few rows) is memory-bound: auto keeps it on our
    kernels, which read the weights as stored (fp16 or fp32); with more rows OpenVINO takes it.
    Forced OpenVINO takes it either way."""
    from coremltools.converters.mil import Builder as mb

    rng = np.random.default_rng(4)
    w1 = (rng.standard_normal((1024, 256)) / 16).astype(np.float32)
    w2 = (rng.standard_normal((256, 1024)) / 32).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec((rows, 256))])
    def prog(x):
        return mb.linear(x=mb.relu(x=mb.linear(x=x, weight=w1)), weight=w2, name="y")

    path = save_program(prog, tmp_path, name="model", fp16=fp16)
    placed = coremlrt.MLModel(path, backend="auto", cache_dir=None).placements()
    linear = [p for p in placed if p["op_type"] == "linear"]
    assert {p["backend"] for p in linear} == {expected}
    if expected == "reference":
        assert all("matrix-vector" in p["reason"] for p in linear)
    forced = coremlrt.MLModel(path, backend="openvino", cache_dir=None).placements()
    assert {p["backend"] for p in forced if p["op_type"] == "linear"} == {"openvino"}


@needs_openvino
def test_auto_keeps_lstm_ops_over_fp32_weights_on_our_kernels(tmp_path):
    """Our LSTM kernel runs fp32 weights as fast as OpenVINO and reads them mapped: auto keeps
    such lstm ops, saying why; fp16 weights, the low-precision mode and forced OpenVINO go to
    OpenVINO."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    rng = np.random.default_rng(5)
    w_ih = (rng.standard_normal((512, 64)) / 8).astype(np.float32)
    w_hh = (rng.standard_normal((512, 128)) / 11).astype(np.float32)
    zeros = np.zeros((1, 128), np.float32)

    def program(dtype=np.float32):
        # fp16 weights need an fp16 program (coremltools' fp16 pass keeps lstm in fp32).
        spec = mb.TensorSpec((16, 1, 64), dtype=types.fp16 if dtype == np.float16 else types.fp32)

        @mb.program(input_specs=[spec], opset_version=ct.target.iOS18)
        def prog(x):
            y, _, _ = mb.lstm(x=x, initial_h=zeros.astype(dtype), initial_c=zeros.astype(dtype),
                              weight_ih=w_ih.astype(dtype), weight_hh=w_hh.astype(dtype), output_sequence=True)
            return mb.identity(x=y, name="y")

        return prog

    def lstm_backends(path, **options):
        placed = coremlrt.MLModel(path, cache_dir=None, **options).placements()
        return [(p["backend"], p["reason"]) for p in placed if p["op_type"] == "lstm"]

    fp32 = save_program(program(), tmp_path, name="fp32")
    ((backend, reason),) = lstm_backends(fp32, backend="auto")
    assert backend == "reference" and "our LSTM kernel" in reason
    assert [b for b, _ in lstm_backends(fp32, backend="openvino")] == ["openvino"]
    fp16 = save_program(program(np.float16), tmp_path, name="fp16")
    assert [b for b, _ in lstm_backends(fp16, backend="auto")] == ["openvino"]
    assert [b for b, _ in lstm_backends(fp16, backend="auto", compute_units=coremlrt.ComputeUnit.CPU_AND_NE)] == \
        ["openvino"]


def _decodes_in_registers():
    """Whether this CPU runs the decode step's register loops for int8 codes: AVX-512, or AVX2 with
    FMA and F16C (src/ops/packed_dot_x86.cc, packed_dot_avx2.cc)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        return False
    return {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags or {"avx2", "fma", "f16c"} <= flags


@needs_openvino
@pytest.mark.parametrize("rows, expected", [(1, "reference"), (2, "openvino")])
def test_auto_keeps_matrix_vector_work_over_compressed_weights_on_our_kernels(tmp_path, rows, expected):
    """A decode step over int8 weights (linear layers on one row): our kernels decode the codes in
    registers (AVX-512 or AVX2), where OpenVINO would hold a repacked copy beside the mapped file,
    so auto keeps it; more rows go to OpenVINO, and forced OpenVINO takes them all. On a CPU with
    neither our kernels decode panels, slower: OpenVINO takes one row too."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    rng = np.random.default_rng(5)
    q1 = rng.integers(-127, 128, (1024, 256)).astype(np.int8)
    q2 = rng.integers(-127, 128, (256, 1024)).astype(np.int8)
    s1 = rng.uniform(0.001, 0.01, (1024, 1)).astype(np.float16)
    s2 = rng.uniform(0.001, 0.01, (256, 1)).astype(np.float16)

    @mb.program(input_specs=[mb.TensorSpec((rows, 256), dtype=types.fp16)], opset_version=ct.target.iOS18)
    def prog(x):
        w1 = mb.constexpr_blockwise_shift_scale(data=q1, scale=s1)
        w2 = mb.constexpr_blockwise_shift_scale(data=q2, scale=s2)
        return mb.linear(x=mb.relu(x=mb.linear(x=x, weight=w1)), weight=w2, name="y")

    path = save_program(prog, tmp_path, name="int8")
    if rows == 1 and not _decodes_in_registers():
        expected = "openvino"
    placed = coremlrt.MLModel(path, backend="auto", cache_dir=None).placements()
    linear = [p for p in placed if p["op_type"] == "linear"]
    assert {p["backend"] for p in linear} == {expected}, linear
    if expected == "reference":
        assert all("matrix-vector" in p["reason"] for p in linear)
    forced = coremlrt.MLModel(path, backend="openvino", cache_dir=None).placements()
    assert {p["backend"] for p in forced if p["op_type"] == "linear"} == {"openvino"}


@needs_openvino
def test_fp16_embedding_and_projection_on_openvino_compute_in_fp32(tmp_path):
    """An fp16 program's embedding gather (ids computed at run time) and linear layer on OpenVINO:
    the rows are gathered from the fp16 table and widened exactly, so the results are fp32
    arithmetic on the fp16 constants (docs/design/architecture.md, law 6), never bf16."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    rng = np.random.default_rng(3)
    table = rng.standard_normal((100, 64)).astype(np.float32)
    w = (rng.standard_normal((256, 64)) / 8).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec((5,), dtype=types.int32)])
    def prog(ids):
        rows = mb.gather(x=table, indices=mb.add(x=ids, y=np.int32(1)), axis=0)
        return mb.linear(x=rows, weight=w, bias=b, name="y")

    path = save_program(prog, tmp_path, fp16=True)
    m = coremlrt.MLModel(path, backend="openvino", cache_dir=None)
    placed = {p["op_type"]: p["backend"] for p in m.placements()}
    assert placed["gather"] == "openvino" and placed["linear"] == "openvino"
    ids = np.array([0, 41, 98, -3, -100], np.int32)
    got = np.asarray(m.predict({"ids": ids})["y"], np.float32)
    widened = [a.astype(np.float16).astype(np.float32) for a in (table, w, b)]
    expected = widened[0][ids + 1] @ widened[1].T + widened[2]
    np.testing.assert_allclose(got, expected, rtol=2e-3, atol=2e-3)
    with pytest.raises(coremlrt.Error, match="gather index .* is out of range"):
        m.predict({"ids": np.array([0, 1, 2, 3, 99], np.int32)})


@needs_openvino
def test_cli_info_plan_shows_placements(models):
    out = subprocess.run([sys.executable, "-m", "coremlrt", "info", "--plan", models["tiny"]],
                         capture_output=True, text=True, check=True).stdout
    assert "plan of 'main' (backend=auto): reference 2" in out
    assert "too little to pay for a backend call" in out
    out = subprocess.run([sys.executable, "-m", "coremlrt", "info", "--plan", "--backend", "openvino", models["conv"]],
                         capture_output=True, text=True, check=True).stdout
    assert "openvino region #0" in out


@needs_openvino
def test_region_whose_inputs_differ_from_the_declared_shapes_runs_on_our_kernels(tmp_path):
    """coremltools declares slice_by_size(begin -2, size -1) as [2, 7] where the op yields
    [2, 2] (docs/design/declared-shapes.md). reverse_sequence has no OpenVINO lowering
    (src/backends/openvino/unlowered.cc), so the multiply after it is a region compiled for the
    declared [2, 7]; at run time its input is [2, 2], and the region's own ops run on our kernels
    instead."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 5))], opset_version=ct.target.iOS18)
    def prog(x):
        tail = mb.slice_by_size(x=x, begin=[0, -2], size=[-1, -1], name="tail")
        reversed_rows = mb.reverse_sequence(x=tail, lengths=np.array([2, 2], np.int32), seq_axis=1, batch_axis=0)
        return mb.mul(x=reversed_rows, y=2.0, name="y")

    path = save_program(prog, tmp_path, name="declared")
    m = coremlrt.MLModel(path, backend="openvino", cache_dir=None)
    assert [p["backend"] for p in m.placements() if p["op_type"] == "mul"] == ["openvino"]
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    np.testing.assert_array_equal(m.predict({"x": x})["y"], x[:, -2:][:, ::-1] * 2)


@needs_openvino
def test_compiled_cache_keeps_within_its_limit(models, tmp_path, monkeypatch):
    """A load that writes a cache entry removes the least recently used entries beyond the
    limit (src/runtime/compiled_cache.h); files that are not cache entries stay."""
    import os

    cache = tmp_path / "cache"
    cache.mkdir()
    stale = []
    for i in range(5):  # 5 old entries of 1 MiB, the first the least recently used
        entry = cache / f"{i}.blob"
        entry.write_bytes(b"\0" * (1 << 20))
        os.utime(entry, (1_000_000 + i, 1_000_000 + i))
        stale.append(entry)
    other = cache / "notes.txt"
    other.write_bytes(b"\0" * (3 << 20))
    monkeypatch.setenv("COREMLRT_CACHE_LIMIT_BYTES", str((5 << 20) // 2))

    m = coremlrt.MLModel(models["conv"], backend="openvino", cache_dir=cache)
    written = [p for p in cache.glob("*.blob") if p not in stale]
    assert len(written) == 1, "the compiled region should have been cached"
    total = sum(p.stat().st_size for p in cache.glob("*.blob"))
    assert total <= (5 << 20) // 2
    kept = [p.exists() for p in stale]
    assert kept == sorted(kept) and not kept[0], f"the oldest entries go first: {kept}"
    assert other.exists()
    reference = coremlrt.MLModel(models["conv"], backend="reference").predict({"x": models["x"]})["probs"]
    np.testing.assert_allclose(m.predict({"x": models["x"]})["probs"], reference, rtol=1e-4, atol=1e-6)

    # A load served from the cache writes nothing and removes nothing.
    before = sorted(p.name for p in cache.iterdir())
    monkeypatch.setenv("COREMLRT_CACHE_LIMIT_BYTES", "1")
    coremlrt.MLModel(models["conv"], backend="openvino", cache_dir=cache)
    assert sorted(p.name for p in cache.iterdir()) == before


_RSS_AFTER_PREDICTIONS = """
import sys
import numpy as np
import coremlrt
m = coremlrt.MLModel(sys.argv[1], backend="openvino", cache_dir=sys.argv[2])
for _ in range(3):
    m.predict({"x": np.ones((1, 1024), np.float32)})
fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(sum(int(fields[k].split()[0]) for k in ("RssAnon", "RssFile")) // 1024)
"""


@needs_openvino
def test_a_cached_load_holds_no_more_memory_than_a_first_load(tmp_path):
    """A region imported from the cache holds its weights in its own blob; the weight file's
    pages that hashing its key read are dropped again (src/backends/openvino/region_cache.h,
    release_constant_pages), so RSS (anonymous + file) after a cached load and predictions stays
    within a first load's. 32 MB of fp32 weights, each load in a fresh process."""
    from coremltools.converters.mil import Builder as mb

    rng = np.random.default_rng(3)
    w1 = (rng.standard_normal((4096, 1024)) / 32).astype(np.float32)
    w2 = (rng.standard_normal((1024, 4096)) / 64).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 1024))])
    def prog(x):
        return mb.linear(x=mb.relu(x=mb.linear(x=x, weight=w1)), weight=w2, name="y")

    path = save_program(prog, tmp_path, name="wide")
    cache = tmp_path / "cache"

    def rss_mb():
        out = subprocess.run([sys.executable, "-c", _RSS_AFTER_PREDICTIONS, path, str(cache)], check=True,
                             capture_output=True, text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        return int(out.stdout.split()[-1])

    first = rss_mb()
    assert list(cache.glob("*.blob")), "the region should have been cached"
    cached = rss_mb()
    assert cached <= first + 4, f"cached load {cached} MB, first load {first} MB"


_RSS_GROWTH_FP16 = """
import sys
import numpy as np
import coremlrt
fields = lambda: dict(line.split(":", 1) for line in open("/proc/self/status"))
rss = lambda: sum(int(fields()[k].split()[0]) for k in ("RssAnon", "RssFile")) // 1024
before = rss()
m = coremlrt.MLModel(sys.argv[1], backend="openvino")
for _ in range(3):
    m.predict({"x": np.ones((1, 2048), np.float16)})
print(rss() - before, m.placements()[0]["backend"])
"""


@needs_openvino
def test_fp16_weights_reach_openvino_as_views_of_the_weight_file(tmp_path):
    """An fp16 program's weights reach its OpenVINO region as fp16 views with a Convert marked as
    weight decompression (src/backends/openvino/backend.cc, dense_constant), not as fp32
    copies kept beside the plugin's own repacked weights. 64 MiB of fp16 weights: RSS grew by
    5.4 times their size with the copies, 3.5 times without; a fresh process measures it."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    rng = np.random.default_rng(5)
    w1 = (rng.standard_normal((8192, 2048)) / 32).astype(np.float16)
    w2 = (rng.standard_normal((2048, 8192)) / 64).astype(np.float16)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2048), dtype=types.fp16)])
    def prog(x):
        return mb.linear(x=mb.relu(x=mb.linear(x=x, weight=w1)), weight=w2, name="y")

    path = save_program(prog, tmp_path, name="wide16", fp16=True)
    out = subprocess.run([sys.executable, "-c", _RSS_GROWTH_FP16, path], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    grown, placed = out.stdout.split()[-2:]
    assert placed == "openvino"
    weight_mb = (w1.nbytes + w2.nbytes) / 2**20
    assert int(grown) <= 4.5 * weight_mb, f"RSS grew by {grown} MB for {weight_mb:.0f} MB of fp16 weights"
    x = rng.standard_normal((1, 2048)).astype(np.float16)
    got = coremlrt.MLModel(path, backend="openvino").predict({"x": x})["y"]
    want = coremlrt.MLModel(path, backend="reference").predict({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)


@needs_openvino
def test_cached_region_is_found_by_its_content_and_imported_as_stored(models, tmp_path):
    """The cache key of a compiled region covers the region itself, weights included, and the
    options (src/backends/openvino/region_cache.h); a hit imports the stored model without
    building the region; an entry OpenVINO cannot import is compiled again and replaced; a
    cache that cannot be written is no error."""
    x = {"x": models["x"]}
    cache = tmp_path / "cache"
    other = conv_net(tmp_path, seed=7)  # the same ops and shapes, other weights
    results, entries = {}, {}
    for name, path, options in [("conv", models["conv"], {}), ("other", other, {}), ("fp16", models["conv_fp16"], {}),
                                ("fp16 low precision", models["conv_fp16"],
                                 {"compute_units": coremlrt.ComputeUnit.CPU_AND_NE})]:
        before = set(cache.glob("*.blob"))
        results[name] = coremlrt.MLModel(path, backend="openvino", cache_dir=cache, **options).predict(x)["probs"]
        added = set(cache.glob("*.blob")) - before
        assert len(added) == 1, f"{name}: one new entry expected, got {sorted(p.name for p in added)}"
        entries[name] = added.pop()
        again = coremlrt.MLModel(path, backend="openvino", cache_dir=cache, **options).predict(x)["probs"]
        np.testing.assert_array_equal(again, results[name])
    reference = coremlrt.MLModel(other, backend="reference").predict(x)["probs"]
    np.testing.assert_allclose(results["other"], reference, rtol=1e-4, atol=1e-6)
    assert np.abs(results["other"] - results["conv"]).max() > 1e-3

    # Only the cache could make the second model compute the first one's results: its entry,
    # replaced by the first model's, is imported as it is.
    entries["other"].write_bytes(entries["conv"].read_bytes())
    swapped = coremlrt.MLModel(other, backend="openvino", cache_dir=cache).predict(x)["probs"]
    np.testing.assert_array_equal(swapped, results["conv"])

    junk = b"not a compiled model"
    entries["other"].write_bytes(junk)
    recompiled = coremlrt.MLModel(other, backend="openvino", cache_dir=cache).predict(x)["probs"]
    np.testing.assert_array_equal(recompiled, results["other"])
    # The entry was replaced by a compiled model. Its size is no fixed number: OpenVINO names
    # the nodes it makes with a counter shared by the whole process, and the names are stored.
    replaced = entries["other"].read_bytes()
    assert replaced != junk and len(replaced) > 1000
    assert replaced[:8] == entries["conv"].read_bytes()[:8], "the header of OpenVINO's exported model"
    assert sorted(cache.iterdir()) == sorted(entries.values()), "no partly written entry may be left"
    # ... and the replacement is imported, not compiled into yet another entry.
    imported = coremlrt.MLModel(other, backend="openvino", cache_dir=cache).predict(x)["probs"]
    np.testing.assert_array_equal(imported, results["other"])
    assert sorted(cache.iterdir()) == sorted(entries.values())

    # A cache folder that cannot be made costs a compile, not the load.
    (tmp_path / "a file").write_bytes(b"")
    unwritable = coremlrt.MLModel(other, backend="openvino", cache_dir=tmp_path / "a file" / "cache")
    np.testing.assert_array_equal(unwritable.predict(x)["probs"], results["other"])


PINNING_PROBE = r"""
import glob, os, sys, threading, time
import numpy as np
import coremlrt

model = coremlrt.MLModel(sys.argv[1], backend="openvino", cache_dir=None, threads=int(sys.argv[2]))
x = np.random.default_rng(1).standard_normal((1, 4, 32, 32)).astype(np.float32)
seen, done = set(), threading.Event()

def watch():  # the affinity of every thread of this process, while predictions run
    while not done.is_set():
        for status in glob.glob("/proc/self/task/*/status"):
            try:
                with open(status) as f:
                    seen.update(line.split()[1] for line in f if line.startswith("Cpus_allowed_list"))
            except OSError:
                pass  # a thread that ended

watcher = threading.Thread(target=watch)
watcher.start()
end = time.monotonic() + 1.0
while time.monotonic() < end:
    model.predict({"x": x})
done.set()
watcher.join()
print(sorted(seen))
"""


@needs_openvino
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores or more")
def test_a_model_given_a_share_of_the_cores_leaves_them_unpinned(models):
    """A model loaded for fewer threads than the machine's cores (a Dask worker or Ray actor
    per core) must not pin its threads: the CPU plugin pins from the first core in every process,
    so two such processes shared core 0 (src/backends/openvino/backend.cc,
    takes_a_share_of_the_machine). The calling thread runs a one-stream region itself and is
    pinned only while it does, so the affinities are read while predictions run."""
    allowed = len(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", PINNING_PROBE, str(models["conv"]), str(allowed - 1)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    masks = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    assert masks and all(cpu_count(mask) == allowed for mask in masks), masks


def cpu_count(mask):
    """CPUs in a Cpus_allowed_list such as "0-3,6"."""
    count = 0
    for part in mask.split(","):
        first, _, last = part.partition("-")
        count += int(last or first) - int(first) + 1
    return count


def flexible_conv_net(directory, padding=1, name="flexible"):
    """conv -> relu -> max_pool -> conv (groups 2) -> relu over x [1, 4, H, W], H and W flexible
    (8 to 64), converted from torch; `padding` of the first conv (1, or "same")."""
    import warnings

    import coremltools as ct
    torch = pytest.importorskip("torch")

    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=padding), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Conv2d(8, 8, 3, groups=2), torch.nn.ReLU()).eval()
    size = ct.RangeDim(8, 64, default=32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ct.convert(torch.jit.trace(net, torch.zeros(1, 4, 32, 32)),
                           inputs=[ct.TensorType(name="x", shape=(1, 4, size, size))], outputs=[ct.TensorType(name="y")],
                           compute_precision=ct.precision.FLOAT32, minimum_deployment_target=ct.target.iOS16)
    path = str(directory / (name + ".mlpackage"))
    model.save(path)
    return path


@needs_openvino
def test_regions_over_dims_known_only_at_prediction_run_on_openvino(tmp_path):
    """Convolutions, pools and activations lower without their dims (lowering.h, any_dims):
    a flexible-size network's regions go to OpenVINO as its static twin's do, and every size
    gives our kernels' results."""
    path = flexible_conv_net(tmp_path)
    auto = coremlrt.MLModel(path, cache_dir=None)
    reference = coremlrt.MLModel(path, backend="reference")
    placed = {p["op_type"]: p["backend"] for p in auto.placements() if p["op_type"] in ("conv", "relu", "max_pool")}
    assert placed == {"conv": "openvino", "relu": "openvino", "max_pool": "openvino"}
    rng = np.random.default_rng(4)
    for height, width in [(32, 32), (20, 28), (9, 41), (64, 8), (32, 32)]:
        x = rng.standard_normal((1, 4, height, width)).astype(np.float32)
        got, want = auto.predict({"x": x})["y"], reference.predict({"x": x})["y"]
        assert got.shape == want.shape == (1, 8, (height // 2) - 2, (width // 2) - 2)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@needs_openvino
def test_same_padding_over_dims_known_only_at_prediction_stays_ours(tmp_path):
    """"same" padding depends on the input's size, which the region lowering resolves at load:
    with a flexible size the conv stays on our kernels and the plan says why."""
    model = coremlrt.MLModel(flexible_conv_net(tmp_path, padding="same", name="same"), backend="openvino",
                             cache_dir=None)
    first_conv = next(p for p in model.placements() if p["op_type"] == "conv")
    assert first_conv["backend"] == "reference"
    assert "pad_type same over spatial dims known only at prediction" in first_conv["reason"]
    x = np.random.default_rng(5).standard_normal((1, 4, 13, 17)).astype(np.float32)
    want = coremlrt.MLModel(model.package_path, backend="reference").predict({"x": x})["y"]
    np.testing.assert_allclose(model.predict({"x": x})["y"], want, rtol=1e-5, atol=1e-5)
