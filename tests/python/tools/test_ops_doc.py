"""docs/reports/ops.md matches the kernel registry, and the dtypes the registry declares are true."""

import difflib
import importlib.util
import io
import os

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

import coremlrt
from coremlrt import _core, cli
from mil_helpers import save_program

REPO = os.path.join(os.path.dirname(__file__), "..", "..", "..")


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_ops_doc", os.path.join(REPO, "scripts", "gen_ops_doc.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ops_doc_is_current():
    gen = load_generator()
    assert os.path.isfile(gen.FORMAT_DOC), f"{gen.FORMAT_DOC}: the op list docs/reports/ops.md is made from"
    expected = gen.render()
    with open(gen.DOC_PATH, encoding="utf-8") as f:
        written = f.read()
    if written != expected:
        diff = "".join(list(difflib.unified_diff(written.splitlines(True), expected.splitlines(True),
                                                 "docs/reports/ops.md", "registry", n=0))[:40])
        pytest.fail(f"docs/reports/ops.md is stale; regenerate it with: {gen.REGENERATE}\n{diff}", pytrace=False)


def test_format_doc_parser_finds_the_op_tables():
    gen = load_generator()
    names = gen.format_doc_ops(gen.FORMAT_DOC)
    # One op from a plain table, a multi-op cell, a constexpr table and the opset summary.
    for op in ("relu", "acos", "atanh", "constexpr_lut_to_sparse", "reduce_argmin", "scaled_dot_product_attention"):
        assert op in names, op
    assert not any(name in names for name in ("fp16", "int32", "x", "valid")), "picked up non-op words"


def registry():
    return {(op, lo): (hi, dtypes) for op, lo, hi, dtypes, _family in _core.supported_ops()}


def test_supported_ops_carry_opsets_and_dtypes():
    ops = registry()
    assert ops[("add", 15)] == (99, ("float16", "float32", "int32"))
    assert ops[("logical_and", 15)] == (99, ("bool",))
    assert ops[("transpose", 15)] == (99, ("any",))
    # Two definitions, two kernels: the iOS17 reshape matches 0s from the right.
    assert ops[("reshape", 15)][0] == 16 and ops[("reshape", 17)][0] == 99
    # fp16 recurrent layers arrived with the iOS17 redefinitions.
    assert ops[("lstm", 15)] == (16, ("float32",))
    assert ops[("lstm", 17)] == (99, ("float16", "float32"))
    assert ops[("scaled_dot_product_attention", 18)] == (99, ("float16", "float32"))
    known = {"any", "bool", "int4", "int8", "int16", "int32", "int64", "uint1", "uint2", "uint3", "uint4", "uint6",
             "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64", "bfloat16", "float8_e4m3fn",
             "float8_e5m2"}
    for (op, lo), (hi, dtypes) in ops.items():
        assert lo <= hi and dtypes and set(dtypes) <= known, (op, lo, hi, dtypes)
        assert dtypes == ("any",) or "any" not in dtypes, op


def test_cli_lists_ops():
    out = io.StringIO()
    assert cli.cmd_ops(None, out=out) == 0
    lines = out.getvalue().splitlines()
    assert any(line.split() == ["logical_not", "iOS15+", "bool"] for line in lines)
    assert any(line.split()[:2] == ["lstm", "iOS15–iOS16"] for line in lines)
    assert len(lines) == len(_core.supported_ops()) + 1  # a header line, then one line per kernel


# Each op run with every dtype its kernel declares (of fp16, fp32, int32 and bool), against numpy.
# Bool cannot be a model input, so it is made from int32 inside the program and cast back.
CASES = {
    "abs": (lambda x: mb.abs(x=x), np.abs),
    "sin": (lambda x: mb.sin(x=x), np.sin),
    "reduce_sum": (lambda x: mb.reduce_sum(x=x, axes=[1]), lambda x: x.sum(axis=1, dtype=x.dtype)),
    "cumsum": (lambda x: mb.cumsum(x=x, axis=1), lambda x: np.cumsum(x, axis=1, dtype=x.dtype)),
    "logical_not": (lambda x: mb.logical_not(x=x), np.logical_not),
    "transpose": (lambda x: mb.transpose(x=x, perm=[1, 0]), np.transpose),
    "reverse": (lambda x: mb.reverse(x=x, axes=[1]), lambda x: x[:, ::-1]),
    "tile": (lambda x: mb.tile(x=x, reps=[2, 1]), lambda x: np.tile(x, (2, 1))),
}
# dtype -> (model input type, numpy type of the input, numpy type the op sees)
MIL_TYPES = {"float16": (types.fp16, np.float16, np.float16), "float32": (types.fp32, np.float32, np.float32),
             "int32": (types.int32, np.int32, np.int32), "bool": (types.int32, np.int32, np.bool_)}


def declared_runs():
    ops = registry()
    for op in sorted(CASES):
        dtypes = ops[(op, 15)][1]
        for dtype in MIL_TYPES:
            if dtypes == ("any",) or dtype in dtypes:
                yield op, dtype


@pytest.mark.parametrize("op,dtype", list(declared_runs()))
def test_declared_dtype_runs(tmp_path, op, dtype):
    build, reference = CASES[op]
    mil_type, input_type, op_type = MIL_TYPES[dtype]
    x = np.array([[0.5, -1.25, 2.0], [3.0, 0.0, -0.75]], np.float32)
    if dtype in ("int32", "bool"):
        x = np.array([[1, -2, 0], [3, 0, -7]], np.int32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape, dtype=mil_type)], opset_version=ct.target.iOS18)
    def prog(x):
        if dtype == "bool":
            return mb.cast(x=build(mb.cast(x=x, dtype="bool")), dtype="int32", name="y")
        return mb.identity(x=build(x), name="y")

    model = coremlrt.MLModel(save_program(prog, tmp_path))
    got = model.predict({"x": x.astype(input_type)})["y"]
    want = reference(x.astype(op_type))
    if dtype == "bool":
        want = want.astype(np.int32)
    tolerance = 1e-3 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tolerance, atol=tolerance)
