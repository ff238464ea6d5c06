"""coremlrt.export_onnx: every export passes onnx.checker's full check, and ONNX Runtime on the
export gives the expected values (the corpus' references, at its tolerances) and agrees with
coremlrt on the same inputs, through coremlrt.onnx_export.runner (inputs converted as
MLModel.predict converts them, states carried between calls).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import coremlrt  # noqa: E402
from coremlrt.onnx_export import export_onnx, unsupported_ops  # noqa: E402
from coremlrt.onnx_export.runner import ExportedModel  # noqa: E402
import corpus  # noqa: E402
import lm_helpers as H  # noqa: E402

# Cases made by tests/python/fixtures.py (no shared corpus needed) and the shared corpus' cases.
FIXTURE_CASES = ["fixture_add", "fixture_stateful_accumulator", "fixture_compressed"]

# ONNX Runtime's CPU provider has no fp16 kernel for some ops (Add among them): it runs them in
# fp32 between casts that it then removes, also with every graph optimization off, so the
# fp16 rounding of the values in between is lost. fixture_add (x + 1 in fp16, expected bit-exact)
# then differs by up to one fp16 step of the largest values (measured: 0.018; |x| < 64, where
# fp16's step is 2^-5): that is its tolerance here. The export itself keeps the fp16 types.
TOLERANCE_OVERRIDES = {"fixture_add": {"rtol": 0.0, "atol": 2.0 ** -5}}


def _array_outputs(outputs):
    return {k: v for k, v in outputs.items() if isinstance(v, np.ndarray)}


def _check_case(name, tmp_path):
    case = dict(corpus.load_case(name), **TOLERANCE_OVERRIDES.get(name, {}))
    path = corpus.model_path(name, case)
    functions = case.get("step_functions") or [case.get("function_name")] * case["steps"]
    runners, models = {}, {}
    for function in set(functions):
        out = tmp_path / f"{function or 'main'}.onnx"
        export_onnx(path, out, function=function)
        onnx.checker.check_model(str(out), full_check=True)
        models[function] = coremlrt.MLModel(path, function_name=function)
        runners[function] = ExportedModel(models[function], out)
    first = functions[0]
    # One state per runtime, carried across the steps and shared by every function.
    onnx_state = runners[first].make_state() if runners[first].states else None
    native_state = models[first].make_state() if onnx_state is not None else None
    for step, function in enumerate(functions):
        inputs, expected = corpus.step_arrays(name, case, step)
        got = runners[function].predict(inputs, onnx_state)
        problems = corpus.mismatches(case, expected, got)
        assert not problems, f"step {step}, against the reference: " + "; ".join(problems)
        native = _array_outputs(models[function].predict(inputs, state=native_state))
        problems = corpus.mismatches(case, native, got)
        assert not problems, f"step {step}, against coremlrt: " + "; ".join(problems)


@pytest.mark.parametrize("name", FIXTURE_CASES)
def test_fixture_case_through_onnx(name, tmp_path):
    _check_case(name, tmp_path)


@pytest.mark.parametrize("name", corpus.case_names())
def test_corpus_case_through_onnx(name, tmp_path):
    _check_case(name, tmp_path)


def _ops(path):
    return [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node]


def test_affine_weights_stay_quantized_and_palettes_are_decoded(tmp_path):
    """fixture_compressed: int4 blocks become a block-wise DequantizeLinear of the same codes (stored
    as ONNX INT4); palettized and sparse weights are decoded into dense initializers."""
    case = corpus.load_case("fixture_compressed")
    out = tmp_path / "compressed.onnx"
    export_onnx(corpus.model_path("fixture_compressed", case), out)
    model = onnx.load(str(out))
    dequantize = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dequantize) == 1
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in dequantize[0].attribute}
    assert attributes["block_size"] == 32
    codes = next(t for t in model.graph.initializer if t.name == dequantize[0].input[0])
    assert codes.data_type == onnx.TensorProto.INT4
    assert list(codes.dims) == [64, 16]  # written transposed for MatMul: [in, out]
    dense = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and list(t.dims) == [64, 16]]
    assert len(dense) == 4  # palette, sparse, sparse + palette, sparse + int8


def test_opset_below_21_decodes_int4_blocks(tmp_path):
    case = corpus.load_case("fixture_compressed")
    out = tmp_path / "compressed19.onnx"
    export_onnx(corpus.model_path("fixture_compressed", case), out, opset=19)
    assert "DequantizeLinear" not in _ops(out)
    inputs, expected = corpus.step_arrays("fixture_compressed", case, 0)
    got = ExportedModel(coremlrt.MLModel(corpus.model_path("fixture_compressed", case)), out).predict(inputs)
    assert not corpus.mismatches(case, expected, got)


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    config = H.LMConfig(max_len=40)
    path, _ = H.build_lm_package(tmp_path_factory.mktemp("lm"), seed=1, config=config)
    return path, config


def _greedy(predict_prefill, predict_decode, config, steps=32):
    prompt = np.arange(config.prompt, dtype=np.int32) % config.vocab
    logits = predict_prefill(H.lm_inputs(prompt, 0))["logits"]
    tokens = [int(np.argmax(logits[0, -1]))]
    for step in range(steps):
        logits = predict_decode(H.lm_inputs([tokens[-1]], config.prompt + step))["logits"]
        tokens.append(int(np.argmax(logits[0, -1])))
    return tokens


def test_stateful_lm_prefill_and_32_decode_steps_give_coremlrt_tokens(lm, tmp_path):
    """The multifunction LM: each function exported on its own; the KV caches become inputs and
    `_out` outputs that the caller feeds back, and the greedy tokens equal coremlrt's."""
    path, config = lm
    assert config.prompt + 32 <= config.max_len
    runners, models = {}, {}
    for function in ("prefill", "decode"):
        out = tmp_path / f"{function}.onnx"
        export_onnx(path, out, function=function)
        models[function] = coremlrt.MLModel(path, function_name=function)
        runners[function] = ExportedModel(models[function], out)
        assert runners[function].states == {"k_cache": "k_cache_out", "v_cache": "v_cache_out"}
    onnx_state = runners["prefill"].make_state()
    onnx_tokens = _greedy(lambda d: runners["prefill"].predict(d, onnx_state),
                          lambda d: runners["decode"].predict(d, onnx_state), config)
    native_state = models["prefill"].make_state()
    native_tokens = _greedy(lambda d: models["prefill"].predict(d, native_state),
                            lambda d: models["decode"].predict(d, native_state), config)
    assert onnx_tokens == native_tokens
    for name in ("k_cache", "v_cache"):
        np.testing.assert_allclose(onnx_state[name].astype(np.float32), native_state.read_state(name),
                                   rtol=0, atol=2e-3)


