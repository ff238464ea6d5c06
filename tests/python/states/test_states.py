"""Stateful and multifunction models: MLState, shared across function instances.

The main model is a tiny decoder LM written in torch with a registered-buffer KV cache,
converted by coremltools into a ``prefill`` and a ``decode`` function of one package
(tests/python/lm_helpers.py). Every engine result is compared with the torch module run
step by step with its own buffers (or with numpy for the MIL-builder models).

Tolerances: the LM computes in fp32 on both sides and keeps its cache in fp16 on both sides
(coremltools only accepts fp16 states), so the logits differ by fp32 rounding (~1e-6 for
logits of size ~2) plus the effect of a k/v entry that rounds to the neighbouring fp16 value
(one fp16 ulp on one cache entry, every few steps): under 3e-5 over 3220 random steps.
rtol=1e-4, atol=1e-4 leaves room for that; losing or misplacing cache entries moves the
logits by 0.05-0.5. Caches are compared to one fp16 ulp (rtol 1e-3), plus atol 2e-5 for
entries near zero, which come out of cancellation and carry the fp32 rounding of their
O(1) terms (measured: under 3.3e-6 beyond the rtol over 300 random rounds).
"""

import os
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest

import coremlrt
import lm_helpers as H

RTOL, ATOL = 1e-4, 1e-4
CACHE_RTOL, CACHE_ATOL = 1e-3, 2e-5  # one fp16 ulp; atol for entries near 0 (fp32 cancellation)


def assert_logits(actual, expected, what):
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL, err_msg=what)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("states")


@pytest.fixture(scope="module")
def lm(workdir, coremlrt_backend):
    path, module = H.build_lm_package(workdir)
    prefill = coremlrt.MLModel(path, function_name="prefill")
    decode = coremlrt.MLModel(path, function_name="decode")
    return types.SimpleNamespace(path=path, module=module, prefill=prefill, decode=decode)


@pytest.fixture(scope="module")
def other_models(workdir, coremlrt_backend):
    """Stateful models whose declarations differ from the LM's, and a stateless one."""
    return types.SimpleNamespace(
        other_shape=coremlrt.MLModel(H.accumulator_package(
            workdir, "acc_shape", {"k_cache": (1, 2, 8, 8), "v_cache": (1, 2, 8, 8)})),
        other_name=coremlrt.MLModel(H.accumulator_package(workdir, "acc_name", {"cache": H.CACHE_SHAPE})),
        stateless=coremlrt.MLModel(H.stateless_package(workdir)),
    )


@pytest.fixture(scope="module")
def counter(workdir, coremlrt_backend):
    path, weights, table = H.counter_package(workdir)
    return types.SimpleNamespace(path=path, weights=weights, table=table, model=coremlrt.MLModel(path))


def prompt(seed=0):
    return np.random.default_rng(seed).integers(0, H.VOCAB, H.PROMPT).astype(np.int32)


def run_script(lm, state, ref, seed, gap=0.0):
    """Prefill, decode, a second prefill chunk, then decode to the end of the cache, checking
    every step against the torch reference; alternates between the two function instances.
    Returns the number of steps."""
    tokens = prompt(seed)
    position = 0
    steps = 0

    def prefill(chunk):
        nonlocal position, steps
        out = lm.prefill.predict(H.lm_inputs(chunk, position), state=state)["logits"]
        expected = ref.step(chunk, position)
        assert out.shape == (1, H.PROMPT, H.VOCAB)
        assert_logits(out, expected, f"prefill at {position} (seed {seed})")
        position += len(chunk)
        steps += 1
        return int(expected[0, -1].argmax())

    def decode(token):
        nonlocal position, steps
        out = lm.decode.predict(H.lm_inputs([token], position), state=state)["logits"]
        expected = ref.step([token], position)
        assert out.shape == (1, 1, H.VOCAB)
        assert_logits(out, expected, f"decode at {position} (seed {seed})")
        position += 1
        steps += 1
        return int(expected[0, -1].argmax())

    token = prefill(tokens)                         # positions 0..4
    for _ in range(2):                              # 5, 6
        if gap:
            time.sleep(gap)
        token = decode(token)
    rng = np.random.default_rng(seed + 100)
    token = prefill(rng.integers(0, H.VOCAB, H.PROMPT).astype(np.int32))  # 7..11: another prefill chunk
    while position < H.MAX_LEN:                     # 12..15
        if gap:
            time.sleep(gap)
        token = decode(token)
    return steps


