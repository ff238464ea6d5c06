"""neuralNetwork control-flow layers built with coremltools' NeuralNetworkBuilder (add_branch,
add_loop) and run by coremlrt: branch becomes a `cond` op and loop a `while_loop` op. Expected
values come from the same computation written as a Python loop or if/else over numpy."""

import os

import numpy as np
import pytest

import coremlrt

pytest.importorskip("coremltools")

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: E402
from nn_helpers import save_and_load  # noqa: E402

RTOL, ATOL = 1e-6, 1e-6


def save(tmp_path, builder):
    return save_and_load(tmp_path, builder)


def nested(nn_spec):
    return NeuralNetworkBuilder(input_features=None, output_features=None, spec=None, nn_spec=nn_spec)


def top(inputs, outputs):
    features = [(name, datatypes.Array(*shape)) for name, shape in inputs]
    return NeuralNetworkBuilder(features, [(name, None) for name in outputs], disable_rank5_shape_mapping=True)


def branch_model(tmp_path):
    """output = data * 10 if cond else data + 10; both branches define 'output'."""
    b = top([("data", (3,)), ("cond", (1,))], ["output"])
    layer = b.add_branch("branch", "cond")
    nested(layer.branch.ifBranch).add_elementwise("mul", ["data"], "output", mode="MULTIPLY", alpha=10)
    nested(layer.branch.elseBranch).add_elementwise("add", ["data"], "output", mode="ADD", alpha=10)
    return save(tmp_path, b)


@pytest.mark.parametrize("cond", [1.0, 0.0, -0.5, 1e-7, -1e-7, 2e-6])
def test_branch_chooses_by_magnitude_of_condition(tmp_path, cond):
    model = branch_model(tmp_path)
    data = np.array([1.5, -2.0, 3.25], np.float32)
    out = model.predict({"data": data, "cond": np.array([cond], np.float32)})["output"]
    expected = data * 10 if abs(cond) > 1e-6 else data + 10
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


