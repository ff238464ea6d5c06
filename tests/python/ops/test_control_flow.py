"""cond, while_loop and list ops, built with coremltools' MIL builder, against numpy."""

import numpy as np
import pytest

import backend_check
import coremlrt
import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from mil_helpers import save_program


@pytest.fixture(scope="module")
def loop_model(tmp_path_factory):
    """Doubles x n times, recording every step in a list; a cond on the sign of sum(x)."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(1,), dtype=types.int32), mb.TensorSpec(shape=(2, 3))],
                opset_version=ct.target.iOS18)
    def prog(n, x):
        ls = mb.make_list(init_length=1, elem_shape=[2, 3], dtype="fp32")

        def cond(i, acc, ls):
            return mb.less(x=i, y=mb.squeeze(x=n))

        def body(i, acc, ls):
            doubled = mb.mul(x=acc, y=2.0)
            return mb.add(x=i, y=1), doubled, mb.list_write(ls=ls, index=i, value=doubled)

        i, acc, ls = mb.while_loop(_cond=cond, _body=body, loop_vars=(np.int32(0), x, ls))
        first_two = mb.list_gather(ls=ls, indices=[0, 1], name="first_two")
        length = mb.list_length(ls=ls, name="length")
        branch = mb.cond(pred=mb.greater(x=mb.reduce_sum(x=x), y=0.0),
                         _true_fn=lambda: mb.add(x=x, y=1.0), _false_fn=lambda: mb.sub(x=x, y=1.0))
        return mb.identity(x=acc, name="acc"), first_two, length, mb.identity(x=branch, name="branch"), \
            mb.identity(x=i, name="count")

    return backend_check.load(save_program(prog, tmp_path_factory.mktemp("loop")))


@pytest.mark.parametrize("n", [2, 3, 5])
def test_while_loop_with_list(loop_model, n):
    x = np.random.default_rng(n).standard_normal((2, 3)).astype(np.float32)
    out = loop_model.predict({"n": np.array([n], np.int32), "x": x})
    np.testing.assert_allclose(out["acc"], x * 2.0 ** n, rtol=1e-6)
    np.testing.assert_allclose(out["first_two"], np.stack([x * 2, x * 4]), rtol=1e-6)
    assert int(out["length"]) == max(n, 1)
    assert int(out["count"]) == n


def test_while_loop_may_run_zero_times(loop_model):
    # No iteration: the list keeps its single unwritten element, so gathering [0, 1] is out
    # of range — an error naming the op, not a read past the end.
    with pytest.raises(coremlrt.Error, match=r"'first_two' \(list_gather\).*index 1 is out of range for a list of 1"):
        loop_model.predict({"n": np.array([0], np.int32), "x": np.ones((2, 3), np.float32)})


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_takes_the_right_branch(loop_model, sign):
    x = sign * np.abs(np.random.default_rng(7).standard_normal((2, 3))).astype(np.float32)
    out = loop_model.predict({"n": np.array([2], np.int32), "x": x})
    np.testing.assert_allclose(out["branch"], x + sign, rtol=1e-6)


def test_nested_cond_inside_loop(tmp_path):
    """Collatz steps: a cond inside a while body, reading an outer value."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(1,), dtype=types.int32)], opset_version=ct.target.iOS18)
    def prog(start):
        one = np.int32(1)

        def cond(v, steps):
            return mb.greater(x=mb.squeeze(x=v), y=one)

        def body(v, steps):
            even = mb.equal(x=mb.mod(x=mb.squeeze(x=v), y=np.int32(2)), y=np.int32(0))
            nxt = mb.cond(pred=even,
                          _true_fn=lambda: mb.floor_div(x=v, y=np.int32(2)),
                          _false_fn=lambda: mb.add(x=mb.mul(x=v, y=np.int32(3)), y=one))
            return nxt, mb.add(x=steps, y=one)

        _, steps = mb.while_loop(_cond=cond, _body=body, loop_vars=(start, np.int32(0)))
        return mb.identity(x=steps, name="steps")

    model = backend_check.load(save_program(prog, tmp_path))

    def collatz(v):
        steps = 0
        while v > 1:
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            steps += 1
        return steps

    for start in (1, 6, 7, 27):
        assert int(model.predict({"start": np.array([start], np.int32)})["steps"]) == collatz(start)


def test_scripted_torch_loop(tmp_path):
    torch = pytest.importorskip("torch")

    class Repeat(torch.nn.Module):
        def forward(self, x, n: int):
            for _ in range(n):
                x = torch.tanh(x * 1.5)
            return x

    scripted = torch.jit.script(Repeat())
    try:
        mlmodel = ct.convert(scripted, inputs=[ct.TensorType(name="x", shape=(3, 4)), ct.TensorType(name="n", shape=(1,), dtype=np.int32)],
                             convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                             minimum_deployment_target=ct.target.iOS18, skip_model_load=True)
    except Exception as exc:  # the scripted-model frontend is fragile across torch versions
        pytest.skip(f"coremltools cannot convert this scripted loop with this torch: {exc}")
    path = str(tmp_path / "repeat.mlpackage")
    mlmodel.save(path)
    model = backend_check.load(path)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    for n in (0, 1, 4):
        (out,) = model.predict({"x": x, "n": np.array([n], np.int32)}).values()
        expected = scripted(torch.from_numpy(x), n).numpy()
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
