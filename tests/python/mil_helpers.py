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
