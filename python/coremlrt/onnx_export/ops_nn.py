"""Network ops: convolution, pooling, linear and matrix products, normalization, softmax and
attention (resizing is ops_resize.py, resampling ops_sampling.py).

MIL lists spatial padding as (begin, end) pairs per spatial dim, [b0, e0, b1, e1]; ONNX lists
all begins then all ends, [b0, b1, e0, e1]. pad_type "same" puts the odd pixel at the end
(ONNX SAME_UPPER), "same_lower" at the start.
"""

import math

import numpy as np

from .graph import Unsupported
from .registry import translates


def _spatial_attributes(v, spatial):
    attributes = {}
    pad_type = v.scalar("pad_type", "valid")
    if pad_type == "custom":
        pad = v.ints("pad", [0] * (2 * spatial))
        attributes["pads"] = pad[0::2] + pad[1::2]
    elif pad_type == "same":
        attributes["auto_pad"] = "SAME_UPPER"
    elif pad_type == "same_lower":
        attributes["auto_pad"] = "SAME_LOWER"
    elif pad_type != "valid":
        raise Unsupported("pad_type '%s'" % pad_type)
    strides = v.ints("strides")
    if strides is not None:
        attributes["strides"] = strides
    return attributes


def _conv_attributes(v, spatial):
    """conv's and conv_transpose's padding, strides, dilations and groups."""
    attributes = _spatial_attributes(v, spatial)
    dilations = v.ints("dilations")
    if dilations is not None:
        attributes["dilations"] = dilations
    attributes["group"] = int(v.scalar("groups", 1))
    return attributes


@translates("conv")
def conv(v):
    b = v.builder
    spatial = v.rank("x") - 2
    attributes = _conv_attributes(v, spatial)
    inputs = [v.input("x"), weight_input(v, "weight")]
    if v.has("bias"):
        inputs.append(v.input("bias"))
    b.node("Conv", inputs, [v.output()], **attributes)


@translates("conv_transpose")
def conv_transpose(v):
    b = v.builder
    spatial = v.rank("x") - 2
    attributes = _conv_attributes(v, spatial)
    # The output's spatial size is the program's (output_shape where given): with explicit pads,
    # ONNX reaches it through output_padding; with pad_type same, through output_shape.
    out_dims = v.outputs[0]["type"]["dims"][2:]
    in_dims = v.type_of("x")["dims"][2:]
    if "auto_pad" in attributes:
        if any(d < 0 for d in out_dims):
            raise Unsupported("conv_transpose with pad_type same and an output size known only at run time")
        attributes["output_shape"] = out_dims
    elif all(d >= 0 for d in out_dims + in_dims):
        kernel = v.type_of("weight")["dims"][2:]
        strides = attributes.get("strides", [1] * spatial)
        dilations = attributes.get("dilations", [1] * spatial)
        pads = attributes.get("pads", [0] * (2 * spatial))
        natural = [strides[i] * (in_dims[i] - 1) + (kernel[i] - 1) * dilations[i] + 1 - pads[i] - pads[spatial + i]
                   for i in range(spatial)]
        extra = [out_dims[i] - natural[i] for i in range(spatial)]
        if any(e < 0 or e >= max(strides[i], dilations[i]) for i, e in enumerate(extra)):
            raise Unsupported("conv_transpose output size %s from %s" % (out_dims, natural))
        if any(extra):
            attributes["output_padding"] = extra
    # MIL's weight is [C_in, C_out / groups, k...], ONNX's too.
    inputs = [v.input("x"), weight_input(v, "weight")]
    if v.has("bias"):
        inputs.append(v.input("bias"))
    b.node("ConvTranspose", inputs, [v.output()], **attributes)


def _pool_attributes(v):
    """The window attributes every pool shares: pads, strides, kernel_shape, ceil_mode."""
    attributes = _spatial_attributes(v, v.rank("x") - 2)
    attributes["kernel_shape"] = v.ints("kernel_sizes")
    if v.scalar("ceil_mode", False):
        attributes["ceil_mode"] = 1
    return attributes


def _pool(v, onnx_op, extra):
    attributes = _pool_attributes(v)
    attributes.update(extra)
    v.builder.node(onnx_op, [v.input("x")], [v.output()], **attributes)


@translates("max_pool")
def max_pool(v):
    _pool(v, "MaxPool", {})


@translates("avg_pool")
def avg_pool(v):
    exclude = bool(v.scalar("exclude_padding_from_average", False))
    _pool(v, "AveragePool", {"count_include_pad": 0 if exclude else 1})


