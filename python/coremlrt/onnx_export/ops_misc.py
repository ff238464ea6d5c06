"""Quantization, normalization variants, scatter and space-to-depth ops.

Semantics as our kernels compute them: dequantize's result takes the scale's dtype
(src/ops/quantization.cc); local_response_norm sums channels [c - size/2, c + (size-1)/2],
which is ONNX LRN's window for odd sizes only; l2_norm normalizes over the last three dims
(src/ops/normalization.cc); depth_to_space and space_to_depth use TensorFlow's DCR order and
pixel_shuffle PyTorch's CRD order (src/ops/space.cc).
"""

import numpy as np

from .graph import MIL_DTYPE_NAMES, Unsupported
from .ops_shape import int64_input
from .registry import translates


def _quantization_inputs(v, data_param):
    b = v.builder
    inputs = [v.input(data_param), v.input("scale")]
    if v.has("zero_point"):
        inputs.append(v.input("zero_point"))
    attributes = {}
    if v.has("axis"):
        attributes["axis"] = int(v.scalar("axis"))
    elif v.type_of("scale")["rank"] > 0 and max(v.type_of("scale")["dims"] + [1]) > 1:
        raise Unsupported("a per-axis scale without an axis")
    return b, inputs, attributes


@translates("dequantize")
def dequantize(v):
    b, inputs, attributes = _quantization_inputs(v, "input")
    b.node("DequantizeLinear", inputs, [v.output()], **attributes)


@translates("quantize")
def quantize(v):
    b, inputs, attributes = _quantization_inputs(v, "input")
    if len(inputs) == 2:
        # The zero point fixes the output type; without one ONNX gives uint8.
        dtype = MIL_DTYPE_NAMES.get(v.scalar("output_dtype", "uint8"))
        zero = np.zeros(v.type_of("scale")["dims"] or [], dtype=np.int8 if dtype == "int8" else np.uint8)
        inputs.append(b.initializer(zero, "zero_point"))
    b.node("QuantizeLinear", inputs, [v.output()], **attributes)


