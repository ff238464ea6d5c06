"""affine (src/ops/sampling.cc), crop and iOS17's resize (src/ops/resize.cc) as ONNX operators.

affine samples x at an affine map of the output's pixel grid: the grid is built here in fp64 as
the kernel builds it (each output pixel's coordinate in the op's coordinates_mode, then
x' = a0 x + a1 y + a2, y' = b0 x + b1 y + b2 with the matrix's fp32 entries), mapped into
[-1, 1] in fp64 and sampled by GridSample with resample's rules (ops_nn.grid_sample).

iOS17's resize interpolates each resized axis in turn, as the kernel does. Where the sizes of
the resized axes are known at export, each axis is a Gather of the kernel's own taps (computed
here with its grid_point, in fp64) and, for LINEAR, the kernel's lerp lo + (hi - lo) * w in
fp32: every sampling mode, bit for bit. Where they are known only at run time, it is ONNX
Resize, whose coordinate modes match DEFAULT, STRICT_ALIGN_CORNERS and UNALIGN_CORNERS for
LINEAR only.
"""

import numpy as np
from onnx import TensorProto

from .graph import Unsupported
from .ops_nn import grid_sample
from .registry import translates

INT64_MAX = np.iinfo(np.int64).max


def _base_coordinates(mode, align, n):
    """Coordinate of each of the n output pixels along an axis (sampling.cc, base_coordinate)."""
    out = []
    for i in range(n):
        if mode == "unnormalized":
            out.append(float(i))
            continue
        if align:
            c = 0.0 if n == 1 else -1.0 + 2.0 * float(i) / float(n - 1)
        else:
            c = (2.0 * float(i) + 1.0) / float(n) - 1.0
        out.append((c + 1) / 2 if mode == "normalized_zero_to_one" else c)
    return out


@translates("affine")
def affine(v):
    b = v.builder
    oh, ow = int(v.scalar("output_height")), int(v.scalar("output_width"))
    if oh <= 0 or ow <= 0:
        raise Unsupported("output_height and output_width must be positive")
    mode = str(v.scalar("coordinates_mode")).lower()
    align = bool(v.scalar("align_corners"))
    ys, xs = _base_coordinates(mode, align, oh), _base_coordinates(mode, align, ow)
    base = np.asarray([[xs[j], ys[i], 1.0] for i in range(oh) for j in range(ow)], np.float64)  # [P, 3]
    matrix = v.input("transform_matrix")
    matrix = b.node("Cast", [matrix], to=TensorProto.DOUBLE)
    # [M, 6] -> [M, 3, 2]: column k of output coordinate k is (a_k0, a_k1, a_k2).
    matrix = b.node("Transpose", [b.node("Reshape", [matrix, b.const_int64([-1, 2, 3], "affine_rows")])], perm=[0, 2, 1])
    grid = b.node("MatMul", [b.initializer(base, "affine_base"), matrix])                 # [M, P, 2]
    grid = b.node("Reshape", [grid, b.const_int64([-1, oh, ow, 2], "affine_grid_shape")])
    # One matrix for the whole batch: repeated for each image.
    batch = b.node("Slice", [b.node("Shape", [v.input("x")]), b.const_int64([0], "zero1"), b.const_int64([1], "one1")])
    grid = b.node("Expand", [grid, b.node("Concat", [batch, b.const_int64([oh, ow, 2], "affine_tail")], axis=0)])
    grid_sample(v, grid, np.float64)


@translates("crop")
def crop(v):
    """x without crop_height[0] rows above, crop_height[1] below, crop_width[0] columns left and
    crop_width[1] right (the last two dims)."""
    b = v.builder
    ch, cw = v.ints("crop_height"), v.ints("crop_width")
    if len(ch) != 2 or len(cw) != 2 or min(ch + cw) < 0:
        raise Unsupported("crop amounts must be two non-negative entries each")
    if v.rank("x") >= 0 and v.rank("x") < 3:
        raise Unsupported("x must have rank >= 3")
    ends = [-ch[1] if ch[1] else INT64_MAX, -cw[1] if cw[1] else INT64_MAX]
    b.node("Slice", [v.input("x"), b.const_int64([ch[0], cw[0]], "crop_begin"), b.const_int64(ends, "crop_end"),
                     b.const_int64([-2, -1], "crop_axes")], [v.output()])


def _grid_point(mode, extent, i, n):
    """src/ops/resize.cc grid_point with start 0, in its order of operations (Python floats are
    doubles)."""
    x = extent + 1
    if mode == "STRICT_ALIGN_CORNERS":
        p = 0.0 if n == 1 else i * extent / (n - 1)
    elif mode == "ALIGN_CORNERS":
        p = extent / 2 if n == 1 else i * extent / (n - 1)
    elif mode == "DEFAULT":
        p = i * x / n
    elif mode == "OFFSET_CORNERS":
        delta = max(1.0, extent) / n
        p = 0.5 * delta + i * delta
    else:
        p = (i + 0.5) * x / n - 0.5
    return min(max(p, 0.0), max(extent, 0.0))