def weight_input(v, param, transpose=False):
    """A weight input; `transpose` swaps the last two dims (linear's [out, in] -> MatMul's
    [in, out]), in the stored data where the weight is a constant, so no Transpose runs."""
    b = v.builder
    deferred = b.deferred.get(_bound_name(v, param))
    if deferred is not None:
        return deferred.emit(b, transpose)
    if transpose:
        if v.is_constant(param):
            array = v.constant(param).array
            perm = list(range(array.ndim - 2)) + [array.ndim - 1, array.ndim - 2]
            return b.initializer(np.ascontiguousarray(array.transpose(perm)), _bound_name(v, param) or "weight_t")
        rank = v.rank(param)
        perm = list(range(rank - 2)) + [rank - 1, rank - 2]
        return b.node("Transpose", [v.input(param)], perm=perm)
    return v.input(param)


def _bound_name(v, param):
    binding = v.bindings(param)[0]
    return binding["name"] if binding["value"] is None else None


@translates("linear")
def linear(v):
    b = v.builder
    product = b.node("MatMul", [v.input("x"), weight_input(v, "weight", transpose=True)],
                     None if v.has("bias") else [v.output()])
    if v.has("bias"):
        b.node("Add", [product, v.input("bias")], [v.output()])


@translates("matmul")
def matmul(v):
    b = v.builder
    operands = []
    for param, flag in (("x", "transpose_x"), ("y", "transpose_y")):
        transpose = bool(v.scalar(flag, False))
        if transpose and v.rank(param) < 2:
            raise Unsupported("%s of a rank-1 operand" % flag)
        operands.append(weight_input(v, param, transpose=transpose))
    b.node("MatMul", operands, [v.output()])


def _ones_or(v, param, channels, dtype, value):
    if v.has(param):
        return v.input(param)
    return v.builder.initializer(np.full([channels], value, dtype=dtype), param)


def _np_float(v, param="x"):
    return {"float16": np.float16, "float32": np.float32}[v.builder.float_dtype(v.dtype(param))]


@translates("batch_norm")
def batch_norm(v):
    b = v.builder
    channels = v.type_of("mean")["dims"][0]
    dtype = _np_float(v)
    b.node("BatchNormalization",
           [v.input("x"), _ones_or(v, "gamma", channels, dtype, 1), _ones_or(v, "beta", channels, dtype, 0),
            v.input("mean"), v.input("variance")],
           [v.output()], epsilon=float(v.scalar("epsilon", 1e-5)))


@translates("instance_norm")
def instance_norm(v):
    b = v.builder
    channels = v.type_of("x")["dims"][1]
    if channels < 0:
        raise Unsupported("instance_norm over an unknown channel count")
    dtype = _np_float(v)
    b.node("InstanceNormalization",
           [v.input("x"), _ones_or(v, "gamma", channels, dtype, 1), _ones_or(v, "beta", channels, dtype, 0)],
           [v.output()], epsilon=float(v.scalar("epsilon", 1e-5)))


@translates("layer_norm")
def layer_norm(v):
    b = v.builder
    rank = v.rank("x")
    axes = sorted(a % rank for a in v.ints("axes", list(range(rank))))
    if axes != list(range(axes[0], rank)):
        _layer_norm_over(v, axes)
        return
    dims = v.type_of("x")["dims"][axes[0]:]
    if any(d < 0 for d in dims) and not (v.has("gamma") and v.has("beta")):
        raise Unsupported("layer_norm without gamma over dims of unknown size")
    dtype = _np_float(v)
    scale = v.input("gamma") if v.has("gamma") else b.initializer(np.ones(dims, dtype=dtype), "ln_scale")
    bias = v.input("beta") if v.has("beta") else b.initializer(np.zeros(dims, dtype=dtype), "ln_bias")
    b.node("LayerNormalization", [v.input("x"), scale, bias], [v.output()], axis=axes[0],
           epsilon=float(v.scalar("epsilon", 1e-5)))


def _layer_norm_over(v, axes):
    """layer_norm over axes that are not the trailing ones, written out: (x - mean) /
    sqrt(variance + epsilon) * gamma + beta, gamma and beta (of x's dims at `axes`) broadcast."""
    b = v.builder
    rank = v.rank("x")
    x = v.input("x")
    axes_name = b.const_int64(axes, "axes")
    centred = b.node("Sub", [x, b.node("ReduceMean", [x, axes_name], keepdims=1)])
    variance = b.node("ReduceMean", [b.node("Mul", [centred, centred]), axes_name], keepdims=1)
    eps = b.const_like(float(v.scalar("epsilon", 1e-5)), v.dtype("x"), "epsilon")
    out = b.node("Div", [centred, b.node("Sqrt", [b.node("Add", [variance, eps])])])
    shape = [v.type_of("x")["dims"][d] if d in axes else 1 for d in range(rank)]
    for param, op in (("gamma", "Mul"), ("beta", "Add")):
        if v.has(param):
            if not v.is_constant(param):
                raise Unsupported("layer_norm with a run-time %s over axes %s" % (param, axes))
            value = v.constant(param).array.reshape(shape).astype(_np_float(v))
            out = b.node(op, [out, b.initializer(value, param)])
    b.node("Identity", [out], [v.output()])