@translates("local_response_norm")
def local_response_norm(v):
    b = v.builder
    size = int(v.scalar("size"))
    alpha, beta, k = float(v.scalar("alpha", 1e-4)), float(v.scalar("beta", 0.75)), float(v.scalar("k", 1.0))
    x = v.input("x")
    # ONNX Runtime's LRN takes [N, C, H, W]: other ranks pass through that shape.
    folded = b.node("Reshape", [x, b.const_int64([0, 0, -1, 1], "nchw")]) if v.rank("x") != 4 else x
    if size % 2:
        result = b.node("LRN", [folded], size=size, alpha=alpha, beta=beta, bias=k)
    else:
        # ONNX centres an even window one channel higher: sum the window with a convolution of
        # ones over the channel axis, padded as the kernel pads it.
        squares = b.node("Unsqueeze", [b.node("Mul", [folded, folded]), b.const_int64([1], "axes")])  # [N, 1, C, P, 1]
        ones = b.initializer(np.ones([1, 1, size, 1, 1], dtype=_np_dtype(b, v.dtype("x"))), "lrn_window")
        window = b.node("Conv", [squares, ones], pads=[size // 2, 0, 0, (size - 1) // 2, 0, 0])
        window = b.node("Squeeze", [window, b.const_int64([1], "axes")])
        scaled = b.node("Add", [b.node("Mul", [window, b.const_like(alpha / size, v.dtype("x"), "alpha")]),
                                b.const_like(k, v.dtype("x"), "k")])
        result = b.node("Div", [folded, b.node("Pow", [scaled, b.const_like(beta, v.dtype("x"), "beta")])])
    if v.rank("x") != 4:
        result = b.node("Reshape", [result, b.node("Shape", [x])])
    b.node("Identity", [result], [v.output()])


def _np_dtype(builder, dtype):
    return {"float16": np.float16, "float32": np.float32}[builder.float_dtype(dtype)]


@translates("l2_norm")
def l2_norm(v):
    b = v.builder
    x = v.input("x")
    squares = b.node("ReduceSumSquare", [x, b.const_int64([-3, -2, -1], "axes")], keepdims=1)
    eps = b.const_like(v.scalar("epsilon", 1e-6), v.dtype("x"), "epsilon")
    b.node("Div", [x, b.node("Sqrt", [b.node("Add", [squares, eps])])], [v.output()])


@translates("clamped_relu")
def clamped_relu(v):
    b = v.builder
    leaky = b.node("LeakyRelu", [v.input("x")], alpha=float(v.scalar("alpha", 0.0)))
    b.node("Min", [leaky, b.const_like(v.scalar("beta", 6.0), v.dtype("x"), "beta")], [v.output()])


@translates("softplus_parametric")
def softplus_parametric(v):
    b = v.builder
    rank = v.rank("x")
    shape = [-1] + [1] * (rank - 2)
    dtype = _np_dtype(b, v.dtype("x"))  # parameters may be wider than x from iOS17 on
    alpha = b.initializer(v.constant("alpha", required=True).array.reshape(shape).astype(dtype), "alpha")
    beta = b.initializer(v.constant("beta", required=True).array.reshape(shape).astype(dtype), "beta")
    soft = b.node("Softplus", [b.node("Mul", [v.input("x"), beta])])
    b.node("Mul", [soft, alpha], [v.output()])


_SCATTER_MODES = {"update": "none", "add": "add", "mul": "mul", "max": "max", "min": "min"}


def _scatter_mode(v):
    mode = v.scalar("mode", "add")
    if mode not in _SCATTER_MODES:
        raise Unsupported("scatter mode '%s'" % mode)
    return _SCATTER_MODES[mode]


@translates("scatter_along_axis")
def scatter_along_axis(v):
    _scatter_elements(v, v.input("data"), int64_input(v, "indices"), v.input("updates"), int(v.scalar("axis", 0)))


@translates("scatter_nd")
def scatter_nd(v):
    v.builder.node("ScatterND", [v.input("data"), int64_input(v, "indices"), v.input("updates")], [v.output()],
                   reduction=_scatter_mode(v))


@translates("depth_to_space")
def depth_to_space(v):
    if v.rank("x") != 4:
        raise Unsupported("rank %d" % v.rank("x"))
    v.builder.node("DepthToSpace", [v.input("x")], [v.output()], blocksize=int(v.scalar("block_size")), mode="DCR")


@translates("pixel_shuffle")
def pixel_shuffle(v):
    if v.rank("x") != 4:
        raise Unsupported("rank %d" % v.rank("x"))
    v.builder.node("DepthToSpace", [v.input("x")], [v.output()], blocksize=int(v.scalar("upscale_factor")), mode="CRD")


@translates("space_to_depth")
def space_to_depth(v):
    if v.rank("x") != 4:
        raise Unsupported("rank %d" % v.rank("x"))
    v.builder.node("SpaceToDepth", [v.input("x")], [v.output()], blocksize=int(v.scalar("block_size")))


@translates("fill_like")
def fill_like(v):
    from onnx import numpy_helper
    b = v.builder
    dtype = b.float_dtype(v.output_dtype())
    np_dtype = {"float16": np.float16, "float32": np.float32, "int32": np.int32, "bool": np.bool_}.get(dtype)
    if np_dtype is None:
        raise Unsupported("fill_like of %s" % dtype)
    value = np.asarray([v.scalar("value", 0.0)], dtype=np_dtype)
    b.node("ConstantOfShape", [b.node("Shape", [v.input("ref_tensor")])], [v.output()],
           value=numpy_helper.from_array(value))


@translates("scatter")
def scatter(v):
    """data[.., indices[i], ..] (along axis) takes updates[.., i, ..]: ScatterElements with the
    indices broadcast to the updates' shape."""
    b = v.builder
    rank = v.rank("data")
    axis = int(v.scalar("axis", 0)) % rank
    if v.rank("indices") != 1:
        raise Unsupported("indices of rank %d" % v.rank("indices"))
    updates = v.input("updates")
    shape = [1] * rank
    shape[axis] = -1
    indices = b.node("Reshape", [int64_input(v, "indices"), b.const_int64(shape, "index_shape")])
    indices = b.node("Expand", [indices, b.node("Shape", [updates])])
    _scatter_elements(v, v.input("data"), indices, updates, axis)


def _scatter_elements(v, data, indices, updates, axis):
    """ScatterElements; a reduction over fp16 values runs in fp32 (ONNX Runtime's CPU provider
    has no fp16 kernel for it), each result rounded to fp16 once, as one fp16 operation is."""
    b = v.builder
    reduction = _scatter_mode(v)
    if reduction != "none" and b.float_dtype(v.dtype("data")) == "float16":
        wide = [b.node("Cast", [x], to=1) for x in (data, updates)]  # TensorProto.FLOAT
        result = b.node("ScatterElements", [wide[0], indices, wide[1]], axis=axis, reduction=reduction)
        b.node("Cast", [result], [v.output()], to=10)  # TensorProto.FLOAT16
    else:
        b.node("ScatterElements", [data, indices, updates], [v.output()], axis=axis, reduction=reduction)


def _spatial_dims(v):
    """(C, H, W) of a rank-4 x, known at export (the batch may vary)."""
    t = v.type_of("x")
    if t["rank"] != 4:
        raise Unsupported("x of rank %d (needs 4)" % t["rank"])
    if any(d < 0 for d in t["dims"][1:]):
        raise Unsupported("channels or spatial dims known only at run time")
    return t["dims"][1:]


@translates("pixel_unshuffle")
def pixel_unshuffle(v):
    """PyTorch's order (channel c * f * f + i * f + j), which ONNX's SpaceToDepth (DCR only) does
    not write: a reshape to [n, C, H/f, f, W/f, f], a transpose and a reshape (src/ops/space.cc)."""
    b = v.builder
    c, h, w = _spatial_dims(v)
    f = int(v.scalar("downscale_factor"))
    if h % f or w % f:
        raise Unsupported("spatial size %dx%d not divisible by %d" % (h, w, f))
    view = b.node("Reshape", [v.input("x"), b.const_int64([-1, c, h // f, f, w // f, f], "view")])
    moved = b.node("Transpose", [view], perm=[0, 1, 3, 5, 2, 4])
    b.node("Reshape", [moved, b.const_int64([-1, c * f * f, h // f, w // f], "shape")], [v.output()])


def _two_by_two(v, param):
    values = v.ints(param)
    if values is None or len(values) != 4 or any(p < 0 for p in values):
        raise Unsupported("%s is not a constant [2, 2] of non-negative values" % param)
    return values


def _block_shape(v):
    """space_to_batch's and batch_to_space's (height, width) block, two positive constants."""
    block = v.ints("block_shape")
    if block is None or len(block) != 2 or min(block) < 1:
        raise Unsupported("block_shape is not two positive constants")
    return block


@translates("space_to_batch")
def space_to_batch(v):
    """TensorFlow's SpaceToBatchND on [n, C, H, W] (src/ops/space.cc): zero padding, then output
    batch (i * b1 + j) * n + b holds padded[b, :, h * b0 + i, w * b1 + j]."""
    b = v.builder
    c, h, w = _spatial_dims(v)
    b0, b1 = _block_shape(v)
    pads = _two_by_two(v, "paddings")
    hp, wp = h + pads[0] + pads[1], w + pads[2] + pads[3]
    if hp % b0 or wp % b1:
        raise Unsupported("padded size %dx%d not divisible by the block shape" % (hp, wp))
    x = v.input("x")
    if any(pads):
        x = b.node("Pad", [x, b.const_int64([0, 0, pads[0], pads[2], 0, 0, pads[1], pads[3]], "pads")])
    view = b.node("Reshape", [x, b.const_int64([-1, c, hp // b0, b0, wp // b1, b1], "view")])
    moved = b.node("Transpose", [view], perm=[3, 5, 0, 1, 2, 4])
    b.node("Reshape", [moved, b.const_int64([-1, c, hp // b0, wp // b1], "shape")], [v.output()])


@translates("batch_to_space")
def batch_to_space(v):
    """The inverse (src/ops/space.cc): batch [b0, b1, n] interleaved back into space, then the
    crops taken off."""
    b = v.builder
    c, h, w = _spatial_dims(v)
    b0, b1 = _block_shape(v)
    crops = _two_by_two(v, "crops")
    if crops[0] + crops[1] > h * b0 or crops[2] + crops[3] > w * b1:
        raise Unsupported("crops exceed the spatial size")
    batch = v.type_of("x")["dims"][0]
    if batch >= 0 and batch % (b0 * b1):
        raise Unsupported("batch %d not divisible by the block size %d" % (batch, b0 * b1))
    view = b.node("Reshape", [v.input("x"), b.const_int64([b0, b1, -1, c, h, w], "view")])
    moved = b.node("Transpose", [view], perm=[2, 3, 4, 0, 5, 1])
    full = b.node("Reshape", [moved, b.const_int64([-1, c, h * b0, w * b1], "shape")])
    b.node("Slice", [full, b.const_int64([crops[0], crops[2]], "starts"),
                     b.const_int64([h * b0 - crops[1], w * b1 - crops[3]], "ends"), b.const_int64([2, 3], "axes")],
           [v.output()])


@translates("int8_dynamic_linear")
def int8_dynamic_linear(v):
    """The kernel's rule (src/ops/dynamic_quantization.cc), step by step: scale_x = max|x| / 127
    over the whole tensor (fp32), q = clamp(round half to even(x / scale_x), -127, 127) as int8,
    the int32 product with the int8 weights (MatMulInteger), then
    fp32(double(acc) * double(scale_x) * double(weight_scale)) + bias. An all-zero x gives the
    bias; an x holding NaN or an infinity gives NaN everywhere. The same arithmetic in the same
    precisions, so results agree exactly."""
    b = v.builder
    weight = v.constant("weight", required=True).array
    if weight.dtype != np.int8 or weight.ndim != 2:
        raise Unsupported("weight is not an int8 constant [D_out, D_in]")
    weight_scale = float(v.constant("weight_scale", required=True).array.reshape(-1)[0])
    d_out = weight.shape[0]
    bias = v.constant("bias").array.astype(np.float32).reshape(-1) if v.has("bias") else np.zeros(d_out, np.float32)
    x = v.input("x")
    max_abs = b.node("ReduceMax", [b.node("Abs", [x])], keepdims=0)
    scale_x = b.node("Div", [max_abs, b.initializer(np.asarray(127.0, np.float32), "q_range")])
    rounded = b.node("Round", [b.node("Div", [x, scale_x])])
    clipped = b.node("Clip", [rounded, b.initializer(np.asarray(-127.0, np.float32), "q_min"),
                              b.initializer(np.asarray(127.0, np.float32), "q_max")])
    # NaN quotients (0 / 0 for an all-zero x, or a non-finite x) become 0 before the cast: an
    # all-zero x then gives 0 + bias, the kernel's result; a non-finite one is replaced below.
    clipped = b.node("Where", [b.node("IsNaN", [clipped]), b.initializer(np.asarray(0.0, np.float32), "zero"), clipped])
    q = b.node("Cast", [clipped], to=3)  # TensorProto.INT8
    acc = b.node("MatMulInteger", [q, b.initializer(np.ascontiguousarray(weight.T), "weight_t")])
    wide = b.node("Mul", [b.node("Mul", [b.node("Cast", [acc], to=11), b.node("Cast", [scale_x], to=11)]),
                          b.initializer(np.asarray(weight_scale, np.float64), "weight_scale")])  # TensorProto.DOUBLE
    bias_name = b.initializer(bias, "bias")
    y = b.node("Add", [b.node("Cast", [wide], to=1), bias_name])  # TensorProto.FLOAT
    # x - x is NaN exactly where x is NaN or infinite.
    nonfinite = b.node("ReduceMax", [b.node("Cast", [b.node("IsNaN", [b.node("Sub", [x, x])])], to=1)], keepdims=0)
    finite = b.node("Equal", [nonfinite, b.initializer(np.asarray(0.0, np.float32), "zero")])
    b.node("Where", [finite, y, b.initializer(np.asarray(np.nan, np.float32), "nan")], [v.output()])
