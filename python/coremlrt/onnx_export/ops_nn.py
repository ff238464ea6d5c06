"""Network ops: convolution, pooling, linear and matrix products, normalization, softmax,
attention, resampling.

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


# Core ML sampling modes (src/ops/resize.cc, grid_point) as ONNX Resize coordinate modes.
_SAMPLING = {"STRICT_ALIGN_CORNERS": "align_corners", "DEFAULT": "asymmetric", "UNALIGN_CORNERS": "half_pixel"}


def _resize(v, linear, sampling, scales=None):
    """Resizes the last two dims to the output's size: the declared one, or where that is known
    only at run time, the input's scaled by `scales` (height, width), rounded down as the
    kernel rounds it."""
    b = v.builder
    dims = v.outputs[0]["type"]["dims"]
    rank = v.outputs[0]["type"]["rank"]
    if rank < 3:
        raise Unsupported("a resize of rank %d" % rank)
    if sampling not in _SAMPLING:
        raise Unsupported("sampling mode %s" % sampling)
    attributes = {"mode": "linear" if linear else "nearest", "coordinate_transformation_mode": _SAMPLING[sampling]}
    if not linear:
        attributes["nearest_mode"] = "floor"
    if all(d >= 0 for d in dims):
        b.node("Resize", [v.input("x"), "", "", b.const_int64(dims, "sizes")], [v.output()], **attributes)
    elif scales is not None:
        factors = np.asarray([1.0] * (rank - 2) + list(scales), dtype=np.float32)
        b.node("Resize", [v.input("x"), "", b.initializer(factors, "scales")], [v.output()], **attributes)
    else:
        raise Unsupported("a resize to a size known only at run time")


def _scales(v):
    return float(v.scalar("scale_factor_height", 1.0)), float(v.scalar("scale_factor_width", 1.0))


@translates("upsample_nearest_neighbor")
def upsample_nearest(v):
    _resize(v, False, "DEFAULT", _scales(v))


@translates("resize_nearest_neighbor")
def resize_nearest(v):
    _resize(v, False, "DEFAULT")


@translates("upsample_bilinear")
def upsample_bilinear(v):
    align = bool(v.scalar("align_corners", True))
    half_pixel = bool(v.scalar("half_pixel_centers", not align))
    _resize(v, True, "STRICT_ALIGN_CORNERS" if align else "UNALIGN_CORNERS" if half_pixel else "DEFAULT", _scales(v))


@translates("resize_bilinear")
def resize_bilinear(v):
    _resize(v, True, v.scalar("sampling_mode", "DEFAULT"))



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


@translates("resample")
def resample(v):
    """PyTorch's grid_sample as the kernel computes it (src/ops/sampling.cc): ONNX GridSample,
    whose grid is (x, y) in [-1, 1] with the same align_corners rule. Core ML's other coordinate
    modes are mapped into [-1, 1] first (in fp32, where the kernel maps them in fp64: positions
    agree to fp32 rounding). Padding: constant 0 is GridSample's zeros; constant c samples x - c
    with zeros and adds c back (the taps' weights sum to 1, so the padded taps give c); border is
    border. GridSample's reflection mirrors about pixel centres with align_corners and about the
    image edges without: Core ML's reflection (always about the centres) and symmetric (always
    about the edges) are exported only where they coincide with it, and refused elsewhere."""
    b = v.builder
    grid = v.input("coordinates")
    if v.dtype("coordinates") != "float32":
        grid = b.node("Cast", [grid], to=1)
    grid_sample(v, grid, np.float32)


def grid_sample(v, grid, grid_type):
    """GridSample of v's input x at `grid` ([B, H2, W2, 2], (x, y) in the op's coordinates_mode,
    of numpy type `grid_type`: fp32, or fp64 mapped in fp64 and then cast to fp32), with the
    op's sampling_mode, padding_mode, padding_value and align_corners (resample, affine)."""
    b = v.builder
    mode = str(v.scalar("sampling_mode")).lower()
    padding = str(v.scalar("padding_mode")).lower()
    coordinates = str(v.scalar("coordinates_mode")).lower()
    align = bool(v.scalar("align_corners"))
    value = float(v.scalar("padding_value", 0.0))
    if mode not in ("bilinear", "nearest"):
        raise Unsupported("sampling_mode '%s'" % mode)
    onnx_padding = {"constant": "zeros", "border": "border"}.get(padding)
    if padding == "reflection":
        if not align:
            raise Unsupported("reflection padding without align_corners: GridSample then reflects about the "
                              "image edges, Core ML about the pixel centres")
        onnx_padding = "reflection"
    elif padding == "symmetric":
        if align:
            raise Unsupported("symmetric padding with align_corners: GridSample then reflects about the pixel "
                              "centres, Core ML about the image edges")
        onnx_padding = "reflection"
    elif onnx_padding is None:
        raise Unsupported("padding_mode '%s'" % padding)
    x = v.input("x")
    if v.dtype("x") != "float32":
        x = b.node("Cast", [x], to=1)  # TensorProto.FLOAT: the kernel samples in float
    const = lambda value, hint: b.initializer(np.asarray(value, grid_type), hint)  # noqa: E731
    if coordinates == "normalized_zero_to_one":
        grid = b.node("Sub", [b.node("Mul", [grid, const(2.0, "two")]), const(1.0, "one")])
    elif coordinates == "unnormalized":
        dims = v.type_of("x")["dims"]
        if v.rank("x") != 4 or dims[2] < 0 or dims[3] < 0:
            raise Unsupported("unnormalized coordinates over an image whose size is known only at run time")
        w, h = dims[3], dims[2]
        if align and min(w, h) < 2:
            raise Unsupported("unnormalized coordinates with align_corners over an image one pixel wide")
        # pixel p -> align_corners: 2p / (n - 1) - 1; otherwise (2p + 1) / n - 1.
        if align:
            scale, shift = [2.0 / (w - 1), 2.0 / (h - 1)], [-1.0, -1.0]
        else:
            scale, shift = [2.0 / w, 2.0 / h], [1.0 / w - 1.0, 1.0 / h - 1.0]
        grid = b.node("Add", [b.node("Mul", [grid, const(scale, "grid_scale")]), const(shift, "grid_shift")])
    elif coordinates != "normalized_minus_one_to_one":
        raise Unsupported("coordinates_mode '%s'" % coordinates)
    if grid_type != np.float32:
        grid = b.node("Cast", [grid], to=1)
    shifted = padding == "constant" and value != 0.0
    c = b.initializer(np.asarray(value, np.float32), "padding_value")
    if shifted:
        x = b.node("Sub", [x, c])
    onnx_mode = ("linear" if mode == "bilinear" else "nearest") if b.opset >= 20 else mode
    sampled = b.node("GridSample", [x, grid], align_corners=int(align), mode=onnx_mode, padding_mode=onnx_padding)
    if shifted:
        sampled = b.node("Add", [sampled, c])
    if v.output_dtype() != "float32" and not (b.fp32 and v.output_dtype() == "float16"):
        b.node("Cast", [sampled], [v.output()], to=b.onnx_type(v.output_dtype()))
    else:
        b.node("Identity", [sampled], [v.output()])