@translates("softmax")
def softmax(v):
    v.builder.node("Softmax", [v.input("x")], [v.output()], axis=int(v.scalar("axis", -1)))


@translates("scaled_dot_product_attention")
def scaled_dot_product_attention(v):
    # softmax(Q K^T / sqrt(E) + mask) V; a bool mask keeps the scores where it is true.
    b = v.builder
    q, k, val = v.input("query"), v.input("key"), v.input("value")
    rank = v.rank("key")
    head = v.type_of("query")["dims"][-1]
    if head < 0:
        raise Unsupported("attention with an unknown head size")
    key_t = b.node("Transpose", [k], perm=list(range(rank - 2)) + [rank - 1, rank - 2])
    scale = b.const_like(1.0 / math.sqrt(head), v.dtype("query"), "attention_scale")
    scores = b.node("Mul", [b.node("MatMul", [q, key_t]), scale])
    if v.has("attn_mask"):
        mask = v.input("attn_mask")
        if v.dtype("attn_mask") == "bool":
            scores = b.node("Where", [mask, scores, b.const_like(-np.inf, v.dtype("query"), "minus_inf")])
        else:
            scores = b.node("Add", [scores, mask])
    b.node("MatMul", [b.node("Softmax", [scores], axis=-1), val], [v.output()])


@translates("l2_pool")
def l2_pool(v):
    """sqrt of the sum of squares over each window, padding counting as zeros (src/ops/pool.cc):
    ONNX LpPool with p = 2, computed in fp32 (fp16 inputs are cast there and back, as the
    kernel computes fp16 in float)."""
    b = v.builder
    attributes = _pool_attributes(v)
    x = v.input("x")
    half = b.float_dtype(v.dtype("x")) == "float16"
    if half:
        x = b.node("Cast", [x], to=1)  # TensorProto.FLOAT
    pooled = b.node("LpPool", [x], None if half else [v.output()], p=2, **attributes)
    if half:
        b.node("Cast", [pooled], [v.output()], to=10)  # TensorProto.FLOAT16


def _einsum_rank(equation):
    """The rank (3 or 4) of the two patterns the kernel accepts (src/ops/linear.cc):
    "nchw,nwhu->nchu" and "chw,whr->chr" under any lettering; None for any other equation."""
    eq = equation.replace(" ", "")
    if "," not in eq or "->" not in eq or eq.index(",") > eq.index("->"):
        return None
    ea, rest = eq.split(",", 1)
    eb, eo = rest.split("->", 1)
    rank = len(ea)
    if rank not in (3, 4) or len(eb) != rank or len(eo) != rank:
        return None
    o = rank - 3
    c, h, w, u = ea[o], ea[o + 1], ea[o + 2], eb[o + 2]
    ok = ea[:o] == eb[:o] == eo[:o] and eb[o] == w and eb[o + 1] == h and eo[o:] == c + h + u
    return rank if ok and len(set(ea + u)) == rank + 1 else None


@translates("einsum")
def einsum(v):
    """out[n, c, h, u] = sum_w a[n, c, h, w] * b[n, w, h, u], n and h broadcast where one side
    has 1 (the kernel's rule; ONNX Einsum broadcasts only over an ellipsis): a MatMul over
    [n, h] batches, a as [n, h, c, w] and b as [n, h, w, u], then back to [n, c, h, u]. fp16
    inputs are multiplied in fp32 and the result rounded to fp16, as the kernel does."""
    b = v.builder
    if len(v.bindings("values")) != 2:
        raise Unsupported("%d inputs (needs 2)" % len(v.bindings("values")))
    rank = _einsum_rank(str(v.scalar("equation")))
    if rank is None:
        raise Unsupported("equation '%s': only \"nchw,nwhu->nchu\" and \"chw,whr->chr\" are defined"
                          % v.scalar("equation"))
    a, w = v.input("values", 0), v.input("values", 1)
    half = b.float_dtype(v.type_of("values", 0)["dtype"]) == "float16"
    if half:
        a, w = b.node("Cast", [a], to=1), b.node("Cast", [w], to=1)  # TensorProto.FLOAT
    swap = [0, 2, 1, 3] if rank == 4 else [1, 0, 2]  # c or w <-> h; its own inverse
    product = b.node("MatMul", [b.node("Transpose", [a], perm=swap), b.node("Transpose", [w], perm=swap)])
    if half:
        b.node("Cast", [b.node("Transpose", [product], perm=swap)], [v.output()], to=10)  # TensorProto.FLOAT16
    else:
        b.node("Transpose", [product], [v.output()], perm=swap)