# -- 1. the LM: prefill and decode sharing one state -------------------------------------

def test_lm_functions_and_states_described(lm):
    for model, length in ((lm.prefill, H.PROMPT), (lm.decode, 1)):
        function = model._function  # the description the engine read (states are not inputs)
        assert [f["name"] for f in function["inputs"]] == ["tokens", "start"]
        assert [f["name"] for f in function["outputs"]] == ["logits"]
        assert [(s["name"], s["dtype"], list(s["shape"])) for s in function["states"]] == \
            [(name, "float16", list(H.CACHE_SHAPE)) for name in H.STATE_NAMES]
        assert [f["shape"] for f in function["inputs"]] == [[1, length], [1]]
        assert list(model.input_description) == ["tokens", "start"]
    # coremltools deduplicated the weights across the two functions: stored once (plus a
    # 64-byte header per blob), not twice
    param_bytes = sum(p.numel() * 4 for p in lm.module.parameters())
    assert 0.5 * param_bytes < lm.prefill.weights_bytes < 1.5 * param_bytes, (lm.prefill.weights_bytes, param_bytes)


def test_prefill_then_decode_match_torch_with_one_shared_state(lm):
    state = lm.decode.make_state()  # made by the decode instance, used first by prefill
    ref = H.TorchLM(lm.module)
    steps = run_script(lm, state, ref, seed=1)
    assert steps == 2 + 4 + 2  # two prefills, N = 6 decodes, alternating instances
    caches = ref.caches()
    for name in H.STATE_NAMES:
        value = state.read_state(name)
        assert value.dtype == np.float32 and value.shape == H.CACHE_SHAPE
        np.testing.assert_allclose(value, caches[name], rtol=CACHE_RTOL, atol=CACHE_ATOL, err_msg=name)
        assert np.count_nonzero(value) > value.size // 2


def test_fresh_state_differs_from_warm_exactly_as_in_torch(lm):
    tokens = prompt(2)
    warm, ref_warm = lm.prefill.make_state(), H.TorchLM(lm.module)
    assert_logits(lm.prefill.predict(H.lm_inputs(tokens, 0), state=warm)["logits"], ref_warm.step(tokens, 0), "prefill")
    next_token = 7
    warm_out = lm.decode.predict(H.lm_inputs([next_token], H.PROMPT), state=warm)["logits"]
    warm_ref = ref_warm.step([next_token], H.PROMPT)
    fresh_out = lm.decode.predict(H.lm_inputs([next_token], H.PROMPT), state=lm.decode.make_state())["logits"]
    fresh_ref = H.TorchLM(lm.module).step([next_token], H.PROMPT)
    assert_logits(warm_out, warm_ref, "decode on the warm state")
    assert_logits(fresh_out, fresh_ref, "decode on a fresh state")
    # The cache matters, in torch and here, by the same amount.
    torch_gap = np.abs(warm_ref - fresh_ref).max()
    engine_gap = np.abs(warm_out - fresh_out).max()
    assert torch_gap > 0.05, torch_gap
    assert engine_gap == pytest.approx(torch_gap, rel=1e-3, abs=1e-3)
    assert not np.allclose(fresh_out, warm_ref, rtol=1e-2, atol=1e-2)


def test_write_state_restores_a_cache_and_read_state_is_a_copy(lm):
    tokens = prompt(3)
    ref = H.TorchLM(lm.module)
    ref.step(tokens, 0)
    caches = ref.caches()
    state = lm.decode.make_state()
    for name in H.STATE_NAMES:
        state.write_state(name, caches[name])  # float32 arrays, stored as fp16
        np.testing.assert_array_equal(state.read_state(name), caches[name])
    copy = state.read_state("k_cache")
    copy[...] = 123.0  # a copy: the state does not change
    np.testing.assert_array_equal(state.read_state("k_cache"), caches["k_cache"])
    out = lm.decode.predict(H.lm_inputs([5], H.PROMPT), state=state)["logits"]
    assert_logits(out, ref.step([5], H.PROMPT), "decode after write_state")
    # and a state can be reset by writing zeros: the result is that of a fresh state
    for name in H.STATE_NAMES:
        state.write_state(name, np.zeros(H.CACHE_SHAPE))
    out = lm.decode.predict(H.lm_inputs([5], H.PROMPT), state=state)["logits"]
    assert_logits(out, H.TorchLM(lm.module).step([5], H.PROMPT), "decode after zeroing the state")