def test_fp32_option_widens_fp16_programs(tmp_path):
    case = corpus.load_case("fixture_stateful_accumulator")
    path = corpus.model_path("fixture_stateful_accumulator", case)
    out = tmp_path / "wide.onnx"
    export_onnx(path, out, fp32=True)
    model = onnx.load(str(out))
    types = {t.elem_type for t in [*model.graph.input, *model.graph.output] for t in [t.type.tensor_type]}
    assert onnx.TensorProto.FLOAT16 not in types
    assert all(t.data_type != onnx.TensorProto.FLOAT16 for t in model.graph.initializer)


def test_external_data_writes_the_weights_beside_the_model(tmp_path):
    case = corpus.load_case("fixture_compressed")
    out = tmp_path / "external.onnx"
    export_onnx(corpus.model_path("fixture_compressed", case), out, external_data=True)
    assert (tmp_path / "external.onnx.data").stat().st_size >= 4 * 64 * 16 * 4  # the four dense weights
    inputs, expected = corpus.step_arrays("fixture_compressed", case, 0)
    got = ExportedModel(coremlrt.MLModel(corpus.model_path("fixture_compressed", case)), out).predict(inputs)
    assert not corpus.mismatches(case, expected, got)


def _random_model(tmp_path):
    from coremltools.converters.mil import Builder as mb
    import coremltools as ct

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3))])
    def prog(x):
        return mb.add(x=x, y=mb.random_normal(shape=np.array([2, 3], np.int32), seed=1))

    model = ct.convert(prog, convert_to="mlprogram", skip_model_load=True)
    path = str(tmp_path / "random.mlpackage")
    model.save(path)
    return path


