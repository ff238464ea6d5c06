"""Elementwise ops: arithmetic, comparisons, logic, activations, cast.

Semantics follow our kernels (src/ops/elementwise_unary.cc, elementwise_binary.cc,
activation.cc, misc.cc): an epsilon is always added where the op has one (rsqrt, inverse, log);
floor_div and mod round toward minus infinity and take the divisor's sign, as Python does;
round takes halves to even (ONNX Round does too); a float -> integer cast truncates toward
zero (ONNX Cast does too).
"""

import numpy as np

from .graph import MIL_DTYPE_NAMES, Unsupported
from .registry import translates

_BINARY = {
    "add": "Add", "sub": "Sub", "mul": "Mul", "pow": "Pow", "maximum": "Max", "minimum": "Min",
    "equal": "Equal", "less": "Less", "less_equal": "LessOrEqual", "greater": "Greater",
    "greater_equal": "GreaterOrEqual", "logical_and": "And", "logical_or": "Or", "logical_xor": "Xor",
}

_UNARY = {
    "abs": "Abs", "acos": "Acos", "acosh": "Acosh", "asin": "Asin", "asinh": "Asinh", "atan": "Atan",
    "atanh": "Atanh", "ceil": "Ceil", "cos": "Cos", "cosh": "Cosh", "erf": "Erf", "exp": "Exp",
    "floor": "Floor", "relu": "Relu", "round": "Round", "sigmoid": "Sigmoid", "sign": "Sign", "sin": "Sin",
    "sinh": "Sinh", "sqrt": "Sqrt", "tan": "Tan", "tanh": "Tanh", "softsign": "Softsign",
    "softplus": "Softplus", "logical_not": "Not", "identity": "Identity",
}

# Epsilon defaults of the ops that add one (src/ops/elementwise_unary.cc).
_EPSILON_DEFAULTS = {"rsqrt": 1e-12, "inverse": 1e-4, "log": 1e-45}


@translates(*_BINARY)
def binary(v):
    v.builder.node(_BINARY[v.type], [v.input("x"), v.input("y")], [v.output()])


@translates("real_div")
def real_div(v):
    # Integer real_div truncates toward zero in our kernel, as ONNX Div does on integers (a
    # division by zero, 0 in the kernel, is undefined in ONNX).
    v.builder.node("Div", [v.input("x"), v.input("y")], [v.output()])


@translates("not_equal")
def not_equal(v):
    b = v.builder
    equal = b.node("Equal", [v.input("x"), v.input("y")])
    b.node("Not", [equal], [v.output()])


@translates("floor_div")
def floor_div(v):
    b = v.builder
    x, y = v.input("x"), v.input("y")
    if v.dtype("x") in ("float16", "float32", "float64"):
        b.node("Floor", [b.node("Div", [x, y])], [v.output()])
    else:
        # (x - mod(x, y)) / y is exact in integers; ONNX Mod with fmod=0 takes the divisor's sign.
        rest = b.node("Mod", [x, y], fmod=0)
        b.node("Div", [b.node("Sub", [x, rest]), y], [v.output()])


@translates("mod")
def mod(v):
    b = v.builder
    x, y = v.input("x"), v.input("y")
    if v.dtype("x") in ("float16", "float32", "float64"):
        # x - floor(x / y) * y: the divisor's sign, as the kernel computes it.
        quotient = b.node("Floor", [b.node("Div", [x, y])])
        b.node("Sub", [x, b.node("Mul", [quotient, y])], [v.output()])
    else:
        b.node("Mod", [x, y], [v.output()], fmod=0)


@translates(*_UNARY)
def unary(v):
    v.builder.node(_UNARY[v.type], [v.input("x")], [v.output()])


def _scalar_like(v, value, param="x", hint="const"):
    return v.builder.const_like(value, v.dtype(param), hint)


@translates("rsqrt", "inverse", "log")
def with_epsilon(v):
    b = v.builder
    eps = v.scalar("epsilon", _EPSILON_DEFAULTS[v.type])
    if v.dtype("x") == "float16":
        eps = float(np.float16(eps))  # coremltools rounds the default to x's dtype (elementwise_unary.cc)
    shifted = b.node("Add", [v.input("x"), _scalar_like(v, eps, hint="epsilon")])
    if v.type == "log":
        b.node("Log", [shifted], [v.output()])
    elif v.type == "inverse":
        b.node("Reciprocal", [shifted], [v.output()])
    else:
        b.node("Reciprocal", [b.node("Sqrt", [shifted])], [v.output()])