def _crop_grid(b, mode, start, end, n):
    """Positions [K, n] (fp64) of the n samples along a box edge from `start` to `end` ([K, 1]),
    as src/ops/resize.cc's box_point and grid_point compute them, in their order of operations:
    a box given backwards (start > end) is sampled from its end, in reverse."""
    extent = b.node("Abs", [b.node("Sub", [end, start])])
    i = b.initializer(np.arange(n, dtype=np.float64).reshape(1, n), "sample")
    d = lambda value, hint: b.initializer(np.asarray(value, np.float64), hint)  # noqa: E731
    if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
        if n == 1:
            g = b.node("Mul", [extent, d(0.0 if mode == "STRICT_ALIGN_CORNERS" else 0.5, "half")])
            g = b.node("Expand", [g, b.const_int64([1, 1], "one")])
        else:
            g = b.node("Div", [b.node("Mul", [i, extent]), d(n - 1.0, "last")])
    elif mode == "DEFAULT":
        g = b.node("Div", [b.node("Mul", [i, b.node("Add", [extent, d(1.0, "one")])]), d(float(n), "count")])
    elif mode == "OFFSET_CORNERS":
        delta = b.node("Div", [b.node("Max", [extent, d(1.0, "one")]), d(float(n), "count")])
        g = b.node("Add", [b.node("Mul", [d(0.5, "half"), delta]), b.node("Mul", [i, delta])])
    elif mode == "UNALIGN_CORNERS":
        span = b.node("Add", [extent, d(1.0, "one")])
        g = b.node("Sub", [b.node("Div", [b.node("Mul", [b.node("Add", [i, d(0.5, "half")]), span]), d(float(n), "count")]),
                           d(0.5, "half")])
    else:
        raise Unsupported("sampling_mode '%s'" % mode)
    g = b.node("Max", [b.node("Min", [g, extent]), d(0.0, "zero")])  # clamp(g, 0, max(extent, 0))
    return b.node("Where", [b.node("LessOrEqual", [start, end]), b.node("Add", [start, g]), b.node("Sub", [start, g])])