def test_failed_prediction_leaves_state_unchanged(lm, counter):
    model = counter.model
    state = model.make_state()
    x = np.random.default_rng(4).standard_normal((256, 256)).astype(np.float32)
    out = model.predict({"x": x, "idx": np.array([2], np.int32)}, state=state)
    np.testing.assert_array_equal(out["count"], np.ones((1, 4)))
    assert out["picked"][0] == counter.table[2]
    np.testing.assert_allclose(out["y"], H.chain_reference(x, counter.weights), rtol=1e-4, atol=1e-5)
    # The new counter is computed, then the gather fails: the state keeps its old value.
    with pytest.raises(coremlrt.Error, match="out of range"):
        model.predict({"x": x, "idx": np.array([9], np.int32)}, state=state)
    np.testing.assert_array_equal(state.read_state("counter"), np.ones((1, 4)))
    out = model.predict({"x": x, "idx": np.array([-1], np.int32)}, state=state)
    np.testing.assert_array_equal(out["count"], np.full((1, 4), 2.0))
    assert out["picked"][0] == counter.table[-1]
    # Same for the LM: a bad token id fails the prediction and the cache is untouched.
    lm_state = lm.prefill.make_state()
    lm.prefill.predict(H.lm_inputs(prompt(5), 0), state=lm_state)
    before = {n: lm_state.read_state(n) for n in H.STATE_NAMES}
    with pytest.raises(coremlrt.Error):
        lm.decode.predict(H.lm_inputs([H.VOCAB + 7], H.PROMPT), state=lm_state)
    for name in H.STATE_NAMES:
        np.testing.assert_array_equal(lm_state.read_state(name), before[name])


# -- 2. multifunction API ------------------------------------------------------------------

def test_default_function_when_none_is_named(lm):
    model = coremlrt.MLModel(lm.path)
    assert model.function_name == "prefill"
    state = model.make_state()
    ref = H.TorchLM(lm.module)
    assert_logits(model.predict(H.lm_inputs(prompt(6), 0), state=state)["logits"], ref.step(prompt(6), 0), "default")
    assert lm.decode.function_name == "decode"


def test_unknown_function_names_the_available_ones(lm):
    with pytest.raises(coremlrt.Error) as info:
        coremlrt.MLModel(lm.path, function_name="nope")
    message = str(info.value)
    assert "'nope'" in message and "'prefill'" in message and "'decode'" in message, message


