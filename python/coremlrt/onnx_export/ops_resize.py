"""Resizing (src/ops/resize.cc): crop, crop_resize, the upsample_* and resize_* ops and
iOS17's resize.

iOS17's resize interpolates each resized axis in turn, as the kernel does. Where the sizes of
the resized axes are known at export, each axis is a Gather of the kernel's own taps (computed
here with its grid_point, in fp64) and, for LINEAR, the kernel's lerp lo + (hi - lo) * w in
fp32: every sampling mode, bit for bit. Where they are known only at run time, it is ONNX
Resize, whose coordinate modes match DEFAULT, STRICT_ALIGN_CORNERS and UNALIGN_CORNERS for
LINEAR only; so are the older resize_* and upsample_* ops.
"""

import numpy as np
from onnx import TensorProto

from .graph import Unsupported
from .registry import translates

INT64_MAX = np.iinfo(np.int64).max


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


# Core ML sampling modes (src/ops/resize.cc, grid_point) as ONNX Resize coordinate modes.
_SAMPLING = {"STRICT_ALIGN_CORNERS": "align_corners", "DEFAULT": "asymmetric", "UNALIGN_CORNERS": "half_pixel"}


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
    if mode not in _SAMPLING:
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
           coordinate_transformation_mode=_SAMPLING[mode])


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
