"""MIL's list ops through the ONNX export (ops_control_flow.py): each program built with coremltools'
MIL builder, exported, checked, run with ONNX Runtime and compared with coremlrt's prediction
of the same model, exactly (lists only move values).

Covered: a fixed list read before and after writes (unwritten items read as zeros), a dynamic
list grown past its length by list_write and list_scatter, list_scatter with repeated indices
(the last row wins, as the kernel writes rows in order), a dynamic list grown in a while_loop
and read after it, a list written inside a while_loop whose element shape comes from the values
written (make_list's elem_shape known only at run time), and lists through cond.
"""

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
ct = pytest.importorskip("coremltools")

import coremlrt  # noqa: E402
from coremlrt.onnx_export import export_onnx, unsupported_ops  # noqa: E402
from coremlrt.onnx_export.runner import ExportedModel  # noqa: E402

from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402

RNG = np.random.default_rng(11)


def _save(tmp_path, prog, name="m"):
    path = str(tmp_path / (name + ".mlpackage"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ct.convert(prog, convert_to="mlprogram", skip_model_load=True, minimum_deployment_target=ct.target.iOS17,
                   compute_precision=ct.precision.FLOAT32).save(path)
    return path


def _export(tmp_path, prog, ops=("ScatterND", "Gather")):
    path = _save(tmp_path, prog)
    out = tmp_path / "m.onnx"
    export_onnx(path, out)
    onnx.checker.check_model(str(out), full_check=True)
    graph_ops = set()

    def walk(graph):
        for node in graph.node:
            graph_ops.add(node.op_type)
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    walk(attribute.g)
    walk(onnx.load(str(out)).graph)
    assert set(ops) <= graph_ops
    model = coremlrt.MLModel(path)
    return model, ExportedModel(model, out)


def _same(model, exported, inputs):
    want = model.predict(inputs)
    got = exported.predict(inputs)
    assert set(got) == set(want)
    for name in want:
        assert got[name].shape == want[name].shape, name
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    return want


def test_fixed_list_reads_zeros_until_written(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3)), mb.TensorSpec(shape=(2, 3))], opset_version=ct.target.iOS17)
    def prog(a, b):
        ls = mb.make_list(init_length=4, elem_shape=(2, 3), dtype="fp32", dynamic_length=False)
        before = mb.list_read(ls=ls, index=2, name="before")
        ls = mb.list_write(ls=ls, index=2, value=a)
        ls = mb.list_write(ls=ls, index=0, value=b)
        ls = mb.list_write(ls=ls, index=2, value=mb.add(x=a, y=b))
        return (mb.identity(x=before, name="zeros"), mb.list_read(ls=ls, index=2, name="read"),
                mb.list_gather(ls=ls, indices=[3, 0, 2, 0], name="gathered"), mb.list_length(ls=ls, name="length"))

    model, exported = _export(tmp_path, prog)
    a, b = (RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    want = _same(model, exported, {"a": a, "b": b})
    assert not want["zeros"].any() and not want["gathered"][0].any()
    assert int(want["length"]) == 4


def test_dynamic_list_grows_on_write_and_scatter_last_row_wins(tmp_path):
    """The example of coremltools' TestList grown further: a write past the end pads with zero
    items, and list_scatter's repeated index 1 takes its last row."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(2,)), mb.TensorSpec(shape=(2,)),
                             mb.TensorSpec(shape=(5,), dtype=types.int32)], opset_version=ct.target.iOS17)
    def prog(a, b, indices):
        ls = mb.make_list(init_length=2, elem_shape=(2,), dtype="fp32")
        first = mb.list_read(ls=ls, index=0, name="first")
        ls = mb.list_write(ls=ls, index=0, value=a)
        ls = mb.list_write(ls=ls, index=4, value=b)
        ls = mb.list_scatter(ls=ls, indices=[2, 1, 1], value=np.array([[-1, -2], [-4, -5], [-7, -8]], np.float32))
        # run-time indices, repeated, one past the end: the list grows to 7
        rows = mb.reshape(x=mb.cast(x=mb.range_1d(start=0, end=10, step=1), dtype="fp32"), shape=[5, 2])
        ls = mb.list_scatter(ls=ls, indices=indices, value=rows)
        return (mb.identity(x=first, name="zeros"), mb.list_read(ls=ls, index=0, name="read"),
                mb.list_gather(ls=ls, indices=mb.range_1d(start=0, end=mb.list_length(ls=ls), step=1), name="all"),
                mb.list_length(ls=ls, name="length"))

    model, exported = _export(tmp_path, prog)
    a, b = np.array([1, 3], np.float32), np.array([2, 4], np.float32)
    for indices, length in (([3, 3, 6, 3, 0], 7), ([1, 1, 1, 1, 1], 5), ([4, 2, 4, 2, 4], 5)):
        want = _same(model, exported, {"a": a, "b": b, "indices": np.array(indices, np.int32)})
        assert int(want["length"]) == length
        for k, i in enumerate(indices):  # the last row with index i wins
            assert want["all"][i].tolist() == [2 * max(j for j, x in enumerate(indices) if x == i),
                                               2 * max(j for j, x in enumerate(indices) if x == i) + 1]
    assert _same(model, exported, {"a": a, "b": b, "indices": np.array([3, 3, 6, 3, 0], np.int32)})["all"][5].tolist() \
        == [0, 0]  # never written


def _loop_program(elem_shape):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1,), dtype=types.int32), mb.TensorSpec(shape=(2, 3))],
                opset_version=ct.target.iOS17)
    def prog(n, x):
        ls = mb.make_list(init_length=1, elem_shape=elem_shape(x), dtype="fp32")

        def cond(i, acc, ls):
            return mb.less(x=i, y=mb.squeeze(x=n))

        def body(i, acc, ls):
            doubled = mb.mul(x=acc, y=2.0)
            # every other item: odd ones stay unwritten until the next write grows past them
            return mb.add(x=i, y=1), doubled, mb.list_write(ls=ls, index=mb.mul(x=i, y=2), value=doubled)

        _, acc, ls = mb.while_loop(_cond=cond, _body=body, loop_vars=(np.int32(0), x, ls))
        length = mb.list_length(ls=ls, name="length")
        return (mb.identity(x=acc, name="acc"), length,
                mb.list_gather(ls=ls, indices=mb.range_1d(start=0, end=length, step=1), name="all"),
                mb.list_read(ls=ls, index=0, name="first"))
    return prog


@pytest.mark.parametrize("known", [True, False], ids=["elem_shape_known", "elem_shape_from_writes"])
def test_dynamic_list_grown_in_while_loop(known, tmp_path):
    if known:
        prog = _loop_program(lambda x: (2, 3))
    else:  # a symbolic dim in elem_shape: the list type does not know it, the writes do
        prog = _loop_program(lambda x: ("rows", 3))
    model, exported = _export(tmp_path, prog, ops=("Loop", "ScatterND", "Pad", "Gather"))
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    if not known:
        # No write: the kernel has no element shape for the unwritten item and fails, where the
        # export reads zeros of the shape it took from the writes.
        with pytest.raises(coremlrt.Error, match="never written and its shape is not known"):
            model.predict({"n": np.array([0], np.int32), "x": x})
    for n in (0, 1, 2, 4) if known else (1, 2, 4):
        want = _same(model, exported, {"n": np.array([n], np.int32), "x": x})
        assert int(want["length"]) == max(2 * n - 1, 1)
        if n > 1:
            assert not want["all"][1].any()


def test_list_through_cond(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(3,)), mb.TensorSpec(shape=(1,), dtype=types.int32)],
                opset_version=ct.target.iOS17)
    def prog(x, k):
        ls = mb.make_list(init_length=2, elem_shape=(3,), dtype="fp32")
        ls = mb.cond(pred=mb.greater(x=mb.reduce_sum(x=x), y=0.0),
                     _true_fn=lambda: mb.list_write(ls=ls, index=3, value=x),
                     _false_fn=lambda: mb.list_write(ls=ls, index=1, value=mb.mul(x=x, y=-1.0)))
        return (mb.list_gather(ls=ls, indices=mb.range_1d(start=0, end=mb.list_length(ls=ls), step=1), name="all"),
                mb.list_read(ls=ls, index=mb.squeeze(x=k), name="read"))

    model, exported = _export(tmp_path, prog, ops=("If", "ScatterND"))
    for sign in (1.0, -1.0):
        x = sign * np.abs(RNG.standard_normal(3)).astype(np.float32)
        want = _same(model, exported, {"x": x, "k": np.array([1], np.int32)})
        assert want["all"].shape == ((4, 3) if sign > 0 else (2, 3))


def test_element_shape_known_only_at_run_time_is_refused(tmp_path):
    """Values of a shape known only at run time written into a list whose elem_shape has a
    symbolic dim: no dense tensor can be laid out when the export is written."""

    from coremltools.converters.mil.mil import get_new_symbol

    @mb.program(input_specs=[mb.TensorSpec(shape=(get_new_symbol(), 3))], opset_version=ct.target.iOS17)
    def flexible(x):
        ls = mb.make_list(init_length=1, elem_shape=("rows", 3), dtype="fp32")
        ls = mb.list_write(ls=ls, index=0, value=x)
        return mb.list_read(ls=ls, index=0, name="y")

    path = _save(tmp_path, flexible, "flexible")
    problems = unsupported_ops(path)
    assert any(op == "make_list" and "known only at run time" in reason for op, _, reason in problems), problems
    np.testing.assert_array_equal(coremlrt.MLModel(path).predict({"x": np.ones((2, 3), np.float32)})["y"],
                                  np.ones((2, 3), np.float32))


@pytest.mark.parametrize("dtype", ["fp16", "int32"])
def test_lists_of_other_dtypes(dtype, tmp_path):
    """fp16 (exported as fp16: Pad, ScatterND and Gather move its bits) and int32 items."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(3,), dtype=types.fp16 if dtype == "fp16" else types.int32),
                             mb.TensorSpec(shape=(4,), dtype=types.int32)], opset_version=ct.target.iOS17)
    def prog(x, indices):
        ls = mb.make_list(init_length=2, elem_shape=(3,), dtype=dtype)
        ls = mb.list_write(ls=ls, index=3, value=x)
        rows = mb.mul(x=mb.tile(x=mb.expand_dims(x=x, axes=[0]), reps=[4, 1]),
                      y=np.arange(1, 5).reshape(4, 1).astype(np.float16 if dtype == "fp16" else np.int32))
        ls = mb.list_scatter(ls=ls, indices=indices, value=rows)
        return mb.list_gather(ls=ls, indices=mb.range_1d(start=0, end=mb.list_length(ls=ls), step=1), name="all")

    path = str(tmp_path / "m.mlpackage")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ct.convert(prog, convert_to="mlprogram", skip_model_load=True, minimum_deployment_target=ct.target.iOS17,
                   compute_precision=ct.precision.FLOAT16).save(path)
    export_onnx(path, tmp_path / "m.onnx")
    model = coremlrt.MLModel(path)
    x = (np.arange(3) + 1).astype(np.float16 if dtype == "fp16" else np.int32)
    want = _same(model, ExportedModel(model, tmp_path / "m.onnx"), {"x": x, "indices": np.array([5, 0, 5, 1], np.int32)})
    assert want["all"].shape == (6, 3) and want["all"][5].tolist() == (3 * x).tolist()