def test_an_op_without_onnx_form_is_refused_with_its_name_and_reason(tmp_path):
    path = _random_model(tmp_path)
    problems = unsupported_ops(path)
    assert [p[0] for p in problems] == ["random_normal"]
    assert "generator cannot reproduce" in problems[0][2]
    with pytest.raises(coremlrt.Error, match=r"random_normal producing '.*': random values"):
        export_onnx(path, tmp_path / "random.onnx")
    assert not (tmp_path / "random.onnx").exists()


def test_control_flow_becomes_loop(tmp_path):
    from coremltools.converters.mil import Builder as mb
    import coremltools as ct

    @mb.program(input_specs=[mb.TensorSpec(shape=(1,))])
    def prog(x):
        def cond(i):
            return mb.less(x=i, y=10.0)

        def body(i):
            return mb.add(x=i, y=1.5)

        return mb.while_loop(_cond=cond, _body=body, loop_vars=(x,))

    path = str(tmp_path / "loop.mlpackage")
    ct.convert(prog, convert_to="mlprogram", skip_model_load=True, compute_precision=ct.precision.FLOAT32).save(path)
    out = tmp_path / "loop.onnx"
    export_onnx(path, out)
    assert "Loop" in _ops(out)
    model = coremlrt.MLModel(path)
    runner = ExportedModel(model, out)
    for start in (-3.0, 9.0, 12.0):  # several iterations, one, none
        x = np.array([start], np.float32)
        want = model.predict({"x": x})
        got = runner.predict({"x": x})
        assert set(got) == set(want)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def test_bad_arguments_are_named(tmp_path):
    case = corpus.load_case("fixture_add")
    path = corpus.model_path("fixture_add", case)
    with pytest.raises(coremlrt.Error, match="no function 'nope'"):
        export_onnx(path, tmp_path / "x.onnx", function="nope")
    with pytest.raises(ValueError, match="opset must be an int from 18"):
        export_onnx(path, tmp_path / "x.onnx", opset=11)
    with pytest.raises(coremlrt.Error, match="does not exist"):
        export_onnx(tmp_path / "missing.mlpackage", tmp_path / "x.onnx")
    with pytest.raises(TypeError):
        export_onnx(3, tmp_path / "x.onnx")


def test_cli_export_and_check(tmp_path):
    case = corpus.load_case("fixture_add")
    path = corpus.model_path("fixture_add", case)
    out = tmp_path / "add.onnx"
    run = subprocess.run([sys.executable, "-m", "coremlrt", "export", path, "-o", str(out)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    assert os.path.isfile(out) and str(out) in run.stdout
    run = subprocess.run([sys.executable, "-m", "coremlrt", "export", "--check", path], capture_output=True, text=True)
    assert run.returncode == 0 and "every op has an ONNX form" in run.stdout, run.stdout + run.stderr
    refused = _random_model(tmp_path)
    run = subprocess.run([sys.executable, "-m", "coremlrt", "export", "--check", refused], capture_output=True, text=True)
    assert run.returncode == 2 and "random_normal" in run.stdout, run.stdout + run.stderr
    run = subprocess.run([sys.executable, "-m", "coremlrt", "export", refused, "-o", str(tmp_path / "r.onnx")],
                         capture_output=True, text=True)
    assert run.returncode == 1 and "random_normal" in run.stderr


def test_a_quantized_weight_read_in_both_branches_of_a_cond(tmp_path):
    """A packed weight is written once, in the main graph, where both If branches can read it."""
    from coremltools.converters.mil import Builder as mb
    import coremltools as ct

    codes = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4))], opset_version=ct.target.iOS16)
    def prog(x):
        w = mb.constexpr_affine_dequantize(quantized_data=codes, zero_point=np.int8(1), scale=np.float32(0.25), axis=0)
        pred = mb.greater(x=mb.reduce_sum(x=x), y=0.0)
        return mb.cond(pred=pred, _true_fn=lambda: mb.linear(x=x, weight=w),
                       _false_fn=lambda: mb.mul(x=mb.linear(x=x, weight=w), y=2.0))

    path = str(tmp_path / "cond.mlpackage")
    ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS16, skip_model_load=True,
               compute_precision=ct.precision.FLOAT32).save(path)
    out = tmp_path / "cond.onnx"
    export_onnx(path, out)
    assert "If" in _ops(out) and "DequantizeLinear" in _ops(out)
    model = coremlrt.MLModel(path)
    runner = ExportedModel(model, out)
    for sign in (1.0, -1.0):
        x = sign * np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
        want, got = model.predict({"x": x}), runner.predict({"x": x})
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


