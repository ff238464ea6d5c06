"""The rest of coremltools' runtime API through coremlrt's stand-in: compute devices, model
structure, compute plans, model assets, compile_model / CompiledMLModel and
get_compiled_model_path; and coremlrt's own compute plan (coremlrt.compute_plan, `info --plan`).
"""

import copy
import os
import shutil
import sys
import tempfile
import warnings

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.models.compute_device import (MLComputeDevice, MLCPUComputeDevice, MLGPUComputeDevice,
                                               MLNeuralEngineComputeDevice)
from coremltools.models.compute_plan import MLComputePlan, MLModelStructure

import coremlrt
from coremlrt import compute_plan
from coremlrt import coremltools_backend as backend

RNG = np.random.default_rng(7)
W1 = RNG.standard_normal((32, 16)).astype(np.float32)
W2 = RNG.standard_normal((4, 32)).astype(np.float32)


@pytest.fixture(scope="module", autouse=True)
def enabled():
    backend.enable()
    yield
    backend.disable()


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """An iOS18 program: y = linear(relu(linear(x, W1)), W2), x fp32 [8, 16]; (MLModel, path)."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(8, 16))], opset_version=ct.target.iOS18)
    def prog(x):
        h = mb.relu(x=mb.linear(x=x, weight=W1, name="fc1"), name="act")
        return mb.linear(x=h, weight=W2, name="y")

    model = ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                       minimum_deployment_target=ct.target.iOS18)
    path = str(tmp_path_factory.mktemp("mlp") / "mlp.mlpackage")
    model.save(path)
    return model, path


def reference(x):
    return np.maximum(x @ W1.T, 0) @ W2.T


# -- compute devices --------------------------------------------------------------------------

def test_compute_devices_are_the_cpu_and_its_matrix_unit_where_low_precision_runs():
    """The CPU, and a Neural Engine device standing for the CPU's bf16 matrix unit exactly where
    the low-precision mode (ComputeUnit.CPU_AND_NE) can use one: an OpenVINO build on a CPU
    with bf16 matrix instructions."""
    with open("/proc/cpuinfo") as f:
        flags = next((line for line in f if line.startswith("flags")), "").split()
    matrix_unit = "openvino" in coremlrt.available_backends() and ("amx_bf16" in flags or "avx512_bf16" in flags)
    for devices in (MLComputeDevice.get_all_compute_devices(), ct.models.MLModel.get_available_compute_devices()):
        assert isinstance(devices[0], MLCPUComputeDevice)
        assert not any(isinstance(d, MLGPUComputeDevice) for d in devices)
        engines = [d for d in devices if isinstance(d, MLNeuralEngineComputeDevice)]
        assert len(devices) == 1 + len(engines) and len(engines) == (1 if matrix_unit else 0)
        if engines:
            assert engines[0].total_core_count == os.cpu_count()


# -- model structure ----------------------------------------------------------------------------

def test_program_structure(mlp):
    model, _ = mlp
    structure = MLModelStructure.load_from_path(model.get_compiled_model_path())
    assert structure.neuralnetwork is None and structure.pipeline is None
    function = structure.program.functions["main"]
    assert [v.name for v in function.inputs] == ["x"]
    ops = function.block.operations
    assert [op.operator_name for op in ops if op.operator_name != "const"] == ["linear", "relu", "linear"]
    assert function.block.output_names == ["y"]
    relu = next(op for op in ops if op.operator_name == "relu")
    assert [b.name for b in relu.inputs["x"].bindings] == ["fc1"]
    assert [o.name for o in relu.outputs] == ["act"]
    # The package path works as well as the compiled folder.
    assert MLModelStructure.load_from_path(mlp[1]) == structure


def test_nested_blocks_in_structure(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(2,))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.cond(pred=mb.greater(x=mb.reduce_sum(x=x), y=0.0),
                       _true_fn=lambda: mb.exp(x=x), _false_fn=lambda: mb.abs(x=x))

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17)
    structure = MLModelStructure.load_from_path(model.get_compiled_model_path())
    cond = next(op for op in structure.program.functions["main"].block.operations if op.operator_name == "cond")
    assert len(cond.blocks) == 2
    assert "exp" in [op.operator_name for op in cond.blocks[0].operations]
    assert "abs" in [op.operator_name for op in cond.blocks[1].operations]


def test_neuralnetwork_structure(tmp_path):
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    builder = NeuralNetworkBuilder([("x", datatypes.Array(4))], [("y", datatypes.Array(3))],
                                   disable_rank5_shape_mapping=True)
    builder.add_inner_product("fc", W=np.ones((3, 4)), b=None, input_channels=4, output_channels=3,
                              has_bias=False, input_name="x", output_name="h")
    builder.add_activation("act", "RELU", input_name="h", output_name="y")
    path = str(tmp_path / "nn.mlmodel")
    ct.models.utils.save_spec(builder.spec, path)
    structure = MLModelStructure.load_from_path(path)
    assert structure.program is None
    assert [(l.name, l.type, l.output_names) for l in structure.neuralnetwork.layers] == [
        ("fc", "innerProduct", ["h"]), ("act", "activation", ["y"])]
    plan = MLComputePlan.load_from_path(coremlrt.compile_model(path, str(tmp_path / "nn.mlmodelc")))
    for layer in plan.model_structure.neuralnetwork.layers:
        usage = plan.get_compute_device_usage_for_neuralnetwork_layer(layer)
        assert isinstance(usage.preferred_compute_device, MLCPUComputeDevice)


def test_in_memory_neuralnetwork_compiles_from_the_bytes_loaded(tmp_path, monkeypatch):
    """ct.models.MLModel(spec) of a neuralNetwork saves the spec to a temporary .mlmodel, makes
    the proxy from it and deletes it (coremltools/models/model.py): get_compiled_model_path()
    still compiles the model that was loaded, and the compiled folder predicts as it does."""
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where coremltools' .mlmodel goes
    builder = NeuralNetworkBuilder([("x", datatypes.Array(4))], [("y", datatypes.Array(3))],
                                   disable_rank5_shape_mapping=True)
    weight = RNG.standard_normal((3, 4))
    builder.add_inner_product("fc", W=weight, b=None, input_channels=4, output_channels=3,
                              has_bias=False, input_name="x", output_name="h")
    builder.add_elementwise("twice", ["h", "h"], "s", mode="ADD")
    builder.add_activation("act", "RELU", input_name="s", output_name="y")
    model = ct.models.MLModel(builder.spec)
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".mlmodel")]  # deleted
    compiled = model.get_compiled_model_path()
    assert model.get_compiled_model_path() == compiled
    structure = MLModelStructure.load_from_path(compiled)
    # Core ML names the element-wise layers' type "elementwise" (as coremltools' own
    # test_neuralnetwork_structure expects), the others by their field in the spec.
    assert [(l.name, l.type) for l in structure.neuralnetwork.layers] == [
        ("fc", "innerProduct"), ("twice", "elementwise"), ("act", "activation")]
    plan = MLComputePlan.load_from_path(compiled)
    for layer in plan.model_structure.neuralnetwork.layers:
        assert isinstance(plan.get_compute_device_usage_for_neuralnetwork_layer(layer).preferred_compute_device,
                          MLCPUComputeDevice)
    x = RNG.standard_normal(4).astype(np.float32)
    expected = np.maximum(2 * weight @ x, 0)
    np.testing.assert_allclose(model.predict({"x": x})["y"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ct.models.CompiledMLModel(compiled).predict({"x": x})["y"], expected,
                               rtol=1e-5, atol=1e-6)


def test_pipeline_and_classic_structure(mlp, tmp_path, monkeypatch):
    """A pipeline's structure lists its stages by name, each described as a model of its own
    (ML program, neuralNetwork, nested pipeline); a classic model has no structure (all three
    None), as Core ML describes it."""
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # make_pipeline's temporary packages
    builder = NeuralNetworkBuilder([("y", datatypes.Array(8, 4))], [("z", datatypes.Array(8, 4))],
                                   disable_rank5_shape_mapping=True)
    builder.add_activation("act", "RELU", input_name="y", output_name="z")
    scaler = ct.proto.Model_pb2.Model()
    scaler.specificationVersion = 1
    for features, name in ((scaler.description.input, "z"), (scaler.description.output, "scaled")):
        feature = features.add()
        feature.name = name
        feature.type.multiArrayType.shape.extend([32])
        feature.type.multiArrayType.dataType = ct.proto.FeatureTypes_pb2.ArrayFeatureType.DOUBLE
    scaler.scaler.shiftValue.append(1.0)
    scaler.scaler.scaleValue.append(2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inner = ct.utils.make_pipeline(ct.models.MLModel(builder.spec), ct.models.MLModel(scaler))
        pipeline = ct.utils.make_pipeline(mlp[0], inner)
    path = str(tmp_path / "pipeline.mlpackage")
    pipeline.save(path)
    structure = MLModelStructure.load_from_path(path)
    assert structure.program is None and structure.neuralnetwork is None
    (first_name, first), (second_name, second) = structure.pipeline.sub_models
    assert (first_name, second_name) == ("model0", "model1")
    ops = first.program.functions["main"].block.operations
    assert [op.operator_name for op in ops if op.operator_name != "const"] == ["linear", "relu", "linear"]
    (nn_name, nn), (scaler_name, classic) = second.pipeline.sub_models
    assert [(l.name, l.type) for l in nn.neuralnetwork.layers] == [("act", "activation")]
    assert classic == MLModelStructure(neuralnetwork=None, program=None, pipeline=None)
    # The compiled model coremltools asks for (get_compiled_model_path: a folder coremlrt wrote).
    assert MLModelStructure.load_from_path(ct.models.MLModel(path).get_compiled_model_path()) == structure
    scaler_path = str(tmp_path / "scaler.mlmodel")
    ct.models.utils.save_spec(scaler, scaler_path)
    assert MLModelStructure.load_from_path(scaler_path) == classic


# -- compute plan -------------------------------------------------------------------------------

def test_compute_plan_devices_and_costs(mlp):
    model, _ = mlp
    plan = MLComputePlan.load_from_path(model.get_compiled_model_path(), compute_units=ct.ComputeUnit.CPU_ONLY)
    ops = plan.model_structure.program.functions["main"].block.operations
    weights = {}
    for op in ops:
        usage = plan.get_compute_device_usage_for_mlprogram_operation(op)
        assert isinstance(usage.preferred_compute_device, MLCPUComputeDevice)
        assert [type(d) for d in usage.supported_compute_devices] == [MLCPUComputeDevice]
        weights[op.outputs[0].name] = plan.get_estimated_cost_for_mlprogram_operation(op).weight
    # FLOPs: fc1 2*8*32*16, relu 8*32, y 2*8*4*32; constants cost nothing at prediction.
    flops = {"fc1": 2 * 8 * 32 * 16, "act": 8 * 32, "y": 2 * 8 * 4 * 32}
    total = sum(flops.values())
    for name, f in flops.items():
        assert weights[name] == pytest.approx(f / total)
    assert sum(weights.values()) == pytest.approx(1.0)
    assert all(w == 0 for name, w in weights.items() if name not in flops)


def test_compute_plan_refuses_foreign_operations(mlp):
    model, _ = mlp
    plan = MLComputePlan.load_from_path(model.get_compiled_model_path())
    other = MLModelStructure.load_from_path(mlp[1]).program.functions["main"].block.operations[0]
    forged = copy.copy(other)
    object.__setattr__(forged, "__proxy__", ("main", (999,)))
    with pytest.raises(ValueError, match="does not belong to this compute plan"):
        plan.get_estimated_cost_for_mlprogram_operation(forged)


def test_coremlrt_compute_plan_and_cli(mlp, capsys):
    plans = compute_plan.compute_plan(mlp[1])
    rows = {op.outputs[0]: op for op in plans["main"]}
    assert rows["fc1"].flops == 2 * 8 * 32 * 16 and rows["fc1"].device == "CPU"
    # A small model: "auto" keeps it on coremlrt's own kernels (const ops are folded at load).
    assert {op.backend for op in plans["main"] if op.op_type != "const"} == {"reference"}
    from coremlrt import cli
    assert cli.main(["info", mlp[1], "--plan"]) == 0
    out = capsys.readouterr().out
    assert "compute plan of 'main'" in out
    line = next(l for l in out.splitlines() if " fc1 " in l)
    assert "CPU" in line and "reference" in line and "8,192" in line


def test_compute_plan_names_ops_without_kernels():
    # An op `coremlrt info` lists as unsupported (no kernel in this build) has backend "none".
    assert compute_plan.op_backend("some_op", "n", "out", {("some_op", "out")})[0] == "none"
    assert compute_plan.op_backend("some_op", "n", "other", {("some_op", "out")})[0] == "reference"


# -- compiled models ----------------------------------------------------------------------------

def test_compiled_model_path_holds_model_mil(mlp):
    model, _ = mlp
    compiled = model.get_compiled_model_path()
    text = open(os.path.join(compiled, "model.mil")).read()
    weight = 'tensor<fp32, [32, 16]> fc1_weight_0 = const()[name = string("fc1_weight_0"), val = tensor<fp32, [32, 16]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64)))];'
    assert weight in text, text
    assert 'weight = fc1_weight_0, x = x)[name = string("fc1")];' in text


def test_compile_model_and_compiled_mlmodel(mlp, tmp_path, monkeypatch):
    _, path = mlp
    temporary = tmp_path / "temporary"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    destination = str(tmp_path / "out.mlmodelc")
    assert ct.utils.compile_model(path, destination) == destination
    assert os.listdir(temporary) == []  # moved to the destination, nothing left behind
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    compiled = ct.models.CompiledMLModel(destination, compute_units=ct.ComputeUnit.CPU_ONLY)
    np.testing.assert_allclose(compiled.predict({"x": x})["y"], reference(x), rtol=1e-4, atol=1e-4)
    # From a spec (of a program without weight files), into a temporary folder.
    @mb.program(input_specs=[mb.TensorSpec(shape=(3,))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.mul(x=x, y=2.0, name="y")

    spec = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18).get_spec()
    spec_path = ct.utils.compile_model(spec)
    assert spec_path.endswith(".mlmodelc") and os.path.isfile(os.path.join(spec_path, "metadata.json"))
    doubled = ct.models.CompiledMLModel(spec_path).predict({"x": np.array([1, 2, 3], np.float32)})["y"]
    np.testing.assert_array_equal(doubled, [2, 4, 6])
    assert os.path.dirname(os.path.dirname(spec_path)) == str(temporary)
    shutil.rmtree(os.path.dirname(spec_path))  # the caller owns the temporary folder
    with pytest.raises(Exception, match=r'must have "\.mlmodelc" file extension'):
        ct.utils.compile_model(path, str(tmp_path / "out.bin"))
    with pytest.raises(TypeError, match="already been compiled"):
        ct.utils.compile_model(ct.models.MLModel(path))
    # The stand-in keeps coremltools' own argument checks.
    with pytest.raises(TypeError, match='"compute_units" parameter must be'):
        ct.models.CompiledMLModel(destination, compute_units="CPU_ONLY")


def test_model_asset_from_memory_with_blobs(mlp):
    model, path = mlp
    weights = open(os.path.join(model.weights_dir, "weight.bin"), "rb").read()
    asset = ct.models.model.MLModelAsset.from_memory(spec_data=model.get_spec().SerializeToString(),
                                                     blob_mapping={"weights/weight.bin": weights})
    compiled = ct.models.CompiledMLModel.from_asset(asset=asset)
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_allclose(compiled.predict({"x": x})["y"], reference(x), rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="is not a path inside the model"):
        ct.models.model.MLModelAsset.from_memory(spec_data=b"", blob_mapping={"../escape.bin": b""})


def test_model_asset_from_path(mlp, tmp_path):
    destination = ct.utils.compile_model(mlp[1], str(tmp_path / "asset.mlmodelc"))
    asset = ct.models.model.MLModelAsset.from_path(destination)
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_allclose(ct.models.CompiledMLModel.from_asset(asset).predict({"x": x})["y"], reference(x),
                               rtol=1e-4, atol=1e-4)


def test_optimization_hints_are_checked_and_kept(mlp):
    hints = {"reshapeFrequency": ct.ReshapeFrequency.Infrequent, "allowLowPrecisionAccumulationOnGPU": True}
    model = ct.models.MLModel(mlp[1], optimization_hints=hints)
    assert model.optimization_hints == hints
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_allclose(model.predict({"x": x})["y"], reference(x), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="Unrecognized key in optimization_hint dictionary: bad"):
        ct.models.MLModel(mlp[1], optimization_hints={"bad": True})
    with pytest.raises(TypeError, match='"reshapeFrequency" value of "optimization_hint_input" dictionary must be '
                                        "of type coremltools.ReshapeFrequency"):
        ct.models.CompiledMLModel(model.get_compiled_model_path(), optimization_hints={"reshapeFrequency": 1})


def test_disable_restores_the_macos_checks(mlp):
    backend.disable()
    try:
        with pytest.raises(Exception, match="only support on macOS"):
            ct.models.CompiledMLModel(mlp[1])
        assert "coremlrt" not in getattr(ct.utils.compile_model, "__module__", "")
        assert ct.models.compute_device._MLCPUComputeDeviceProxy is None
        with pytest.raises(ValueError, match="only available on macOS >= 15.0"):
            ct.models.MLModel(mlp[1], optimization_hints={"reshapeFrequency": ct.ReshapeFrequency.Frequent})
    finally:
        backend.enable()
    assert ct.models.compute_device._MLCPUComputeDeviceProxy is backend._MLCPUComputeDeviceProxy
    assert sys.modules["coremltools.libcoremlpython"]._MLComputePlanProxy is backend._MLComputePlanProxy


def test_memory_asset_writes_no_file_and_refuses_missing_blobs(mlp, tmp_path, monkeypatch):
    model, _ = mlp
    weights = open(os.path.join(model.weights_dir, "weight.bin"), "rb").read()
    # Any file made while loading would land in the temporary directory, which is empty after.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    asset = ct.models.model.MLModelAsset.from_memory(spec_data=model.get_spec().SerializeToString(),
                                                     blob_mapping={"weights/weight.bin": weights})
    compiled = ct.models.CompiledMLModel.from_asset(asset=asset)
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_allclose(compiled.predict({"x": x})["y"], reference(x), rtol=1e-4, atol=1e-4)
    assert os.listdir(tmp_path) == []
    assert asset.__proxy__.path.startswith("coremlrt-memory:")
    # A spec whose weights are not in the mapping is refused when loaded, naming the file.
    bare = ct.models.model.MLModelAsset.from_memory(spec_data=model.get_spec().SerializeToString())
    with pytest.raises(RuntimeError, match="the blob mapping has no 'weights/weight.bin'"):
        ct.models.CompiledMLModel.from_asset(asset=bare)
    # Released memory models are named as such.
    path = asset.__proxy__.path
    del compiled, asset
    import gc
    gc.collect()
    with pytest.raises(coremlrt.Error, match="was given in memory and has been released"):
        coremlrt.MLModel(path)


def test_memory_model_through_coremlrt_api(mlp):
    model, _ = mlp
    weights = open(os.path.join(model.weights_dir, "weight.bin"), "rb").read()
    memory = coremlrt._core.MemoryModel(model.get_spec().SerializeToString(), {"weights/weight.bin": weights})
    loaded = coremlrt.MLModel(memory.path)
    del memory  # the loaded model keeps its weights
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_allclose(loaded.predict({"x": x})["y"], reference(x), rtol=1e-4, atol=1e-4)
    with pytest.raises(coremlrt.Error, match="blob mapping key '../w.bin' is not a path inside the model"):
        coremlrt._core.MemoryModel(b"", {"../w.bin": b""})
    with pytest.raises(coremlrt.Error, match="too short for the 64-byte storage header"):
        coremlrt._core.MemoryModel(b"", {"weights/weight.bin": b"abc"})