@translates("square")
def square(v):
    x = v.input("x")
    v.builder.node("Mul", [x, x], [v.output()])


@translates("exp2")
def exp2(v):
    v.builder.node("Pow", [_scalar_like(v, 2.0, hint="two"), v.input("x")], [v.output()])


@translates("relu6")
def relu6(v):
    b = v.builder
    b.node("Clip", [v.input("x"), _scalar_like(v, 0.0), _scalar_like(v, 6.0)], [v.output()])


@translates("clip")
def clip(v):
    b = v.builder
    b.node("Clip", [v.input("x"), _scalar_like(v, v.scalar("alpha")), _scalar_like(v, v.scalar("beta"))],
           [v.output()])


@translates("threshold")
def threshold(v):
    v.builder.node("Max", [v.input("x"), _scalar_like(v, v.scalar("alpha"))], [v.output()])


@translates("leaky_relu")
def leaky_relu(v):
    v.builder.node("LeakyRelu", [v.input("x")], [v.output()], alpha=float(v.scalar("alpha", 0.01)))


@translates("elu")
def elu(v):
    v.builder.node("Elu", [v.input("x")], [v.output()], alpha=float(v.scalar("alpha", 1.0)))


@translates("thresholded_relu")
def thresholded_relu(v):
    # Kernel: v >= alpha ? v : 0 (ONNX ThresholdedRelu keeps only v > alpha).
    b = v.builder
    x = v.input("x")
    keep = b.node("GreaterOrEqual", [x, _scalar_like(v, v.scalar("alpha", 1.0))])
    b.node("Where", [keep, x, _scalar_like(v, 0.0)], [v.output()])


@translates("sigmoid_hard")
def sigmoid_hard(v):
    v.builder.node("HardSigmoid", [v.input("x")], [v.output()], alpha=float(v.scalar("alpha", 0.2)),
                   beta=float(v.scalar("beta", 0.5)))


@translates("linear_activation")
def linear_activation(v):
    b = v.builder
    scaled = b.node("Mul", [v.input("x"), _scalar_like(v, v.scalar("alpha", 1.0))])
    b.node("Add", [scaled, _scalar_like(v, v.scalar("beta", 0.0))], [v.output()])


@translates("scaled_tanh")
def scaled_tanh(v):
    b = v.builder
    inner = b.node("Tanh", [b.node("Mul", [v.input("x"), _scalar_like(v, v.scalar("beta", 1.0))])])
    b.node("Mul", [inner, _scalar_like(v, v.scalar("alpha", 1.0))], [v.output()])


@translates("silu")
def silu(v):
    b = v.builder
    x = v.input("x")
    b.node("Mul", [x, b.node("Sigmoid", [x])], [v.output()])


@translates("gelu")
def gelu(v):
    b = v.builder
    mode = v.scalar("mode", "EXACT")
    x = v.input("x")
    if mode == "SIGMOID_APPROXIMATION":
        b.node("Mul", [x, b.node("Sigmoid", [b.node("Mul", [x, _scalar_like(v, 1.702)])])], [v.output()])
    elif mode in ("EXACT", "TANH_APPROXIMATION"):
        b.node("Gelu", [x], [v.output()], approximate="none" if mode == "EXACT" else "tanh")
    else:
        raise Unsupported("gelu mode '%s'" % mode)


@translates("prelu")
def prelu(v):
    b = v.builder
    alpha = v.constant("alpha", required=True).array
    rank = v.rank("x")
    # One slope per channel (axis 1), in x's dtype (parameters may be wider from iOS17 on).
    slope = alpha.reshape([-1] + [1] * (rank - 2)).astype(np.float16 if v.dtype("x") == "float16" else np.float32)
    b.node("PRelu", [v.input("x"), b.initializer(slope, "prelu_alpha")], [v.output()])


@translates("cast")
def cast(v):
    target = MIL_DTYPE_NAMES.get(v.scalar("dtype"))
    if target is None:
        raise Unsupported("cast to '%s'" % v.scalar("dtype"))
    v.builder.node("Cast", [v.input("x")], [v.output()], to=v.builder.onnx_type(target))