def test_flexible_inputs_become_symbolic_dims_that_say_the_allowed_sizes(tmp_path):
    """ONNX has no ranges or enumerations: a dim the model lets vary is symbolic, and the graph
    input's doc_string says what Core ML allows; ONNX Runtime runs the export at those sizes."""
    import warnings

    ct = pytest.importorskip("coremltools")
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    traced = torch.jit.trace(net, torch.zeros(2, 8))
    shapes = {"range": ct.Shape(shape=(ct.RangeDim(1, 16, default=2), 8)),
              "enumerated": ct.EnumeratedShapes(shapes=[(1, 8), (3, 8)], default=(1, 8))}
    want_doc = {"range": "Core ML sizes: 1..16 x 8", "enumerated": "Core ML sizes: one of [1, 8], [3, 8]"}
    for kind, shape in shapes.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=shape)], outputs=[ct.TensorType(name="y")],
                               compute_precision=ct.precision.FLOAT32, minimum_deployment_target=ct.target.iOS16)
        path = str(tmp_path / f"{kind}.mlpackage")
        model.save(path)
        out = str(tmp_path / f"{kind}.onnx")
        export_onnx(path, out)
        graph_input = onnx.load(out).graph.input[0]
        dims = [d.dim_param or d.dim_value for d in graph_input.type.tensor_type.shape.dim]
        assert dims == ["x_d0", 8]
        assert graph_input.doc_string == want_doc[kind]
        x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
        model = coremlrt.MLModel(path)
        got = ExportedModel(model, out).predict({"x": x})["y"]
        np.testing.assert_allclose(got, model.predict({"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_a_list_folded_at_load_is_read_and_exported(tmp_path):
    """make_list and list_write of constants fold at load into a list value, which is no array:
    the program view leaves it out of the known values (it once crashed the process there), so
    the export writes the list ops themselves (ops_control_flow.py)."""
    import warnings

    ct = pytest.importorskip("coremltools")
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        items = mb.make_list(init_length=2, elem_shape=[3], dtype="fp32")
        items = mb.list_write(ls=items, index=0, value=np.ones(3, np.float32))
        return mb.add(x=x, y=mb.list_gather(ls=items, indices=[0, 1]), name="y")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17,
                           compute_precision=ct.precision.FLOAT32, skip_model_load=True)
    path = str(tmp_path / "folded_list.mlpackage")
    model.save(path)
    np.testing.assert_array_equal(coremlrt.MLModel(path).predict({"x": np.zeros((2, 3), np.float32)})["y"],
                                  [[1, 1, 1], [0, 0, 0]])
    assert unsupported_ops(path) == []
    out = str(tmp_path / "folded_list.onnx")
    export_onnx(path, out)
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    model = coremlrt.MLModel(path)
    np.testing.assert_array_equal(ExportedModel(model, out).predict({"x": x})["y"], model.predict({"x": x})["y"])
