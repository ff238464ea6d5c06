"""KV-cache steps updated in place in the state's buffer (src/runtime/state_update.h).

A cache write `cache[:, p] = kv` on a state reaches the engine as read_state -> slice_update ->
write_state (with casts fp16 -> fp32 -> fp16 around the slice_update in fp32 programs). The
planner runs such a chain as one step that writes only the update into the state's buffer.
These tests check where the chain's ops run, that results equal a numpy model of the cache,
that a step copies no more state bytes than it writes (coremlrt.state_traffic()), that a
failed prediction leaves the state as it was, and that a value read from the state before the
update keeps its old contents.

The models are built with coremltools' MIL builder: a state ``cache`` fp16 [2, 8, 4]; inputs
kv fp32 [1, 1, 4] (written at row `pos` of layer 0), pos int32 [1], idx int32 [1] (picks an
entry of a 4-entry table after the update: outside [-4, 4) the prediction fails). Values are
fp16-exact, so results are compared exactly.
"""

import numpy as np
import pytest

import coremlrt
import lm_helpers as H

LAYERS, POSITIONS, DIM = 2, 8, 4
SHAPE = (LAYERS, POSITIONS, DIM)
TABLE = np.array([10.0, 20.0, 30.0, 40.0], np.float32)
UPDATE_BYTES = DIM * 2  # one fp16 row
SCATTER = ("scatter_fp16", "scatter_fp32")
IN_PLACE = ("fp16", "fp32") + SCATTER