def test_branch_without_else_keeps_earlier_value(tmp_path):
    b = top([("data", (4,)), ("cond", (1,))], ["output", "after"])
    b.add_activation("copy", "LINEAR", "data", "output", params=[1.0, 0.0])
    layer = b.add_branch("branch", "cond")
    nested(layer.branch.ifBranch).add_unary("sq", "data", "output", mode="power", alpha=2.0)
    # A layer after the branch reads the blob the branch may have rewritten.
    b.add_elementwise("after", ["output", "data"], "after", mode="ADD")
    model = save(tmp_path, b)
    data = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    for cond in (1.0, 0.0):
        out = model.predict({"data": data, "cond": np.array([cond], np.float32)})
        expected = data ** 2 if cond else data
        np.testing.assert_allclose(out["output"], expected, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(out["after"], expected + data, rtol=RTOL, atol=ATOL)


def test_nested_branches(tmp_path):
    b = top([("data", (2,)), ("a", (1,)), ("c", (1,))], ["output"])
    outer = b.add_branch("outer", "a")
    inner = nested(outer.branch.ifBranch).add_branch("inner", "c")
    nested(inner.branch.ifBranch).add_elementwise("m", ["data"], "output", mode="MULTIPLY", alpha=3)
    nested(inner.branch.elseBranch).add_elementwise("p", ["data"], "output", mode="ADD", alpha=3)
    nested(outer.branch.elseBranch).add_elementwise("n", ["data"], "output", mode="MULTIPLY", alpha=-1)
    model = save(tmp_path, b)
    data = np.array([2.0, -5.0], np.float32)
    for a in (0.0, 1.0):
        for c in (0.0, 1.0):
            out = model.predict({"data": data, "a": np.array([a], np.float32), "c": np.array([c], np.float32)})
            expected = (data * 3 if c else data + 3) if a else -data
            np.testing.assert_allclose(out["output"], expected, rtol=RTOL, atol=ATOL)


def test_blob_defined_by_one_branch_only_is_refused_to_later_readers(tmp_path):
    b = top([("data", (2,)), ("cond", (1,))], ["output"])
    layer = b.add_branch("branch", "cond")
    nested(layer.branch.ifBranch).add_elementwise("m", ["data"], "tmp", mode="MULTIPLY", alpha=3)
    b.add_elementwise("use", ["tmp", "data"], "output", mode="ADD")
    with pytest.raises(Exception, match="only the ifBranch of branch layer 'branch' defines"):
        save(tmp_path, b).predict({"data": np.ones(2, np.float32), "cond": np.ones(1, np.float32)})


def test_fixed_count_loop(tmp_path):
    """The builder tests' loop: output += 2, five times, through a body-local blob."""
    b = top([("data", (1,))], ["output"])
    b.add_copy("copy_1", input_name="data", output_name="output")
    layer = b.add_loop("loop_layer")
    layer.loop.maxLoopIterations = 5
    body = nested(layer.loop.bodyNetwork)
    body.add_elementwise("add", input_names=["output"], output_name="x", mode="ADD", alpha=2)
    body.add_copy("copy_2", input_name="x", output_name="output")
    model = save(tmp_path, b)
    data = np.array([0.5], np.float32)
    expected = data.copy()
    for _ in range(5):
        expected = expected + 2
    np.testing.assert_allclose(model.predict({"data": data})["output"], expected, rtol=RTOL, atol=ATOL)


def test_loop_count_from_input(tmp_path):
    b = top([("data", (3,)), ("count", (1,))], ["output"])
    b.add_copy("init", input_name="data", output_name="output")
    layer = b.add_loop("loop", input_name="count")
    layer.loop.maxLoopIterations = 100  # ignored when the input is present
    nested(layer.loop.bodyNetwork).add_elementwise("twice", ["output"], "output", mode="MULTIPLY", alpha=2)
    model = save(tmp_path, b)
    data = np.array([1.0, -0.5, 3.0], np.float32)
    for count in (0, 1, 4):
        expected = data * (2.0 ** count)
        out = model.predict({"data": data, "count": np.array([count], np.float32)})["output"]
        np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


def while_model(tmp_path, max_iterations=None):
    """while output < limit: output = output * 1.5 + 1 (the condition network writes 'cond')."""
    b = top([("data", (1,)), ("limit", (1,))], ["output", "cond"])
    b.add_copy("init", input_name="data", output_name="output")
    layer = b.add_loop("loop", condition="cond", max_iterations=max_iterations)
    condition = nested(layer.loop.conditionNetwork)
    condition.add_less_than("test", ["output", "limit"], "cond")
    body = nested(layer.loop.bodyNetwork)
    body.add_elementwise("scale", ["output"], "scaled", mode="MULTIPLY", alpha=1.5)
    body.add_elementwise("shift", ["scaled"], "output", mode="ADD", alpha=1.0)
    return save(tmp_path, b)


def reference_while(data, limit, max_iterations=None):
    output, steps = np.float32(data), 0
    while output < limit and (max_iterations is None or steps < max_iterations):
        output = np.float32(np.float32(output * np.float32(1.5)) + np.float32(1.0))
        steps += 1
    return output, float(output < limit)


@pytest.mark.parametrize("data,limit", [(1.0, 50.0), (60.0, 50.0), (0.0, 5.0)])
def test_while_loop(tmp_path, data, limit):
    model = while_model(tmp_path)
    out = model.predict({"data": np.array([data], np.float32), "limit": np.array([limit], np.float32)})
    output, cond = reference_while(data, limit)
    np.testing.assert_allclose(out["output"], [output], rtol=RTOL, atol=ATOL)
    # The condition blob holds its last evaluation, the one that ended the loop.
    np.testing.assert_allclose(out["cond"], [cond])


def test_while_loop_with_iteration_bound(tmp_path):
    model = while_model(tmp_path, max_iterations=3)
    for data, limit in ((1.0, 1000.0), (1.0, 4.0)):
        out = model.predict({"data": np.array([data], np.float32), "limit": np.array([limit], np.float32)})
        output, cond = reference_while(data, limit, max_iterations=3)
        np.testing.assert_allclose(out["output"], [output], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(out["cond"], [cond])


def test_branch_inside_loop(tmp_path):
    """for 4 iterations: output = output - 1 if output > 2 else output + 5."""
    b = top([("data", (1,))], ["output"])
    b.add_copy("init", input_name="data", output_name="output")
    layer = b.add_loop("loop", max_iterations=4)
    body = nested(layer.loop.bodyNetwork)
    body.add_greater_than("big", ["output"], "is_big", alpha=2.0)
    branch = body.add_branch("choose", "is_big")
    nested(branch.branch.ifBranch).add_elementwise("dec", ["output"], "output", mode="ADD", alpha=-1.0)
    nested(branch.branch.elseBranch).add_elementwise("inc", ["output"], "output", mode="ADD", alpha=5.0)
    model = save(tmp_path, b)
    for start in (0.0, 3.5, 10.0):
        expected = np.float32(start)
        for _ in range(4):
            expected = expected - 1 if expected > 2 else expected + 5
        out = model.predict({"data": np.array([start], np.float32)})["output"]
        np.testing.assert_allclose(out, [expected], rtol=RTOL, atol=ATOL)


def test_blob_local_to_loop_is_refused_to_later_readers(tmp_path):
    b = top([("data", (1,))], ["output"])
    layer = b.add_loop("loop", max_iterations=2)
    nested(layer.loop.bodyNetwork).add_elementwise("m", ["data"], "tmp", mode="MULTIPLY", alpha=3)
    b.add_copy("use", input_name="tmp", output_name="output")
    with pytest.raises(Exception, match="defines inside its iterations only"):
        save(tmp_path, b).predict({"data": np.ones(1, np.float32)})


def exit_loop_model(tmp_path, kind, max_iterations=10, threshold=4.0):
    """for up to max_iterations: output += 1; if output > threshold: loop{kind}; total += output."""
    b = top([("data", (1,))], ["output", "total"])
    b.add_copy("init", input_name="data", output_name="output")
    b.add_elementwise("zero", ["data"], "total", mode="MULTIPLY", alpha=0.0)
    layer = b.add_loop("loop", max_iterations=max_iterations)
    body = nested(layer.loop.bodyNetwork)
    body.add_elementwise("inc", ["output"], "output", mode="ADD", alpha=1.0)
    body.add_greater_than("big", ["output"], "is_big", alpha=threshold)
    branch = body.add_branch("check", "is_big")
    getattr(nested(branch.branch.ifBranch), "add_loop_" + kind)("exit")
    body.add_elementwise("sum", ["total", "output"], "total", mode="ADD")
    return save(tmp_path, b)


@pytest.mark.parametrize("kind", ["break", "continue"])
@pytest.mark.parametrize("start", [0.0, 2.5, 7.0])
def test_loop_break_and_continue(tmp_path, kind, start):
    model = exit_loop_model(tmp_path, kind)
    output, total = np.float32(start), np.float32(0.0)
    for _ in range(10):
        output = output + np.float32(1.0)
        if output > 4.0:
            if kind == "break":
                break
            continue
        total = total + output
    out = model.predict({"data": np.array([start], np.float32)})
    np.testing.assert_allclose(out["output"], [output], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out["total"], [total], rtol=RTOL, atol=ATOL)


def test_break_in_while_loop_keeps_the_last_condition(tmp_path):
    """while output < limit: output *= 2; if output > 20: break; steps += 1."""
    b = top([("data", (1,)), ("limit", (1,))], ["output", "cond", "steps"])
    b.add_copy("init", input_name="data", output_name="output")
    b.add_elementwise("zero", ["data"], "steps", mode="MULTIPLY", alpha=0.0)
    layer = b.add_loop("loop", condition="cond")
    nested(layer.loop.conditionNetwork).add_less_than("test", ["output", "limit"], "cond")
    body = nested(layer.loop.bodyNetwork)
    body.add_elementwise("double", ["output"], "output", mode="MULTIPLY", alpha=2.0)
    body.add_greater_than("big", ["output"], "is_big", alpha=20.0)
    nested(body.add_branch("check", "is_big").branch.ifBranch).add_loop_break("stop")
    body.add_elementwise("count", ["steps"], "steps", mode="ADD", alpha=1.0)
    model = save(tmp_path, b)
    for data, limit in ((1.0, 100.0), (1.0, 10.0), (50.0, 10.0)):
        output, steps, cond = np.float32(data), 0.0, float(data < limit)
        while output < limit:
            output = output * np.float32(2.0)
            if output > 20.0:
                break
            steps += 1
            cond = float(output < limit)
        out = model.predict({"data": np.array([data], np.float32), "limit": np.array([limit], np.float32)})
        np.testing.assert_allclose(out["output"], [output], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(out["steps"], [steps])
        np.testing.assert_allclose(out["cond"], [cond])


def test_loop_break_outside_a_loop_is_refused(tmp_path):
    b = top([("data", (1,)), ("cond", (1,))], ["output"])
    b.add_copy("init", input_name="data", output_name="output")
    nested(b.add_branch("branch", "cond").branch.ifBranch).add_loop_break("stop")
    with pytest.raises(Exception, match="not inside the bodyNetwork of a loop layer"):
        save(tmp_path, b).predict({"data": np.ones(1, np.float32), "cond": np.ones(1, np.float32)})


def test_while_loop_that_never_ends_stops_at_the_iteration_cap(tmp_path):
    while_model(tmp_path)  # writes model.mlmodel
    model = coremlrt.MLModel(os.path.join(str(tmp_path), "model.mlmodel"), max_loop_iterations=50)
    inputs = {"data": np.array([-3.0], np.float32), "limit": np.array([0.0], np.float32)}  # falls forever
    with pytest.raises(Exception, match="max_loop_iterations"):
        model.predict(inputs)


def test_break_ends_only_the_innermost_loop(tmp_path):
    """for 3: c = 0; for up to 10: c += 1; if c > limit: break; total += c."""
    b = top([("data", (1,)), ("limit", (1,))], ["total"])
    b.add_elementwise("zero", ["data"], "total", mode="MULTIPLY", alpha=0.0)
    outer = b.add_loop("outer", max_iterations=3)
    outer_body = nested(outer.loop.bodyNetwork)
    outer_body.add_elementwise("reset", ["data"], "c", mode="MULTIPLY", alpha=0.0)
    inner = outer_body.add_loop("inner", max_iterations=10)
    inner_body = nested(inner.loop.bodyNetwork)
    inner_body.add_elementwise("inc", ["c"], "c", mode="ADD", alpha=1.0)
    inner_body.add_greater_than("big", ["c", "limit"], "is_big")
    nested(inner_body.add_branch("check", "is_big").branch.ifBranch).add_loop_break("stop")
    inner_body.add_elementwise("sum", ["total", "c"], "total", mode="ADD")
    model = save(tmp_path, b)
    for limit in (0.0, 2.0, 20.0):
        total = 0.0
        for _ in range(3):
            c = 0.0
            for _ in range(10):
                c += 1
                if c > limit:
                    break
                total += c
        out = model.predict({"data": np.ones(1, np.float32), "limit": np.array([limit], np.float32)})
        np.testing.assert_allclose(out["total"], [total], rtol=RTOL, atol=ATOL)
