"""Bounds before allocation (coremlrt/limits.h): a shape too large to count or to hold, a blob
offset past the end of the weight file, blocks nested past the limit and a loop that never
ends each raise coremlrt.Error naming the op, and the process (and the model) keep working."""

import os
import shutil

import numpy as np
import pytest

import coremlrt
import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from mil_helpers import save_program

SPEC = "Data/com.apple.CoreML/model.mlmodel"


@pytest.fixture(scope="module")
def fill_model(tmp_path_factory):
    """y = fill(shape=dims, value=1.5): the caller's dims decide how much the op allocates."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(3,), dtype=types.int32)], opset_version=ct.target.iOS18)
    def prog(dims):
        return mb.fill(shape=dims, value=1.5, name="y")

    return save_program(prog, tmp_path_factory.mktemp("fill"), name="fill")


def dims(*values):
    return {"dims": np.array(values, np.int32)}


def test_element_count_past_int64(fill_model):
    model = coremlrt.MLModel(fill_model)
    with pytest.raises(coremlrt.ResourceLimitError, match=r"op 'y' \(fill\).*has more elements than int64 can count"):
        model.predict(dims(2**31 - 1, 2**31 - 1, 2**31 - 1))
    np.testing.assert_array_equal(model.predict(dims(2, 3, 1))["y"], np.full((2, 3, 1), 1.5, np.float32))


def test_shape_beyond_the_machine_is_refused_before_allocating(fill_model):
    """1e12 elements (4 TB): past the default limit, the machine's physical memory."""
    model = coremlrt.MLModel(fill_model)
    with pytest.raises(coremlrt.ResourceLimitError,
                       match=r"op 'y' \(fill\).*tensor of shape \[100000, 100000, 100\].*memory limit"):
        model.predict(dims(100000, 100000, 100))
    assert model.predict(dims(1, 1, 4))["y"].shape == (1, 1, 4)


def test_memory_limit(fill_model):
    model = coremlrt.MLModel(fill_model, memory_limit_bytes=1 << 20)
    with pytest.raises(coremlrt.ResourceLimitError,
                       match=r"op 'y' \(fill\).*needs 4194304 bytes.*memory limit is 1048576 bytes"):
        model.predict(dims(1024, 1024, 1))
    for _ in range(3):  # what a failed prediction charged was given back
        np.testing.assert_array_equal(model.predict(dims(64, 64, 1))["y"], np.full((64, 64, 1), 1.5, np.float32))
    unlimited = coremlrt.MLModel(fill_model)
    assert unlimited.predict(dims(1024, 1024, 1))["y"].shape == (1024, 1024, 1)
    with pytest.raises(ValueError, match="memory_limit_bytes"):
        coremlrt.MLModel(fill_model, memory_limit_bytes=-1)


def test_blob_offset_past_the_end_of_the_weight_file(tmp_path):
    w = np.arange(64, dtype=np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(64,))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.add(x=x, y=w, name="y")

    path = save_program(prog, tmp_path, name="weights")
    from coremltools.proto import Model_pb2

    damaged = str(tmp_path / "damaged.mlpackage")
    shutil.copytree(path, damaged)
    spec = Model_pb2.Model()
    with open(os.path.join(damaged, SPEC), "rb") as f:
        spec.ParseFromString(f.read())
    function = spec.mlProgram.functions["main"]
    blob_ops = [op for op in function.block_specializations[function.opset].operations
                if op.attributes["val"].blobFileValue.fileName]
    assert len(blob_ops) == 1
    weight_size = os.path.getsize(os.path.join(damaged, "Data/com.apple.CoreML/weights/weight.bin"))
    for offset in (weight_size + 64, 2**63):
        blob_ops[0].attributes["val"].blobFileValue.offset = offset
        with open(os.path.join(damaged, SPEC), "wb") as f:
            f.write(spec.SerializeToString())
        with pytest.raises(coremlrt.Error, match=rf"op '{blob_ops[0].outputs[0].name}' \(const\), attribute 'val': weight file '.*damaged.mlpackage/.*blob at offset {offset}: the metadata "
                                                 r"record lies outside the file"):
            coremlrt.MLModel(damaged)
    x = np.ones(64, np.float32)
    np.testing.assert_array_equal(coremlrt.MLModel(path).predict({"x": x})["y"], x + w)


def nested_conds(depth):
    """`depth` conds, each inside the true branch of the one before: y = x + depth."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(2,))], opset_version=ct.target.iOS18)
    def prog(x):
        def level(d, v):
            if d == 0:
                return mb.identity(x=v)
            return mb.cond(pred=True, _true_fn=lambda: level(d - 1, mb.add(x=v, y=1.0)),
                           _false_fn=lambda: mb.identity(x=v))

        return mb.identity(x=level(depth, x), name="y")

    return prog


def test_nesting_deeper_than_the_limit(tmp_path):
    """coremltools would fold conds on a constant predicate: its optimization passes are
    skipped (pass_pipeline EMPTY) so that the file keeps the nesting."""

    def save(depth):
        model = ct.convert(nested_conds(depth), convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                           compute_precision=ct.precision.FLOAT32, pass_pipeline=ct.PassPipeline.EMPTY,
                           skip_model_load=True)
        path = str(tmp_path / f"nested{depth}.mlpackage")
        model.save(path)
        return path

    deep = save(coremlrt_max_nesting() + 1)
    with pytest.raises(coremlrt.Error, match=r"nested\d+\.mlpackage.*\(cond\).*blocks nested more than 32 deep"):
        coremlrt.MLModel(deep)
    shallow = save(8)
    np.testing.assert_array_equal(coremlrt.MLModel(shallow).predict({"x": np.zeros(2, np.float32)})["y"], [8, 8])


def coremlrt_max_nesting():
    return 32  # kMaxBlockNesting in include/coremlrt/limits.h


@pytest.fixture(scope="module")
def counting_loop(tmp_path_factory):
    """while i < n: i += 1; returns i (n is the caller's)."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(1,), dtype=types.int32)], opset_version=ct.target.iOS18)
    def prog(n):
        def cond(i):
            return mb.less(x=i, y=n)

        def body(i):
            return mb.add(x=i, y=1)

        result = mb.while_loop(_cond=cond, _body=body, loop_vars=(np.array([0], np.int32),))
        return mb.identity(x=result[0] if isinstance(result, (tuple, list)) else result, name="y")

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                       compute_precision=ct.precision.FLOAT32, skip_model_load=True)
    path = str(tmp_path_factory.mktemp("loop") / "loop.mlpackage")
    model.save(path)
    return path


def test_runaway_loop_hits_the_iteration_cap(counting_loop):
    model = coremlrt.MLModel(counting_loop, max_loop_iterations=1000)
    with pytest.raises(coremlrt.ResourceLimitError, match=r"\(while_loop\).*ran 1000 iterations without its "
                                                         r"condition turning false.*max_loop_iterations"):
        model.predict({"n": np.array([10**9], np.int32)})
    assert model.predict({"n": np.array([1000], np.int32)})["y"].tolist() == [1000]
    assert coremlrt.MLModel(counting_loop).predict({"n": np.array([5000], np.int32)})["y"].tolist() == [5000]