def _taps(mode, linear, size, n):
    lo, hi, w = [], [], []
    for i in range(n):
        p = _grid_point(mode, float(size - 1), i, n)
        if linear:
            k = min(int(np.floor(p)), size - 1)
            lo.append(k)
            hi.append(min(k + 1, size - 1))
            w.append(np.float32(p - k))
        else:
            k = min(max(int(np.floor(p + 0.5)), 0), size - 1)
            lo.append(k)
    return lo, hi, w


_RESIZE_MODES = {"STRICT_ALIGN_CORNERS": "align_corners", "DEFAULT": "asymmetric", "UNALIGN_CORNERS": "half_pixel"}


@translates("resize")
def resize(v):
    b = v.builder
    dims = int(v.scalar("resized_dims"))
    interpolation = str(v.scalar("interpolation_mode", "LINEAR"))
    mode = str(v.scalar("sampling_mode", "DEFAULT"))
    if interpolation not in ("LINEAR", "NEAREST_NEIGHBOR"):
        raise Unsupported("interpolation_mode '%s'" % interpolation)
    if mode not in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS", "DEFAULT", "OFFSET_CORNERS", "UNALIGN_CORNERS"):
        raise Unsupported("sampling_mode '%s'" % mode)
    linear = interpolation == "LINEAR"
    in_type, out_type = v.type_of("x"), v.outputs[0]["type"]
    rank = in_type["rank"]
    if rank < 0 or out_type["rank"] != rank:
        raise Unsupported("x of a rank known only at run time")
    if dims < 0 or dims > rank:
        raise Unsupported("resized_dims %d over x of rank %d" % (dims, rank))
    dtype = v.dtype("x")
    axes = list(range(rank - dims, rank))
    ins = [in_type["dims"][a] for a in axes]
    outs = [out_type["dims"][a] for a in axes]
    float_types = ("float32", "float16", "float64")
    if all(d >= 0 for d in ins + outs):
        data = v.input("x")
        if linear and dtype != "float32" and not (b.fp32 and dtype == "float16"):
            data = b.node("Cast", [data], to=TensorProto.FLOAT)  # the kernel interpolates in float
        for axis, size, n in reversed(list(zip(axes, ins, outs))):  # innermost first, as the kernel
            if size == n and mode != "OFFSET_CORNERS":
                continue
            if size == 0 and n > 0:
                raise Unsupported("a resize of an empty dim to %d" % n)
            lo, hi, w = _taps(mode, linear, size, n)
            low = b.node("Gather", [data, b.const_int64(lo, "resize_lo")], axis=axis)
            if not linear:
                data = low
                continue
            high = b.node("Gather", [data, b.const_int64(hi, "resize_hi")], axis=axis)
            weight = b.initializer(np.asarray(w, np.float32).reshape([n] + [1] * (rank - 1 - axis)), "resize_w")
            data = b.node("Add", [low, b.node("Mul", [b.node("Sub", [high, low]), weight])])
        _finish(v, data, linear, dtype, float_types)
        return
    if not linear:
        raise Unsupported("nearest-neighbour resize to sizes known only at run time: ONNX Resize computes the "
                          "sample positions from an fp32 scale, so positions at a rounding tie may round the other way")
    if mode not in _RESIZE_MODES:
        raise Unsupported("%s sampling to sizes known only at run time: no ONNX Resize coordinate mode places the "
                          "samples as it does (%s)" % (mode, "a one-sample axis takes the middle" if mode == "ALIGN_CORNERS"
                                                      else "samples at (i + 1/2) max(1, n - 1) / out"))
    if dtype not in float_types:
        raise Unsupported("a linear resize of %s to sizes known only at run time" % dtype)
    x = v.input("x")
    shape = b.node("Shape", [x])
    target = b.node("Cast", [v.input("shape")], to=TensorProto.INT64)
    target = b.node("Slice", [target, b.const_int64([-dims] if dims else [0], "resize_from"),
                              b.const_int64([INT64_MAX], "resize_to")])
    kept = b.node("Slice", [shape, b.const_int64([rank - dims], "resize_axis0"), b.const_int64([INT64_MAX], "resize_to")])
    target = b.node("Where", [b.node("Equal", [target, b.const_int64(0, "zero_i")]), kept, target])
    b.node("Resize", [x, "", "", target], [v.output()], axes=axes, mode="linear",
           coordinate_transformation_mode=_RESIZE_MODES[mode])


def _finish(v, data, linear, dtype, float_types):
    b = v.builder
    if not linear or dtype == "float32" or (b.fp32 and dtype == "float16"):
        b.node("Identity", [data], [v.output()])
    elif dtype in float_types:
        b.node("Cast", [data], [v.output()], to=b.onnx_type(dtype))
    else:  # lround: half away from zero
        half = b.initializer(np.asarray(0.5, np.float32), "half")
        rounded = b.node("Mul", [b.node("Sign", [data]), b.node("Floor", [b.node("Add", [b.node("Abs", [data]), half])])])
        b.node("Cast", [rounded], [v.output()], to=b.onnx_type(dtype))
