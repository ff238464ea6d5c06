"""Build small models the way users do (coremltools' MIL builder or converter) for tests."""

import os

import coremltools as ct


def save_program(prog, directory, name="model", fp16=False, target=None):
    """Convert a MIL program with pip's coremltools and save it as an .mlpackage; returns its path.

    fp16=False keeps fp32 compute (compute_precision FLOAT32); fp16=True uses coremltools'
    default FLOAT16 precision, which inserts casts around an fp16 program.
    """
    model = ct.convert(
        prog,
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32,
        minimum_deployment_target=target or ct.target.iOS18,
        skip_model_load=True,
    )
    path = os.path.join(str(directory), name + ".mlpackage")
    model.save(path)
    return path


def tensor_spec(array):
    """An mb.TensorSpec with a numpy array's shape and dtype (fp32, fp16 or int32)."""
    import numpy as np
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    builtin = {np.float32: types.fp32, np.float16: types.fp16, np.int32: types.int32}[array.dtype.type]
    return mb.TensorSpec(shape=array.shape, dtype=builtin)


def predict_program(prog, directory, inputs, target):
    """Saves a MIL program for `target` (fp32 compute) and predicts once with coremlrt, on the
    test's backend with its placements checked (backend_check.py)."""
    import backend_check

    return backend_check.predict(save_program(prog, directory, target=target), inputs)


def matmul_chain(directory, depth=8, size=256, name="chain"):
    """y = tanh(...tanh(x @ W1)... @ Wdepth) for x fp32 [size, size]: a compute-bound model.

    Returns (path, weights) so that tests can compute the reference with numpy.
    """
    import numpy as np
    from coremltools.converters.mil import Builder as mb

    rng = np.random.default_rng(depth * 1000 + size)
    weights = [(rng.standard_normal((size, size)) / np.sqrt(size)).astype(np.float32) for _ in range(depth)]

    @mb.program(input_specs=[mb.TensorSpec(shape=(size, size))], opset_version=ct.target.iOS18)
    def prog(x):
        for w in weights:
            x = mb.tanh(x=mb.matmul(x=x, y=w))
        return mb.identity(x=x, name="y")

    return save_program(prog, directory, name=name), weights


def matmul_chain_reference(x, weights):
    import numpy as np

    y = x.astype(np.float64)
    for w in weights:
        y = np.tanh(y @ w.astype(np.float64))
    return y
