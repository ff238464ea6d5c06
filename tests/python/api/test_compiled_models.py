"""Compiled models (.mlmodelc): compile_model's folders, the MIL text reader, metadata.json.

The round trip: every model compiled, then loaded from its .mlmodelc (model.mil through the
text reader, metadata.json for the description), predicts bit-identically to the package it
came from. It runs over the shared corpus and over models built here (so that it also runs,
and covers nested blocks, multiple outputs and states, where the corpus is absent).
"""

import json
import os
import shutil

import numpy as np
import pytest

import coremlrt
from coremlrt import _core
from corpus import case_names, load_case, model_path, step_arrays
from mil_helpers import save_program


def same_outputs(expected, actual):
    """Bit-identical outputs: same names, dtypes, shapes and bits (NaN where NaN)."""
    assert expected.keys() == actual.keys()
    for name, want in expected.items():
        got = actual[name]
        if isinstance(want, np.ndarray):
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert np.array_equal(want.view(np.uint8), got.view(np.uint8)) or np.array_equal(
                want, got, equal_nan=want.dtype.kind == "f"), f"output '{name}' differs"
        else:  # a classifier's label or {label: probability}
            assert got == want, name


def check_round_trip(package, compiled_dir, steps):
    """Compiles `package`, then runs `steps` ([(function or None, inputs)]) on both, carrying
    one state per side when the model declares states."""
    compiled = coremlrt.compile_model(package, os.path.join(compiled_dir, "model.mlmodelc"))
    assert {"metadata.json", "coremlrt-source.mlmodel"} <= set(os.listdir(compiled))
    assert _core.model_structure(compiled) == _core.model_structure(package)
    functions = {f for f, _ in steps}
    originals = {f: coremlrt.MLModel(package, function_name=f) for f in functions}
    loaded = {f: coremlrt.MLModel(compiled, function_name=f) for f in functions}
    first = steps[0][0]
    stateful = bool(originals[first]._function["states"])
    state_a = originals[first].make_state() if stateful else None
    state_b = loaded[first].make_state() if stateful else None
    for function, inputs in steps:
        same_outputs(originals[function].predict(inputs, state=state_a),
                     loaded[function].predict(inputs, state=state_b))
    if stateful:
        for name in originals[first]._function["states"]:
            assert np.array_equal(state_a.read_state(name["name"]), state_b.read_state(name["name"]))
    return compiled


# -- the corpus --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", case_names() or ["(corpus absent)"])
def test_corpus_model_round_trips(name, tmp_path):
    if name == "(corpus absent)":
        pytest.skip("corpus not found (../shared/corpus or COREMLRT_CORPUS); the built models below still run")
    case = load_case(name)
    package = model_path(name, case)
    try:
        coremlrt.MLModel(package, function_name=case.get("step_functions", [case.get("function_name")])[0])
    except coremlrt.Error as exc:
        # The package itself does not run here (see test_corpus.py): the folder must still be
        # written and describe the same program.
        compiled = coremlrt.compile_model(package, str(tmp_path / "model.mlmodelc"))
        assert _core.model_structure(compiled) == _core.model_structure(package)
        pytest.xfail(f"the package does not load: {exc}")
    functions = case.get("step_functions") or [case.get("function_name")] * case["steps"]
    steps = [(function, step_arrays(name, case, step)[0]) for step, function in enumerate(functions)]
    compiled = check_round_trip(package, str(tmp_path), steps)
    if case["format"] == "mlprogram":
        with open(os.path.join(compiled, "model.mil")) as f:
            assert f.read().startswith("program(1.")


# -- models built here -------------------------------------------------------------------------

def _mb():
    from coremltools.converters.mil import Builder as mb
    return mb


def test_linear_with_weights_round_trips(tmp_path):
    import coremltools as ct
    mb = _mb()
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((8, 16)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 16))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.relu(x=mb.linear(x=x, weight=weight, bias=bias), name="y")

    package = save_program(prog, tmp_path)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    compiled = check_round_trip(package, str(tmp_path), [(None, {"x": x})])
    text = open(os.path.join(compiled, "model.mil")).read()
    # iOS18 programs print as Core ML 1.3 text: short scalars, weights by file and offset.
    assert text.startswith("program(1.3)\n")
    assert 'BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64))' in text
    assert os.path.isfile(os.path.join(compiled, "weights", "weight.bin"))
    np.testing.assert_allclose(coremlrt.MLModel(compiled).predict({"x": x})["y"],
                               np.maximum(x @ weight.T + bias, 0), rtol=1e-5, atol=1e-5)


