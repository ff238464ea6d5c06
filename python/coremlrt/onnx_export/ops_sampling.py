"""Sampling: resample and affine (src/ops/sampling.cc) as ONNX GridSample.

resample is PyTorch's grid_sample: GridSample takes its grid after Core ML's coordinate modes are
mapped into [-1, 1]. affine samples x at an affine map of the output's pixel grid: the grid is
built here in fp64 as the kernel builds it (each output pixel's coordinate in the op's
coordinates_mode, then x' = a0 x + a1 y + a2, y' = b0 x + b1 y + b2 with the matrix's fp32
entries), mapped into [-1, 1] in fp64 and sampled by GridSample with resample's rules
(grid_sample).
"""

import numpy as np
from onnx import TensorProto

from .graph import Unsupported
from .registry import translates


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
