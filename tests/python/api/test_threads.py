"""The intra-op thread pool of our own kernels (coremlrt.set_num_threads, include/coremlrt/threads.h):
its size can be read and set, and results do not depend on it, for a program whose kernels split
their work over the pool (convolutions, depthwise convolution, GEMMs, elementwise ops, layer_norm,
softmax), in fp32 and fp16. The reference backend is asked for, so that our kernels run."""

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from coremltools.converters.mil import Builder as mb  # noqa: E402

import coremlrt  # noqa: E402
from mil_helpers import save_program, tensor_spec  # noqa: E402

RNG = np.random.default_rng(11)
W_CONV = (RNG.standard_normal((48, 16, 3, 3)) * 0.2).astype(np.float32)
B_CONV = RNG.standard_normal(48).astype(np.float32)
W_DEPTH = (RNG.standard_normal((48, 1, 3, 3)) * 0.3).astype(np.float32)
W_LINEAR = (RNG.standard_normal((80, 48)) * 0.2).astype(np.float32)
B_LINEAR = RNG.standard_normal(80).astype(np.float32)
SHIFT = RNG.standard_normal((48, 1, 1)).astype(np.float32)


@pytest.fixture
def pool_size():
    """Restores the pool's default size after the test."""
    yield
    coremlrt.set_num_threads(0)


def test_pool_size_can_be_read_and_set(pool_size):
    default = coremlrt.num_threads()
    assert default >= 1
    coremlrt.set_num_threads(3)
    assert coremlrt.num_threads() == 3
    coremlrt.set_num_threads(1)
    assert coremlrt.num_threads() == 1
    coremlrt.set_num_threads(0)
    assert coremlrt.num_threads() == default


def network(x):
    y = mb.conv(x=x, weight=W_CONV, bias=B_CONV, pad_type="same")
    y = mb.relu(x=y)
    y = mb.conv(x=y, weight=W_DEPTH, strides=[2, 2], pad_type="same", groups=48)
    y = mb.add(x=y, y=SHIFT)
    y = mb.reshape(x=y, shape=[1, 48, 30 * 30])
    y = mb.transpose(x=y, perm=[0, 2, 1])
    y = mb.linear(x=y, weight=W_LINEAR, bias=B_LINEAR)
    y = mb.layer_norm(x=y, axes=[-1], epsilon=1e-5)
    y = mb.softmax(x=y, axis=-1)
    return mb.matmul(x=y, y=y, transpose_y=True, name="y")


def torch_network(x):
    y = F.relu(F.conv2d(torch.from_numpy(x), torch.from_numpy(W_CONV), torch.from_numpy(B_CONV), padding=1))
    y = F.conv2d(F.pad(y, (0, 1, 0, 1)), torch.from_numpy(W_DEPTH), stride=2, groups=48) + torch.from_numpy(SHIFT)
    y = y.reshape(1, 48, 900).transpose(1, 2)
    y = F.linear(y, torch.from_numpy(W_LINEAR), torch.from_numpy(B_LINEAR))
    y = torch.softmax(F.layer_norm(y, (80,), eps=1e-5), dim=-1)
    return (y @ y.transpose(1, 2)).numpy()


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_results_do_not_depend_on_the_pool_size(tmp_path, pool_size, fp16):
    x = RNG.standard_normal((1, 16, 60, 60)).astype(np.float32)

    @mb.program(input_specs=[tensor_spec(x)], opset_version=ct.target.iOS18)
    def prog(x):
        return network(x)

    path = save_program(prog, tmp_path, fp16=fp16)
    model = coremlrt.MLModel(path, backend="reference")
    outputs = {}
    for threads in (1, 2, 4):
        coremlrt.set_num_threads(threads)
        outputs[threads] = model.predict({"x": x})["y"]
    np.testing.assert_array_equal(outputs[1], outputs[2])
    np.testing.assert_array_equal(outputs[1], outputs[4])
    # A model capped at one thread per prediction computes the same.
    coremlrt.set_num_threads(4)
    capped = coremlrt.MLModel(path, backend="reference", threads=1)
    np.testing.assert_array_equal(capped.predict({"x": x})["y"], outputs[1])
    tolerance = 2e-2 if fp16 else 1e-4
    np.testing.assert_allclose(outputs[2], torch_network(x), rtol=tolerance, atol=tolerance * 1e-2)