def test_ios16_fp16_split_and_immediates_round_trip(tmp_path):
    import coremltools as ct
    mb = _mb()

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 6))], opset_version=ct.target.iOS16)
    def prog(x):
        a, b = mb.split(x=x, num_splits=2, axis=1)
        c = mb.mul(x=a, y=np.array([-0.1, 3.5e-3, 7.0], dtype=np.float32))
        d = mb.clip(x=b, alpha=-0.25, beta=1e30)
        e = mb.reduce_sum(x=mb.concat(values=[c, d], axis=1), axes=[1], keep_dims=True)
        return mb.add(x=e, y=np.float32(1.0 / 3.0), name="y"), mb.cast(x=mb.greater(x=a, y=0.0), dtype="int32", name="z")

    package = save_program(prog, tmp_path, fp16=True, target=ct.target.iOS16)
    x = np.random.default_rng(1).standard_normal((2, 6)).astype(np.float32)
    compiled = check_round_trip(package, str(tmp_path), [(None, {"x": x})])
    text = open(os.path.join(compiled, "model.mil")).read()
    # Before iOS18, scalars print as rank-0 tensors and the program is version 1.0.
    assert text.startswith("program(1.0)\n")
    assert 'name = tensor<string, []>("' in text
    assert ", tensor<fp16, [2, 3]> " in text  # split's two outputs on one line


def test_nested_blocks_round_trip(tmp_path):
    import coremltools as ct
    mb = _mb()

    @mb.program(input_specs=[mb.TensorSpec(shape=(3,)), mb.TensorSpec(shape=(1,))], opset_version=ct.target.iOS17)
    def prog(x, limit):
        def cond(i, acc):
            return mb.less(x=mb.reduce_sum(x=i), y=mb.reduce_sum(x=limit))

        def body(i, acc):
            return mb.add(x=i, y=1.0), mb.add(x=acc, y=x)

        _, acc = mb.while_loop(_cond=cond, _body=body, loop_vars=(mb.fill(shape=[1], value=0.0), x))
        picked = mb.cond(pred=mb.greater(x=mb.reduce_sum(x=acc), y=0.0),
                         _true_fn=lambda: mb.mul(x=acc, y=2.0), _false_fn=lambda: mb.mul(x=acc, y=-1.0))
        return mb.identity(x=picked, name="y")

    package = save_program(prog, tmp_path, target=ct.target.iOS17)
    steps = [(None, {"x": np.array([1, -2, 0.5], np.float32), "limit": np.array([3], np.float32)}),
             (None, {"x": np.array([-4, 1, 0.5], np.float32), "limit": np.array([2], np.float32)})]
    compiled = check_round_trip(package, str(tmp_path), steps)
    text = open(os.path.join(compiled, "model.mil")).read()
    assert "while_loop(" in text and "cond(" in text
    for _, inputs in steps:
        # acc starts at x and gains x once per pass while the counter is below the limit.
        acc = inputs["x"] * (1 + inputs["limit"][0])
        want = acc * 2 if acc.sum() > 0 else -acc
        np.testing.assert_array_equal(coremlrt.MLModel(compiled).predict(inputs)["y"], want)


def test_stateful_model_round_trips(tmp_path):
    import coremltools as ct
    mb = _mb()

    @mb.program(input_specs=[mb.StateTensorSpec((1, 4), dtype=ct.converters.mil.mil.types.fp16),
                             mb.TensorSpec((1, 4), dtype=ct.converters.mil.mil.types.fp16)],
                opset_version=ct.target.iOS18)
    def prog(acc, x):
        total = mb.add(x=mb.read_state(input=acc), y=x)
        mb.coreml_update_state(state=acc, value=total)
        return mb.identity(x=total, name="y")

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                       compute_precision=ct.precision.FLOAT32, skip_model_load=True)
    package = str(tmp_path / "state.mlpackage")
    model.save(package)
    rng = np.random.default_rng(2)
    steps = [(None, {"x": rng.standard_normal((1, 4)).astype(np.float16)}) for _ in range(3)]
    compiled = check_round_trip(package, str(tmp_path), steps)
    metadata = json.load(open(os.path.join(compiled, "metadata.json")))[0]
    assert [s["name"] for s in metadata["stateSchema"]] == ["acc"]
    assert "state<tensor<fp16, [1, 4]>> acc" in open(os.path.join(compiled, "model.mil")).read()


# -- text written as Apple's compiler writes it ----------------------------------------------