def test_info_lists_functions_and_states(lm):
    result = subprocess.run([sys.executable, "-m", "coremlrt", "info", lm.path], capture_output=True, text=True,
                            timeout=60, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "functions (2)" in out, out
    assert "- prefill (default)" in out and "- decode" in out, out
    state_lines = [line.strip() for line in out.splitlines() if "_cache: state" in line]
    shape = "[" + ", ".join(map(str, H.CACHE_SHAPE)) + "]"
    assert state_lines == [f"k_cache: state float16 {shape}", f"v_cache: state float16 {shape}"] * 2, out
    assert out.count("read_state x") == 2 and out.count("write_state x") == 2, out
    assert "every op is supported by this build" in out, out


# -- 3. state sharing rules ----------------------------------------------------------------

def test_state_with_other_declarations_is_rejected(lm, other_models):
    lm_state = lm.prefill.make_state()
    lm.prefill.predict(H.lm_inputs(prompt(7), 0), state=lm_state)
    before = lm_state.read_state("k_cache")
    x = {"x": np.array([1.0], np.float32)}
    # same names, other shape
    with pytest.raises(coremlrt.Error) as info:
        other_models.other_shape.predict(x, state=lm_state)
    message = str(info.value)
    assert "the state passed" in message and "declares state" in message, message
    assert "k_cache" in message and "[2, 2, 16, 8]" in message and "[1, 2, 8, 8]" in message, message
    with pytest.raises(coremlrt.Error) as info:
        lm.decode.predict(H.lm_inputs([1], 5), state=other_models.other_shape.make_state())
    assert "the state passed" in str(info.value) and "declares state" in str(info.value), str(info.value)
    # same shape, other name
    with pytest.raises(coremlrt.Error) as info:
        other_models.other_name.predict(x, state=lm_state)
    message = str(info.value)
    assert "the state passed" in message and "declares state 'cache'" in message, message
    np.testing.assert_array_equal(lm_state.read_state("k_cache"), before)
    # the accumulators work with their own states (numpy reference: s + x summed)
    own = other_models.other_shape.make_state()
    for step in (1, 2):
        out = other_models.other_shape.predict(x, state=own)["y"]
        assert out[0] == pytest.approx(step * 2 * 128)


def test_stateful_model_without_state_raises(lm):
    with pytest.raises(coremlrt.Error) as info:
        lm.decode.predict(H.lm_inputs([1], 0))
    assert "pass a state made by make_state()" in str(info.value)
    assert "k_cache" in str(info.value)


def test_stateless_model_given_a_state_raises(lm, other_models):
    with pytest.raises(coremlrt.Error, match="declares no states, but a state was passed"):
        other_models.stateless.predict({"x": np.ones(4, np.float32)}, state=lm.decode.make_state())
    with pytest.raises(coremlrt.Error, match="declares no states"):
        other_models.stateless.make_state()
    np.testing.assert_array_equal(other_models.stateless.predict({"x": np.arange(4.0)})["y"], 2 * np.arange(4.0))


def test_batch_predict_with_state_raises(lm):
    state = lm.decode.make_state()
    batch = [H.lm_inputs([1], 0), H.lm_inputs([2], 0)]
    with pytest.raises(coremlrt.Error, match="State can only be used for unbatched predictions"):
        lm.decode.predict(batch, state=state)
    with pytest.raises(coremlrt.Error, match="pass a state made by make_state"):
        lm.decode.predict(batch)
    with pytest.raises(TypeError, match="MLState"):
        lm.decode.predict(H.lm_inputs([1], 0), state={"k_cache": np.zeros(H.CACHE_SHAPE)})
    assert not np.any(state.read_state("k_cache"))


def test_write_state_checks_name_and_shape(lm):
    state = lm.decode.make_state()
    with pytest.raises(coremlrt.Error) as info:
        state.write_state("k_cache", np.zeros((2, 2, 16, 4), np.float32))
    message = str(info.value)
    assert "k_cache" in message and "[2, 2, 16, 8]" in message and "[2, 2, 16, 4]" in message, message
    with pytest.raises(coremlrt.Error) as info:
        state.write_state("nope", np.zeros(H.CACHE_SHAPE, np.float32))
    assert "'nope'" in str(info.value) and "k_cache" in str(info.value) and "v_cache" in str(info.value)
    with pytest.raises(coremlrt.Error) as info:
        state.read_state("nope")
    assert "'nope'" in str(info.value)
    with pytest.raises(coremlrt.Error):
        state.write_state("k_cache", np.full(H.CACHE_SHAPE, "a"))
    assert not np.any(state.read_state("k_cache"))  # nothing was written
    assert "k_cache" in repr(state) and "v_cache" in repr(state)


def test_concurrent_predictions_on_one_state(counter):
    """Two threads predict with one state: while one prediction runs, another one gets
    coremlrt.Error; every prediction that succeeds counts exactly once."""
    model = counter.model
    state = model.make_state()
    rng = np.random.default_rng(8)
    x = rng.standard_normal((256, 256)).astype(np.float32)
    expected_y = H.chain_reference(x, counter.weights)
    inputs = {"x": x, "idx": np.array([1], np.int32)}
    counts, collisions, unexpected = [], [], []
    lock = threading.Lock()
    stop = threading.Event()

    def attempt():
        try:
            out = model.predict(inputs, state=state)
        except coremlrt.Error as exc:
            with lock:
                (collisions if "already in use by another prediction" in str(exc) else unexpected).append(str(exc))
            return
        with lock:
            counts.append(float(out["count"][0, 0]))
        if not np.allclose(out["y"], expected_y, rtol=1e-4, atol=1e-5):
            with lock:
                unexpected.append("wrong y")

    def background():
        while not stop.is_set():
            attempt()

    thread = threading.Thread(target=background)
    thread.start()
    deadline = time.time() + 20
    try:
        while time.time() < deadline and (len(collisions) < 3 or len(counts) < 6) and len(counts) < 1000:
            attempt()
    finally:
        stop.set()
        thread.join()
    assert not unexpected, unexpected[:3]
    assert collisions, "no overlap observed in 20 s"
    # No prediction was lost or doubled, whatever the interleaving: counter == successes.
    assert sorted(counts) == [float(i) for i in range(1, len(counts) + 1)]
    np.testing.assert_array_equal(state.read_state("counter"), np.full((1, 4), float(len(counts))))

    # write_state while a prediction uses the state is refused too.
    stop.clear()
    refused = []
    thread = threading.Thread(target=background)
    thread.start()
    try:
        deadline = time.time() + 20
        while time.time() < deadline and not refused:
            try:
                state.write_state("counter", np.zeros((1, 4)))
            except coremlrt.Error as exc:
                refused.append(str(exc))
            time.sleep(0.001)
    finally:
        stop.set()
        thread.join()
    assert not unexpected, unexpected[:3]
    assert refused and "while a prediction is using it" in refused[0], refused


# -- 4. weight sharing between function instances, measured ---------------------------------

def _rss():
    """(resident, shared file-backed) bytes of this process, from /proc/self/statm."""
    fields = open("/proc/self/statm").read().split()
    page = os.sysconf("SC_PAGE_SIZE")
    return int(fields[1]) * page, int(fields[2]) * page


@pytest.fixture(scope="module")
def weight_sharing(workdir, coremlrt_backend):
    path, w1, b, w2 = H.shared_weight_package(workdir)
    weights_file = os.path.join(path, "Data", "com.apple.CoreML", "weights", "weight.bin")
    weight_bytes = w1.nbytes + w2.nbytes + b.nbytes
    x = np.random.default_rng(9).standard_normal((1, w1.shape[0])).astype(np.float32)
    warm = coremlrt.MLModel(H.stateless_package(workdir, "warmup"))  # extension and allocator warmed up
    warm.predict({"x": np.ones(4, np.float32)})
    # A model large enough for a backend to take: its libraries (OpenVINO's CPU plugin, ~25 MiB
    # of file-backed pages) are loaded on first use, before anything is measured.
    warm_path, _, _ = H.counter_package(workdir, name="warmup_backend", size=64, depth=8)
    warm = coremlrt.MLModel(warm_path, backend=None if coremlrt_backend is None else coremlrt_backend)
    warm.predict({"x": np.ones((64, 64), np.float32), "idx": np.zeros(1, np.int32)}, state=warm.make_state())
    rss0, file0 = _rss()
    first = coremlrt.MLModel(path, function_name="first")
    y1 = first.predict({"x": x})["y"]
    rss1, file1 = _rss()
    second = coremlrt.MLModel(path, function_name="second")
    y2 = second.predict({"x": x})["y"]
    rss2, file2 = _rss()
    mib = 1 << 20
    print(f"\nweight sharing: weights {weight_bytes / mib:.1f} MiB (weight.bin {os.path.getsize(weights_file) / mib:.1f} MiB)"
          f"\n  function 'first' loaded + predicted:  RSS +{(rss1 - rss0) / mib:.1f} MiB (file-backed +{(file1 - file0) / mib:.1f})"
          f"\n  function 'second' loaded + predicted: RSS +{(rss2 - rss1) / mib:.1f} MiB (file-backed +{(file2 - file1) / mib:.1f})")
    return types.SimpleNamespace(first=first, second=second, y1=y1, y2=y2, x=x, w1=w1, b=b, w2=w2,
                                 weight_bytes=weight_bytes, weights_file=weights_file,
                                 first_cost=rss1 - rss0, first_file_cost=file1 - file0,
                                 second_cost=rss2 - rss1, second_file_cost=file2 - file1)


def test_shared_weights_stored_once_and_results_correct(weight_sharing):
    w = weight_sharing
    # coremltools deduplicated the consts across the functions: one copy in weight.bin
    assert os.path.getsize(w.weights_file) < 1.2 * w.weight_bytes
    assert w.first.weights_bytes < 1.2 * w.weight_bytes
    np.testing.assert_allclose(w.y1, H.shared_weight_reference(w.x, w.w1, w.b, w.w2, False), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w.y2, H.shared_weight_reference(w.x, w.w1, w.b, w.w2, True), rtol=1e-4, atol=1e-4)
    # The weight file is mapped once per process: the second instance maps no new file pages.
    # (Where a backend compiled the function, it may map its own compiled copy of the weights
    # from its cache: tests/python/conftest.py, KNOWN_DIFFERENCES.)
    if all(p["backend"] != "openvino" for p in w.second.placements()):
        assert w.second_file_cost < 0.1 * w.weight_bytes, w.second_file_cost


def test_instances_read_the_mapped_weights_in_place(weight_sharing):
    """'first' reads W1 with linear, 'second' with matmul (transpose_y); both read W2 with
    linear. Each instance may add its plan, descriptions and an execution context (a few
    [1, 2048] fp32 buffers: kilobytes), not a copy of the weights: a tenth of the weights
    (3.2 MiB) bounds that with room for allocator noise. The first instance also maps and
    touches the file once (file-backed pages) but copies nothing.

    Kernels that widen or transpose constant weights into their own memory at load fail
    this: with such a linear/matmul the figures were +80 MiB for 'first' and +32 MiB for
    'second' (32 MiB of weights)."""
    w = weight_sharing
    assert w.first_cost - w.first_file_cost < 0.1 * w.weight_bytes, (w.first_cost, w.first_file_cost)
    assert w.second_cost < 0.1 * w.weight_bytes, (w.second_cost, w.weight_bytes)


def test_shared_weights_stay_on_our_kernels_unless_copies_are_allowed(weight_sharing, coremlrt_backend):
    """A function that shares its weights with another function of its package runs on our
    kernels under every backend, forced onto OpenVINO too, each op saying why
    (src/backends/openvino/backend.cc, worth_running); weight_copies_limit_bytes lets OpenVINO
    take it, with the same results."""
    w = weight_sharing
    for model in (w.first, w.second):
        for p in model.placements():
            assert p["backend"] in ("reference", "folded"), p
            if coremlrt_backend == "openvino" and p["backend"] == "reference":
                assert "other functions of its package read too" in p["reason"], p
    if coremlrt_backend != "openvino":
        return
    copies = coremlrt.MLModel(w.first.package_path, function_name="second", weight_copies_limit_bytes=1 << 30)
    placed = {p["op_type"]: p["backend"] for p in copies.placements() if p["backend"] != "folded"}
    assert placed == {"matmul": "openvino", "relu": "openvino", "add": "openvino", "linear": "openvino"}, placed
    np.testing.assert_allclose(copies.predict({"x": w.x})["y"], w.y2, rtol=1e-4, atol=1e-4)


# -- 5. short alternating stress with idle gaps past the linger period ---------------------

def test_alternating_stress_with_linger(lm):
    linger = 0.05
    models = types.SimpleNamespace(prefill=coremlrt.MLModel(lm.path, function_name="prefill", context_linger=linger),
                                   decode=coremlrt.MLModel(lm.path, function_name="decode", context_linger=linger))
    state = models.decode.make_state()
    steps = 0
    for round_index in range(4):
        ref = H.TorchLM(lm.module)
        if round_index % 2:
            state = models.prefill.make_state()  # a new state, made by the other instance
        else:
            for name in H.STATE_NAMES:  # or the old one, zeroed
                state.write_state(name, np.zeros(H.CACHE_SHAPE, np.float32))
        steps += run_script(models, state, ref, seed=10 + round_index, gap=linger * 2.5 if round_index < 2 else 0)
        time.sleep(linger * 3)  # every context of both instances lingers out
    for model in (models.prefill, models.decode):
        stats = model.statistics()
        assert stats["contexts_reset"] >= 2, stats
    assert steps == 4 * 8