def _package(directory, name, form):
    """form: "fp16" (slice_update on the fp16 state), "fp32" (casts around it, as coremltools
    writes fp32 programs), "early_read" (fp16, plus a value read before the update and used
    after it), "early_slice" (the same with layer 0 of the value read, a slice that is a view of
    the state's buffer: src/ops/slice.cc), "reused" (fp16, the value read is also used after the
    update), or
    "scatter_fp16" / "scatter_fp32": a scatter_nd (mode update) in the slice_update's place, as
    Core AI programs write a cache row (python/coremlrt/coreai/_ops_shape.py window_scatter);
    it writes the row twice, kv / 2 then kv, so the last write must win."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types as mt

    specs = [mb.TensorSpec((1, 1, DIM), dtype=mt.fp32), mb.TensorSpec((1,), dtype=mt.int32),
             mb.TensorSpec((1,), dtype=mt.int32), mb.StateTensorSpec(SHAPE, dtype=mt.fp16)]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS18)
    def prog(kv, pos, idx, cache):
        begin = mb.concat(values=[np.array([0], np.int32), pos, np.array([0], np.int32)], axis=0)
        end = mb.concat(values=[np.array([1], np.int32), mb.add(x=pos, y=np.int32(1)), np.array([DIM], np.int32)],
                        axis=0)
        early = mb.read_state(input=cache) if form in ("early_read", "early_slice") else None
        if form == "early_slice":
            early = mb.slice_by_index(x=early, begin=[0, 0, 0], end=[1, POSITIONS, DIM])
        current = mb.read_state(input=cache)
        if form.startswith("scatter"):
            row = mb.concat(values=[np.array([0], np.int32), pos], axis=0)
            indices = mb.stack(values=[row, row], axis=0)
            flat = mb.reshape(x=kv, shape=[1, DIM])
            rows = mb.concat(values=[mb.mul(x=flat, y=np.float32(0.5)), flat], axis=0)
            if form == "scatter_fp32":
                wide = mb.cast(x=current, dtype="fp32")
                updated = mb.cast(x=mb.scatter_nd(data=wide, indices=indices, updates=rows, mode="update"),
                                  dtype="fp16")
            else:
                updated = mb.scatter_nd(data=current, indices=indices, updates=mb.cast(x=rows, dtype="fp16"),
                                        mode="update")
        elif form == "fp32":
            wide = mb.cast(x=current, dtype="fp32")
            updated = mb.cast(x=mb.slice_update(x=wide, update=kv, begin=begin, end=end), dtype="fp16")
        else:
            updated = mb.slice_update(x=current, update=mb.cast(x=kv, dtype="fp16"), begin=begin, end=end)
        new = mb.coreml_update_state(state=cache, value=updated)
        outputs = [mb.cast(x=new, dtype="fp32", name="cache_out")]
        if form in ("early_read", "early_slice"):
            outputs.append(mb.cast(x=early, dtype="fp32", name="before"))
        if form == "reused":
            outputs.append(mb.cast(x=current, dtype="fp32", name="before"))
        outputs.append(mb.gather(x=TABLE, indices=idx, axis=0, validate_indices=True, name="picked"))
        return tuple(outputs)

    return H._save(prog, directory, name)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    directory = tmp_path_factory.mktemp("state_update")
    paths = {form: _package(directory, form, form) for form in ("fp16", "fp32", "early_read", "early_slice", "reused") + SCATTER}
    loaded = {}
    for backend in ("reference", "openvino"):
        if backend not in coremlrt.available_backends():
            continue
        for form, path in paths.items():
            loaded[backend, form] = coremlrt.MLModel(path, backend=backend)
    return loaded


def _rows(seed, n):
    """n fp16-exact kv rows."""
    return np.random.default_rng(seed).standard_normal((n, 1, 1, DIM)).astype(np.float16).astype(np.float32)


def _step(model, state, kv, pos, idx=0):
    return model.predict({"kv": kv, "pos": np.array([pos], np.int32), "idx": np.array([idx], np.int32)}, state=state)


BACKENDS = ["reference", "openvino"]


def _model(models, backend, form):
    if (backend, form) not in models:
        pytest.skip(f"this build has no backend {backend}")
    return models[backend, form]


def _writes(form):
    """fp16 rows a step writes."""
    return 2 if form in SCATTER else 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", IN_PLACE)
def test_chain_runs_as_one_in_place_step(models, backend, form):
    placements = _model(models, backend, form).placements()
    update = "scatter_nd" if form in SCATTER else "slice_update"
    chain = [p for p in placements if p["op_type"] in ("read_state", update, "write_state", "cast")
             and "in place" in p["reason"]]
    expected = {"read_state": 1, update: 1, "write_state": 1, "cast": 2 if form.endswith("fp32") else 0}
    assert {t: sum(p["op_type"] == t for p in chain) for t in expected} == expected, placements
    for p in chain:
        assert p["backend"] == "reference" and "state 'cache'" in p["reason"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_state_with_other_readers_stays(models, backend):
    """A read_state whose value is also read after the update keeps its own step."""
    placements = _model(models, backend, "reused").placements()
    fused = {p["op_type"] for p in placements if "in place" in p["reason"]}
    assert fused == {"slice_update", "write_state"}, placements


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", ["early_read", "reused"] + list(IN_PLACE))
def test_cache_matches_numpy_over_steps(models, backend, form):
    model = _model(models, backend, form)
    state = model.make_state()
    expected = np.zeros(SHAPE, np.float32)
    rows = _rows(1, POSITIONS + 2)
    for step, kv in enumerate(rows):
        pos = step % POSITIONS
        before = expected.copy()
        expected[0, pos] = kv[0, 0]
        out = _step(model, state, kv, pos, idx=step % 4)
        np.testing.assert_array_equal(out["cache_out"], expected, err_msg=f"step {step}")
        if "before" in out:
            np.testing.assert_array_equal(out["before"], before, err_msg=f"step {step}")
        assert out["picked"][0] == TABLE[step % 4]
        np.testing.assert_array_equal(state.read_state("cache"), expected.astype(np.float16))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", IN_PLACE)
def test_step_copies_only_what_it_writes(models, backend, form):
    model = _model(models, backend, form)
    state = model.make_state()
    _step(model, state, _rows(2, 1)[0], 0)  # the first step may find the state shared
    before = coremlrt.state_traffic()
    steps = 5
    for i, kv in enumerate(_rows(3, steps)):
        _step(model, state, kv, i + 1)
    after = coremlrt.state_traffic()
    written = after["bytes_written"] - before["bytes_written"]
    copied = after["bytes_copied"] - before["bytes_copied"]
    assert written == steps * UPDATE_BYTES * _writes(form)
    # What is copied is the row each step overwrites, kept to restore it on failure.
    assert copied == written


@pytest.mark.parametrize("backend", BACKENDS)
def test_update_while_the_value_read_is_still_used_copies_the_state(models, backend):
    """The value read is output after the update: the update goes into a copy of the state."""
    model = _model(models, backend, "reused")
    state = model.make_state()
    before = coremlrt.state_traffic()
    _step(model, state, _rows(4, 1)[0], 3)
    after = coremlrt.state_traffic()
    assert after["bytes_copied"] - before["bytes_copied"] == np.prod(SHAPE) * 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", ["early_read", "early_slice"])
def test_value_read_before_the_update_keeps_its_contents(models, backend, form):
    """`early` (or its layer 0) views the state's buffer when the update runs: the update writes
    a copy."""
    model = _model(models, backend, form)
    state = model.make_state()
    first = _rows(5, 1)[0]
    _step(model, state, first, 2)
    before = coremlrt.state_traffic()
    out = _step(model, state, _rows(6, 1)[0], 2)
    after = coremlrt.state_traffic()
    expected_before = np.zeros(SHAPE if form == "early_read" else (1, POSITIONS, DIM), np.float32)
    expected_before[0, 2] = first[0, 0]
    np.testing.assert_array_equal(out["before"], expected_before)
    copied = after["bytes_copied"] - before["bytes_copied"]
    if form == "early_slice" and backend == "openvino":
        # The slice and its cast run in an OpenVINO region before the update, which then finds
        # no other view of the buffer and writes in place (keeping the row it overwrites).
        assert copied == UPDATE_BYTES
    else:
        assert copied == np.prod(SHAPE) * 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", IN_PLACE)
def test_failed_prediction_restores_the_rows_it_wrote(models, backend, form):
    model = _model(models, backend, form)
    state = model.make_state()
    rows = _rows(7, 3)
    _step(model, state, rows[0], 1)
    _step(model, state, rows[1], 2)
    committed = state.read_state("cache")
    # The update of row 1 runs, then the gather fails: the row must come back.
    with pytest.raises(coremlrt.Error, match="out of range"):
        _step(model, state, rows[2], 1, idx=9)
    np.testing.assert_array_equal(state.read_state("cache"), committed)
    # The state is usable afterwards, from the committed value.
    out = _step(model, state, rows[2], 3)
    expected = committed.astype(np.float32)
    expected[0, 3] = rows[2][0, 0]
    np.testing.assert_array_equal(out["cache_out"], expected)


def test_torch_lm_decode_updates_its_caches_in_place(tmp_path):
    """The torch LM of test_states.py (fp32 program, fp16 caches): every cache write of its
    decode function is planned in place, and a decode step copies only the rows it writes."""
    path, module = H.build_lm_package(tmp_path)
    for backend in [b for b in ("reference", "openvino") if b in coremlrt.available_backends()]:
        decode = coremlrt.MLModel(path, function_name="decode", backend=backend)
        prefill = coremlrt.MLModel(path, function_name="prefill", backend=backend)
        placements = decode.placements()
        updates = [p for p in placements if p["op_type"] == "slice_update"]
        assert updates and all("in place" in p["reason"] for p in updates), updates
        state = decode.make_state()
        ref = H.TorchLM(module)
        tokens = np.random.default_rng(0).integers(0, H.VOCAB, H.PROMPT).astype(np.int32)
        prefill.predict(H.lm_inputs(tokens, 0), state=state)
        ref.step(tokens, 0)
        before = coremlrt.state_traffic()
        out = decode.predict(H.lm_inputs([3], H.PROMPT), state=state)["logits"]
        after = coremlrt.state_traffic()
        np.testing.assert_allclose(out, ref.step([3], H.PROMPT), rtol=1e-4, atol=1e-4)
        written = after["bytes_written"] - before["bytes_written"]
        # One position of k and v per layer: LAYERS * 2 * DIM fp16 values.
        assert written == H.LAYERS * 2 * H.DIM * 2
        assert after["bytes_copied"] - before["bytes_copied"] == written