# The lines coremltools' own test checks in a model.mil compiled by Core ML (test/blob/
# test_weights.py, test_single_weight_file_shared_by_multiple_constants, iOS16 target): three
# fp32[500] constants, const_1 and const_2 sharing one blob.
APPLE_TEXT = """program(1.0)
[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremlc-component-MIL", "3304.5.2"}, {"coremlc-version", "3304.6.2"}})]
{
    func main<ios16>(tensor<fp32, [500]> x) {
            tensor<fp32, [500]> const_1 = const()[name = tensor<string, []>("const_1"), val = tensor<fp32, [500]>(BLOBFILE(path = tensor<string, []>("@model_path/weights/weight.bin"), offset = tensor<uint64, []>(64)))];
            tensor<fp32, [500]> const_2 = const()[name = tensor<string, []>("const_2"), val = tensor<fp32, [500]>(BLOBFILE(path = tensor<string, []>("@model_path/weights/weight.bin"), offset = tensor<uint64, []>(64)))];
            tensor<fp32, [500]> const_3 = const()[name = tensor<string, []>("const_3"), val = tensor<fp32, [500]>(BLOBFILE(path = tensor<string, []>("@model_path/weights/weight.bin"), offset = tensor<uint64, []>(2176)))];
            tensor<fp32, [500]> add_0 = add(x = x, y = const_1)[name = tensor<string, []>("add_0")];
            tensor<fp32, [500]> add_1 = add(x = add_0, y = const_2)[name = tensor<string, []>("add_1")];
            tensor<fp32, [500]> add_2 = add(x = add_1, y = const_3)[name = tensor<string, []>("add_2")];
    } -> (add_2);
}
"""

# metadata.json as Core ML writes it: a list holding one object, flags and shapes as strings.
APPLE_METADATA = [{
    "metadataOutputVersion": "3.0",
    "storagePrecision": "Float32",
    "outputSchema": [{"hasShapeFlexibility": "0", "isOptional": "0", "dataType": "Float32",
                      "formattedType": "MultiArray (Float32 500)", "shortDescription": "", "shape": "[500]",
                      "name": "add_2", "type": "MultiArray"}],
    "modelParameters": [],
    "specificationVersion": 7,
    "mlProgramOperationTypeHistogram": {"Ios16.add": 3, "Ios16.const": 3},
    "computePrecision": "Float32",
    "isUpdatable": "0",
    "availability": {"macOS": "13.0", "iOS": "16.0"},
    "modelType": {"name": "MLModelType_mlProgram"},
    "userDefinedMetadata": {"com.github.apple.coremltools.version": "9.0"},
    "inputSchema": [{"hasShapeFlexibility": "0", "isOptional": "0", "dataType": "Float32",
                     "formattedType": "MultiArray (Float32 500)", "shortDescription": "", "shape": "[500]",
                     "name": "x", "type": "MultiArray"}],
    "generatedClassName": "model",
    "method": "predict",
}]


def write_weight_file(path, arrays):
    """A weight.bin (blob storage v2, docs/design/coreml-format.md, "Weight blobs") holding fp32 `arrays`,
    each record 64-byte aligned: records start at 64, 64 + 64 + align64(bytes), ..."""
    header = np.zeros(64, np.uint8)
    header[0:4] = np.frombuffer(np.uint32(len(arrays)).tobytes(), np.uint8)
    header[4:8] = np.frombuffer(np.uint32(2).tobytes(), np.uint8)
    out = bytearray(header.tobytes())
    offsets = []
    for array in arrays:
        data = array.astype(np.float32).tobytes()
        offsets.append(len(out))
        record = np.zeros(16, np.uint32)
        record[0] = 0xDEADBEEF
        record[1] = 2  # fp32 (blob data type 2)
        meta = bytearray(record.tobytes())
        meta[8:16] = np.uint64(len(data)).tobytes()
        meta[16:24] = np.uint64(len(out) + 64).tobytes()
        out += meta + data
        out += bytes(-len(out) % 64)
    with open(path, "wb") as f:
        f.write(out)
    return offsets


def make_apple_folder(tmp_path, text=APPLE_TEXT, metadata=APPLE_METADATA):
    folder = tmp_path / "apple.mlmodelc"
    (folder / "weights").mkdir(parents=True)
    rng = np.random.default_rng(3)
    shared, third = rng.standard_normal(500), rng.standard_normal(500)
    offsets = write_weight_file(folder / "weights" / "weight.bin", [shared, third])
    assert offsets == [64, 2176]  # the offsets Core ML's text names
    (folder / "model.mil").write_text(text)
    (folder / "metadata.json").write_text(json.dumps(metadata, indent=2))
    (folder / "coremldata.bin").write_bytes(b"\x00binary file this build does not read")
    return folder, shared.astype(np.float32), third.astype(np.float32)


def test_folder_in_apples_text_form_loads_and_predicts(tmp_path):
    folder, shared, third = make_apple_folder(tmp_path)
    model = coremlrt.MLModel(str(folder))
    x = np.random.default_rng(4).standard_normal(500).astype(np.float32)
    y = model.predict({"x": x})["add_2"]
    assert np.array_equal(y, ((x + shared) + shared) + third)
    assert model.user_defined_metadata == {"com.github.apple.coremltools.version": "9.0"}
    assert model.specification_version == 7