@translates("crop_resize")
def crop_resize(v):
    """TensorFlow's crop_and_resize as the kernel computes it (src/ops/resize.cc): each box
    sampled at th x tw points placed by the sampling mode and clamped to the box, a point
    outside the image taking pad_value, one inside interpolated from its four neighbours
    (top = a + (b - a) * fx, bottom likewise, top + (bottom - top) * fy in fp32). Written with
    Gathers, not RoiAlign: RoiAlign averages sampling points over bins and reads a point just
    outside the image from the edge, where Core ML samples one point per output and pads."""
    b = v.builder
    ios17 = v.has("boxes")
    x_type = v.type_of("x")
    if x_type["rank"] != 4 or any(d < 0 for d in x_type["dims"][1:]):
        raise Unsupported("x whose channels or spatial size are known only at run time")
    if b.float_dtype(x_type["dtype"]) not in ("float32", "float16"):
        raise Unsupported("x of dtype %s" % x_type["dtype"])
    _, c, h, w = x_type["dims"]
    th, tw = int(v.scalar("target_height", 1)), int(v.scalar("target_width", 1))
    normalized = bool(v.scalar("normalized_coordinates", False))
    spatial_scale = float(v.scalar("spatial_scale", 1.0))
    pad_value = float(v.scalar("pad_value", 0.0))
    box_mode = str(v.scalar("box_coordinate_mode", "CORNERS_HEIGHT_FIRST"))
    mode = str(v.scalar("sampling_mode", "DEFAULT"))
    boxes = b.node("Cast", [v.input("boxes" if ios17 else "roi")], to=11)  # TensorProto.DOUBLE
    x = v.input("x")
    if x_type["dtype"] != "float32":
        x = b.node("Cast", [x], to=1)
    data = b.node("Transpose", [x], perm=[0, 2, 3, 1])                      # [B, H, W, C]
    if ios17:
        boxes = b.node("Reshape", [boxes, b.const_int64([-1, 4], "boxes")])
        coordinates = boxes
        if v.has("box_indices"):
            index = b.node("Cast", [b.node("Reshape", [v.input("box_indices"), b.const_int64([-1], "flat")])], to=7)
        else:
            index = b.node("Range", [b.const_int64(0, "zero"), b.node("Squeeze", [b.node("Slice", [
                b.node("Shape", [boxes]), b.const_int64([0], "s"), b.const_int64([1], "e")]), b.const_int64([0], "a")]),
                b.const_int64(1, "one")])
        images = b.node("Gather", [data, index], axis=0)                    # [K, H, W, C], K = N
    else:
        per_box = v.type_of("roi")["dims"][2] if v.rank("roi") == 5 else -1
        if per_box not in (4, 5):
            raise Unsupported("roi whose box size is known only at run time")
        rows = b.node("Reshape", [boxes, b.const_int64([-1, per_box], "boxes")])
        if per_box == 5:
            coordinates = b.node("Slice", [rows, b.const_int64([1], "s"), b.const_int64([5], "e"), b.const_int64([1], "a")])
            index = b.node("Cast", [b.node("Reshape", [b.node("Slice", [
                rows, b.const_int64([0], "s"), b.const_int64([1], "e"), b.const_int64([1], "a")]),
                b.const_int64([-1], "flat")])], to=7)  # static_cast<int64_t>: truncation
            images = b.node("Gather", [data, index], axis=0)
        else:
            # Every box over every image: K = N * B, box-major.
            batch = x_type["dims"][0]
            if batch < 0:
                raise Unsupported("a batch known only at run time, without box indices")
            coordinates = b.node("Reshape", [b.node("Expand", [
                b.node("Unsqueeze", [rows, b.const_int64([1], "axis")]), b.const_int64([1, batch, 1], "per_image")]),
                b.const_int64([-1, 4], "boxes")])
            n_boxes = b.node("Slice", [b.node("Shape", [rows]), b.const_int64([0], "s"), b.const_int64([1], "e")])
            images = b.node("Reshape", [b.node("Expand", [
                b.node("Unsqueeze", [data, b.const_int64([0], "axis")]),
                b.node("Concat", [n_boxes, b.const_int64([1, 1, 1, 1], "ones")], axis=0)]),
                b.const_int64([-1, h, w, c], "images")])
    column = lambda k: b.node("Slice", [coordinates, b.const_int64([k], "s"), b.const_int64([k + 1], "e"),  # noqa: E731
                                        b.const_int64([1], "a")])
    v0, v1, v2, v3 = (column(k) for k in range(4))
    if box_mode == "CORNERS_HEIGHT_FIRST":
        y1, x1, y2, x2 = v0, v1, v2, v3
    elif box_mode == "CORNERS_WIDTH_FIRST":
        x1, y1, x2, y2 = v0, v1, v2, v3
    elif box_mode in ("CENTER_SIZE_HEIGHT_FIRST", "CENTER_SIZE_WIDTH_FIRST"):
        cy, cx, bh, bw = (v0, v1, v2, v3) if box_mode == "CENTER_SIZE_HEIGHT_FIRST" else (v1, v0, v3, v2)
        half = b.initializer(np.asarray(2.0), "two")
        hh, hw = b.node("Div", [bh, half]), b.node("Div", [bw, half])
        y1, y2, x1, x2 = b.node("Sub", [cy, hh]), b.node("Add", [cy, hh]), b.node("Sub", [cx, hw]), b.node("Add", [cx, hw])
    else:
        raise Unsupported("box_coordinate_mode '%s'" % box_mode)
    sy = b.initializer(np.asarray((h - 1 if normalized else 1) * spatial_scale, np.float64), "scale_y")
    sx = b.initializer(np.asarray((w - 1 if normalized else 1) * spatial_scale, np.float64), "scale_x")
    y1, y2 = b.node("Mul", [y1, sy]), b.node("Mul", [y2, sy])
    x1, x2 = b.node("Mul", [x1, sx]), b.node("Mul", [x2, sx])
    py, px = _crop_grid(b, mode, y1, y2, th), _crop_grid(b, mode, x1, x2, tw)   # [K, th], [K, tw]

    def axis(p, n):
        """(low index, high index, fp32 fraction, outside) along an axis of n pixels."""
        zero, last = b.initializer(np.asarray(0.0), "zero"), b.initializer(np.asarray(n - 1.0), "last")
        outside = b.node("Or", [b.node("Less", [p, zero]), b.node("Greater", [p, last])])
        inside = b.node("Max", [b.node("Min", [p, last]), zero])             # masked where outside
        low = b.node("Floor", [inside])
        fraction = b.node("Cast", [b.node("Sub", [inside, low])], to=1)
        low = b.node("Cast", [low], to=7)
        high = b.node("Min", [b.node("Add", [low, b.const_int64(1, "one")]), b.const_int64(n - 1, "last")])
        return low, high, fraction, outside

    y0, yb, fy, out_y = axis(py, h)
    x0, xb, fx, out_x = axis(px, w)

    def rows_at(index):  # images [K, H, W, C] -> [K, W, th, C]
        picked = b.node("GatherND", [images, b.node("Unsqueeze", [index, b.const_int64([2], "axis")])], batch_dims=1)
        return b.node("Transpose", [picked], perm=[0, 2, 1, 3])

    def at(row_block, index):  # [K, W, th, C] -> [K, tw, th, C]
        return b.node("GatherND", [row_block, b.node("Unsqueeze", [index, b.const_int64([2], "axis")])], batch_dims=1)

    top_rows, bottom_rows = rows_at(y0), rows_at(yb)
    fx4 = b.node("Unsqueeze", [fx, b.const_int64([2, 3], "axes")])             # [K, tw, 1, 1]
    fy4 = b.node("Unsqueeze", [fy, b.const_int64([1, 3], "axes")])             # [K, 1, th, 1]
    a, bb = at(top_rows, x0), at(top_rows, xb)
    top = b.node("Add", [a, b.node("Mul", [b.node("Sub", [bb, a]), fx4])])
    a, bb = at(bottom_rows, x0), at(bottom_rows, xb)
    bottom = b.node("Add", [a, b.node("Mul", [b.node("Sub", [bb, a]), fx4])])
    value = b.node("Add", [top, b.node("Mul", [b.node("Sub", [bottom, top]), fy4])])   # [K, tw, th, C]
    outside = b.node("Or", [b.node("Unsqueeze", [out_x, b.const_int64([2, 3], "axes")]),
                            b.node("Unsqueeze", [out_y, b.const_int64([1, 3], "axes")])])
    value = b.node("Where", [outside, b.initializer(np.asarray(pad_value, np.float32), "pad_value"), value])
    value = b.node("Transpose", [value], perm=[0, 3, 2, 1])                    # [K, C, th, tw]
    out = v.outputs[0]
    name = None
    if not ios17:
        per_image = 1 if per_box == 5 else x_type["dims"][0]
        value = b.node("Reshape", [value, b.const_int64([-1, per_image, c, th, tw], "out_shape")])
        dims = out["type"]["dims"]
        if out["type"]["rank"] == 5 and dims[1] != per_image:
            # Boxes with their image index give one image each, [N, 1, C, h, w], as the kernel
            # computes them, where coremltools declares the batch.
            name = b.define(out["name"], dict(out["type"], dims=[dims[0], per_image] + list(dims[2:])))
    name = name or v.output()
    if b.float_dtype(v.output_dtype()) != "float32":
        b.node("Cast", [value], [name], to=b.onnx_type(v.output_dtype()))
    else:
        b.node("Identity", [value], [name])