def test_unknown_text_is_refused_naming_the_line(tmp_path):
    bad = APPLE_TEXT.replace("add(x = add_0, y = const_2)", "add(x = add_0, y = const_2 const_3)")
    folder, _, _ = make_apple_folder(tmp_path, text=bad)
    with pytest.raises(coremlrt.Error, match=r"model\.mil line 9: expected ',', found 'const_3'"):
        coremlrt.MLModel(str(folder))


def test_unknown_opset_and_element_type_are_refused(tmp_path):
    folder, _, _ = make_apple_folder(tmp_path / "a", text=APPLE_TEXT.replace("<ios16>", "<ios99>"))
    with pytest.raises(coremlrt.Error, match=r"line 4: function 'main' has opset 'ios99'"):
        coremlrt.MLModel(str(folder))
    folder, _, _ = make_apple_folder(tmp_path / "b", text=APPLE_TEXT.replace("tensor<fp32, [500]> x)", "tensor<fp7, [500]> x)"))
    with pytest.raises(coremlrt.Error, match=r"line 4: unknown type or element type 'fp7'"):
        coremlrt.MLModel(str(folder))


def test_wrong_literal_count_is_refused(tmp_path):
    text = APPLE_TEXT.replace(
        'tensor<fp32, [500]> add_2 = add(x = add_1, y = const_3)',
        'tensor<fp32, [500]> add_2 = add(x = add_1, y = tensor<fp32, [2]>([0x1p+0]))')
    folder, _, _ = make_apple_folder(tmp_path, text=text)
    with pytest.raises(coremlrt.Error, match=r"line 10: .*tensor<fp32, \[2\]> holds 2 values but 1 are written"):
        coremlrt.MLModel(str(folder))


def test_folder_without_metadata_or_program_is_refused(tmp_path):
    folder, _, _ = make_apple_folder(tmp_path)
    os.remove(folder / "metadata.json")
    with pytest.raises(coremlrt.Error, match="has no metadata.json"):
        coremlrt.MLModel(str(folder))
    os.remove(folder / "model.mil")
    with pytest.raises(coremlrt.Error, match="has no model.mil: only ML programs compiled to text"):
        coremlrt.MLModel(str(folder))


def test_metadata_naming_a_missing_function_is_refused(tmp_path):
    metadata = [dict(APPLE_METADATA[0], functions=[{"name": "other", "inputSchema": [], "outputSchema": []}],
                     defaultFunctionName="other")]
    folder, _, _ = make_apple_folder(tmp_path, metadata=metadata)
    with pytest.raises(coremlrt.Error, match="describes function 'other', which model.mil does not define"):
        coremlrt.MLModel(str(folder))


def test_compile_refuses_bad_destinations_and_leaves_nothing(tmp_path):
    folder, _, _ = make_apple_folder(tmp_path)
    with pytest.raises(coremlrt.Error, match="must end in .mlmodelc"):
        coremlrt.compile_model(str(folder), str(tmp_path / "out.bin"))
    with pytest.raises(coremlrt.Error, match="is already a compiled model"):
        coremlrt.compile_model(str(folder), str(tmp_path / "again.mlmodelc"))
    assert not os.path.exists(tmp_path / "again.mlmodelc")
    assert not [p for p in os.listdir(tmp_path) if ".partial-" in p]


def test_neuralnetwork_model_compiles_and_loads_from_its_source_copy(tmp_path):
    import coremltools as ct
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    builder = NeuralNetworkBuilder([("x", datatypes.Array(4))], [("y", datatypes.Array(3))],
                                   disable_rank5_shape_mapping=True)
    rng = np.random.default_rng(5)
    w, b = rng.standard_normal((3, 4)), rng.standard_normal(3)
    builder.add_inner_product("fc", W=w, b=b, input_channels=4, output_channels=3, has_bias=True,
                              input_name="x", output_name="y")
    for feature in list(builder.spec.description.input) + list(builder.spec.description.output):
        feature.type.multiArrayType.dataType = ct.proto.FeatureTypes_pb2.ArrayFeatureType.FLOAT32
    path = str(tmp_path / "nn.mlmodel")
    ct.models.utils.save_spec(builder.spec, path)
    x = rng.standard_normal(4).astype(np.float32)
    compiled = check_round_trip(path, str(tmp_path), [(None, {"x": x})])
    assert not os.path.exists(os.path.join(compiled, "model.mil"))
    assert os.path.isfile(os.path.join(compiled, "coremlrt-source.mlmodel"))


def test_cli_runs_compiled_folders(tmp_path, capsys):
    from coremlrt import cli
    folder, _, _ = make_apple_folder(tmp_path)
    assert cli.main(["info", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "type: mlProgram, specification version 7" in out and "add x3" in out
