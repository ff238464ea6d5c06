// Image resizing ops (docs/design/coreml-format.md, "Resizing and sampling"): upsample_*, resize_*, resize
// (iOS17), crop and crop_resize. Interpolation is separable: each resized axis is one pass over a float copy
// of the data, so fp16 inputs are rounded once, at the end.
#include <algorithm>
#include <cmath>

#include "ops/register.h"
#include "ops/strided.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

enum class Sampling { StrictAlignCorners, AlignCorners, Default, OffsetCorners, UnalignCorners };

Sampling parse_sampling(const KernelBuilder& b, const std::string& name) {
  static const std::pair<const char*, Sampling> kModes[] = {
      {"STRICT_ALIGN_CORNERS", Sampling::StrictAlignCorners}, {"ALIGN_CORNERS", Sampling::AlignCorners},
      {"DEFAULT", Sampling::Default}, {"OFFSET_CORNERS", Sampling::OffsetCorners},
      {"UNALIGN_CORNERS", Sampling::UnalignCorners}};
  for (auto& [text, mode] : kModes)
    if (name == text) return mode;
  b.fail("unknown sampling_mode '", name, "'");
}

// Where output sample i of n falls on the interval [start, start + extent], following the
// Core ML sampling modes (for whole images: start 0, extent size - 1). Clamped to it.
double grid_point(Sampling mode, double start, double extent, int64_t i, int64_t n) {
  const double x = extent + 1;  // the number of input samples the interval spans
  double p;
  switch (mode) {
    case Sampling::StrictAlignCorners: p = n == 1 ? 0 : i * extent / (n - 1); break;
    case Sampling::AlignCorners: p = n == 1 ? extent / 2 : i * extent / (n - 1); break;
    case Sampling::Default: p = i * x / n; break;
    case Sampling::OffsetCorners: {
      const double delta = std::max(1.0, extent) / n;
      p = 0.5 * delta + i * delta;
      break;
    }
    default: p = (i + 0.5) * x / n - 0.5; break;
  }
  return start + std::clamp(p, 0.0, std::max(extent, 0.0));
}

// Output sample i reads in[lo] * (1 - w) + in[hi] * w along one axis.
struct ResizeTap {
  int64_t lo, hi;
  float w;
};

std::vector<ResizeTap> linear_taps(Sampling mode, int64_t in, int64_t out) {
  std::vector<ResizeTap> taps;
  for (int64_t i = 0; i < out; ++i) {
    const double p = grid_point(mode, 0, static_cast<double>(in - 1), i, out);
    const int64_t lo = std::min(static_cast<int64_t>(std::floor(p)), in - 1);
    taps.push_back({lo, std::min(lo + 1, in - 1), static_cast<float>(p - lo)});
  }
  return taps;
}

// Nearest neighbour: the upsample/resize_nearest_neighbor ops take floor(i * in / out) in
// DEFAULT mode (exact integer arithmetic, the TensorFlow/PyTorch legacy rule); the other modes,
// and every mode of iOS17's resize (`round_default`), round the grid point half up (coremltools'
// resize test: 2 rows resized to 3 read rows 0, 1, 1).
std::vector<ResizeTap> nearest_taps(Sampling mode, int64_t in, int64_t out, bool round_default) {
  std::vector<ResizeTap> taps;
  for (int64_t i = 0; i < out; ++i) {
    int64_t k = mode == Sampling::Default && !round_default ? i * in / out
                                          : static_cast<int64_t>(std::floor(grid_point(mode, 0, static_cast<double>(in - 1), i, out) + 0.5));
    k = std::clamp<int64_t>(k, 0, in - 1);
    taps.push_back({k, k, 0.f});
  }
  return taps;
}

std::vector<float> numeric_to_floats(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::Float16) {
    half_to_float(t.ptr<half>(), out.data(), t.numel());
    return out;
  }
  dispatch_float_int(t.dtype, "resize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(t.ptr<T>()[i]);
  });
  return out;
}

void from_floats(const std::vector<float>& v, Tensor& out) {
  if (out.dtype == DType::Float16) return float_to_half(v.data(), out.ptr<half>(), static_cast<int64_t>(v.size()));
  dispatch_float_int(out.dtype, "resize", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < v.size(); ++i)
      out.ptr<T>()[i] = std::is_integral_v<T> ? static_cast<T>(std::lround(v[i])) : static_cast<T>(v[i]);
  });
}

// One interpolation pass along `axis`; updates `shape`.
std::vector<float> resample_axis(const std::vector<float>& src, Shape& shape, int64_t axis, const std::vector<ResizeTap>& taps) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t dim = shape[axis], n = static_cast<int64_t>(taps.size());
  std::vector<float> dst(static_cast<size_t>(outer * n * inner));
  for (int64_t o = 0; o < outer; ++o) {
    const float* row = &src[o * dim * inner];
    float* d = &dst[o * n * inner];
    if (inner == 1) {  // the last axis: one value per tap
      for (int64_t i = 0; i < n; ++i) d[i] = row[taps[i].lo] + (row[taps[i].hi] - row[taps[i].lo]) * taps[i].w;
      continue;
    }
    for (int64_t i = 0; i < n; ++i, d += inner) {
      const float* lo = row + taps[i].lo * inner;
      const float* hi = row + taps[i].hi * inner;
      const float w = taps[i].w;
      for (int64_t k = 0; k < inner; ++k) d[k] = lo[k] + (hi[k] - lo[k]) * w;
    }
  }
  shape[axis] = n;
  return dst;
}

// Resizes the trailing dims of x to `sizes` (one entry per trailing dim). Nearest neighbour
// is a pure gather (any dtype, no conversion); linear interpolates in float.
void resize_trailing(KernelContext& ctx, const Tensor& x, const Shape& sizes, bool linear, Sampling mode,
                     bool round_default = false) {
  const int64_t rank = x.rank(), k = static_cast<int64_t>(sizes.size());
  if (rank < k) ctx.fail("x of rank ", rank, " cannot resize its last ", k, " dims");
  Shape out_shape = x.shape;
  std::vector<std::vector<ResizeTap>> taps(rank);
  for (int64_t j = 0; j < k; ++j) {
    const int64_t axis = rank - k + j, in = x.shape[axis], out = sizes[j];
    if (out < 0 || (in == 0 && out > 0)) ctx.fail("cannot resize a dim of size ", in, " to ", out);
    out_shape[axis] = out;
    if (in == out && mode != Sampling::OffsetCorners) continue;  // identity in every other mode
    taps[axis] = linear ? linear_taps(mode, in, out) : nearest_taps(mode, in, out, round_default);
  }
  Tensor& result = ctx.allocate_output(0, x.dtype, out_shape);
  if (!linear) {
    std::vector<std::vector<int64_t>> index(rank);
    for (int64_t d = 0; d < rank; ++d)
      for (int64_t i = 0; i < out_shape[d]; ++i) index[d].push_back(taps[d].empty() ? i : taps[d][i].lo);
    gather_axes(x, index, result);
    return;
  }
  Shape shape = x.shape;
  std::vector<float> data = numeric_to_floats(x);
  for (int64_t axis = rank; axis-- > rank - k;)  // innermost first: the cheapest order when upsampling
    if (!taps[axis].empty()) data = resample_axis(data, shape, axis, taps[axis]);
  from_floats(data, result);
}

// floor(size * scale), unless the program declares the output dim (which it computed the
// same way, and which must match anyway).
int64_t scaled(int64_t size, double scale, int64_t declared) {
  return declared >= 0 ? declared : static_cast<int64_t>(std::floor(static_cast<double>(size) * scale));
}

// Declared sizes of the last two output dims (-1 where unknown).
std::pair<int64_t, int64_t> declared_hw(const KernelBuilder& b) {
  const ir::ValueType& t = b.output_type(0);
  const size_t r = t.dims.size();
  if (t.rank < 2 || r < 2) return {-1, -1};
  return {t.dims[r - 2], t.dims[r - 1]};
}

std::unique_ptr<Kernel> upsample_nearest(KernelBuilder& b) {
  const int x = b.input("x");
  const double sh = b.const_float("scale_factor_height", 1.0), sw = b.const_float("scale_factor_width", 1.0);
  b.check(sh > 0 && sw > 0, "scale factors must be positive");
  const auto [dh, dw] = declared_hw(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    if (in.rank() < 3) ctx.fail("x must have rank >= 3");
    const int64_t h = in.shape[in.rank() - 2], w = in.shape[in.rank() - 1];
    resize_trailing(ctx, in, {scaled(h, sh, dh), scaled(w, sw, dw)}, false, Sampling::Default);
  });
}

std::unique_ptr<Kernel> upsample_bilinear(KernelBuilder& b) {
  const int x = b.input("x");
  const double sh = b.const_float("scale_factor_height", 1.0), sw = b.const_float("scale_factor_width", 1.0);
  b.check(sh > 0 && sw > 0, "scale factors must be positive");
  const bool align = b.const_bool("align_corners", true);
  const bool half_pixel = b.const_bool("half_pixel_centers", !align);  // iOS16+
  const Sampling mode = align ? Sampling::StrictAlignCorners : half_pixel ? Sampling::UnalignCorners : Sampling::Default;
  const auto [dh, dw] = declared_hw(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    if (in.rank() < 3) ctx.fail("x must have rank >= 3");
    const int64_t h = in.shape[in.rank() - 2], w = in.shape[in.rank() - 1];
    resize_trailing(ctx, in, {scaled(h, sh, dh), scaled(w, sw, dw)}, true, mode);
  });
}

KernelFactory resize_to_target(bool linear) {
  return [linear](KernelBuilder& b) {
    const int x = b.input("x");
    const int64_t th = b.const_int("target_size_height", linear ? std::optional<int64_t>(1) : std::nullopt);
    const int64_t tw = b.const_int("target_size_width", linear ? std::optional<int64_t>(1) : std::nullopt);
    const Sampling mode = linear ? parse_sampling(b, b.const_string("sampling_mode", "DEFAULT")) : Sampling::Default;
    b.check(th > 0 && tw > 0, "target sizes must be positive");
    return make_kernel([=](KernelContext& ctx) {
      const Tensor& in = ctx.input(x);
      if (in.rank() < 3) ctx.fail("x must have rank >= 3");
      resize_trailing(ctx, in, {th, tw}, linear, mode);
    });
  };
}

// iOS17 resize: the last resized_dims entries of `shape` (0 = keep) size the last dims of x.
std::unique_ptr<Kernel> resize(KernelBuilder& b) {
  const int x = b.input("x"), shape = b.input("shape");
  const int64_t dims = b.const_int("resized_dims");
  const std::string interpolation = b.const_string("interpolation_mode", "LINEAR");
  b.check(interpolation == "LINEAR" || interpolation == "NEAREST_NEIGHBOR", "unknown interpolation_mode '", interpolation, "'");
  const Sampling mode = parse_sampling(b, b.const_string("sampling_mode", "DEFAULT"));
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const std::vector<int64_t> target = read_ints(ctx.input(shape));
    if (dims < 0 || dims > static_cast<int64_t>(target.size()) || static_cast<int64_t>(target.size()) > in.rank())
      ctx.fail("resized_dims ", dims, " and shape ", shape_str(target), " do not fit x of rank ", in.rank());
    Shape sizes(target.end() - dims, target.end());
    for (int64_t j = 0; j < dims; ++j)
      if (sizes[j] == 0) sizes[j] = in.shape[in.rank() - dims + j];
    resize_trailing(ctx, in, sizes, interpolation == "LINEAR", mode, /*round_default=*/true);
  });
}

std::unique_ptr<Kernel> crop(KernelBuilder& b) {
  const int x = b.input("x");
  const std::vector<int64_t> ch = b.const_ints("crop_height"), cw = b.const_ints("crop_width");
  b.check(ch.size() == 2 && cw.size() == 2, "crop_height and crop_width need 2 entries each");
  for (int64_t v : {ch[0], ch[1], cw[0], cw[1]}) b.check(v >= 0, "crop amounts must not be negative");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const int64_t r = in.rank();
    if (r < 3) ctx.fail("x must have rank >= 3");
    Shape shape = in.shape;
    shape[r - 2] -= ch[0] + ch[1];
    shape[r - 1] -= cw[0] + cw[1];
    if (shape[r - 2] < 0 || shape[r - 1] < 0) ctx.fail("crop exceeds the spatial size ", shape_str(in.shape));
    StridedView view = contiguous_view(in.shape);
    view.offset = ch[0] * view.strides[r - 2] + cw[0] * view.strides[r - 1];
    copy_view(in, view, ctx.allocate_output(0, in.dtype, shape));
  });
}

// Sample i of n along a box edge from `from` to `to`. A box given with from > to is read
// backwards: its samples are those of the box from `to` to `from`, in reverse order (Core ML
// flips such crops; coremltools' crop_resize tests expect it).
double box_point(Sampling mode, double from, double to, int64_t i, int64_t n) {
  if (from <= to) return grid_point(mode, from, to - from, i, n);
  return from - grid_point(mode, 0.0, from - to, i, n);
}

// crop_resize: iOS15/16 take roi [N, 1, 4 or 5, 1, 1] and give [N, B or 1, C, h, w];
// iOS17 takes boxes [N, 4] and box_indices [N] and gives [N, C, h, w]. Samples outside the
// image take pad_value (TensorFlow's extrapolation_value).
KernelFactory crop_resize_factory(bool ios17) {
  return [ios17](KernelBuilder& b) {
    const int x = b.input("x");
    const int boxes = b.input(ios17 ? "boxes" : "roi");
    const int indices = ios17 ? b.optional_input("box_indices") : -1;
    const int64_t th = b.const_int("target_height", 1), tw = b.const_int("target_width", 1);
    b.check(th > 0 && tw > 0, "target sizes must be positive");
    const bool normalized = b.const_bool("normalized_coordinates", false);
    const double spatial_scale = b.const_float("spatial_scale", 1.0), pad_value = b.const_float("pad_value", 0.0);
    const std::string box_mode = b.const_string("box_coordinate_mode", "CORNERS_HEIGHT_FIRST");
    b.check(box_mode == "CORNERS_HEIGHT_FIRST" || box_mode == "CORNERS_WIDTH_FIRST" ||
                box_mode == "CENTER_SIZE_HEIGHT_FIRST" || box_mode == "CENTER_SIZE_WIDTH_FIRST",
            "unknown box_coordinate_mode '", box_mode, "'");
    const Sampling mode = parse_sampling(b, b.const_string("sampling_mode", "DEFAULT"));
    return make_kernel([=](KernelContext& ctx) {
      const Tensor& in = ctx.input(x);
      const Tensor& tb = ctx.input(boxes);
      if (in.rank() != 4) ctx.fail("x must have rank 4, got ", shape_str(in.shape));
      const int64_t batch = in.shape[0], c = in.shape[1], h = in.shape[2], w = in.shape[3];
      const int64_t n = tb.rank() ? tb.shape[0] : 0;
      const int64_t per_box = n ? tb.numel() / n : 0;
      const bool with_index = !ios17 && per_box == 5;
      if ((ios17 && (tb.rank() != 2 || per_box != 4)) || (!ios17 && (tb.rank() != 5 || (per_box != 4 && per_box != 5))))
        ctx.fail("boxes have an unexpected shape ", shape_str(tb.shape));
      const int64_t out_b = (!ios17 && !with_index) ? batch : 1;
      const std::vector<int64_t> given = indices >= 0 ? read_ints(ctx.input(indices)) : std::vector<int64_t>();
      Shape shape = ios17 ? Shape{n, c, th, tw} : Shape{n, out_b, c, th, tw};
      Tensor& out = ctx.allocate_output(0, in.dtype, shape);
      const std::vector<float> src = numeric_to_floats(in);
      std::vector<float> dst(static_cast<size_t>(out.numel()));
      float* o = dst.data();
      for (int64_t i = 0; i < n; ++i) {
        double v[4];
        for (int k = 0; k < 4; ++k) v[k] = read_double(tb, i * per_box + (with_index ? 1 : 0) + k);
        double y1, x1, y2, x2;
        if (box_mode == "CORNERS_HEIGHT_FIRST") y1 = v[0], x1 = v[1], y2 = v[2], x2 = v[3];
        else if (box_mode == "CORNERS_WIDTH_FIRST") x1 = v[0], y1 = v[1], x2 = v[2], y2 = v[3];
        else {
          const bool hf = box_mode == "CENTER_SIZE_HEIGHT_FIRST";
          const double cy = hf ? v[0] : v[1], cx = hf ? v[1] : v[0], bh = hf ? v[2] : v[3], bw = hf ? v[3] : v[2];
          y1 = cy - bh / 2, y2 = cy + bh / 2, x1 = cx - bw / 2, x2 = cx + bw / 2;
        }
        const double sy = (normalized ? h - 1 : 1) * spatial_scale, sx = (normalized ? w - 1 : 1) * spatial_scale;
        y1 *= sy, y2 *= sy, x1 *= sx, x2 *= sx;
        for (int64_t ob = 0; ob < out_b; ++ob) {
          int64_t img = ob;
          if (with_index) img = static_cast<int64_t>(read_double(tb, i * per_box));
          if (ios17) img = given.empty() ? i : given[i];
          if (img < 0 || img >= batch) ctx.fail("box ", i, " refers to image ", img, " of a batch of ", batch);
          for (int64_t ch = 0; ch < c; ++ch) {
            const float* plane = &src[(img * c + ch) * h * w];
            for (int64_t r = 0; r < th; ++r) {
              const double py = box_point(mode, y1, y2, r, th);
              for (int64_t q = 0; q < tw; ++q) {
                const double px = box_point(mode, x1, x2, q, tw);
                if (py < 0 || py > h - 1 || px < 0 || px > w - 1) {
                  *o++ = static_cast<float>(pad_value);
                  continue;
                }
                const int64_t y0 = std::min<int64_t>(static_cast<int64_t>(py), h - 1), x0 = std::min<int64_t>(static_cast<int64_t>(px), w - 1);
                const int64_t yb = std::min(y0 + 1, h - 1), xb = std::min(x0 + 1, w - 1);
                const float fy = static_cast<float>(py - y0), fx = static_cast<float>(px - x0);
                const float top = plane[y0 * w + x0] + (plane[y0 * w + xb] - plane[y0 * w + x0]) * fx;
                const float bottom = plane[yb * w + x0] + (plane[yb * w + xb] - plane[yb * w + x0]) * fx;
                *o++ = top + (bottom - top) * fy;
              }
            }
          }
        }
      }
      from_floats(dst, out);
    });
  };
}

}  // namespace

void register_resize_kernels(KernelRegistry& registry) {
  // Nearest neighbour gathers elements of any dtype; linear interpolation converts through
  // float (numeric_to_floats), which resize also needs for its default LINEAR mode.
  registry.add("upsample_nearest_neighbor", kAnyDType, upsample_nearest);
  registry.add("upsample_bilinear", kFloatInt, upsample_bilinear);
  registry.add("resize_nearest_neighbor", kAnyDType, resize_to_target(false));
  registry.add("resize_bilinear", kFloatInt, resize_to_target(true));
  registry.add("resize", kFloatInt, resize, 17);
  registry.add("crop", kAnyDType, crop);
  registry.add("crop_resize", kFloatInt, crop_resize_factory(false), 15, 16);
  registry.add("crop_resize", kFloatInt, crop_resize_factory(true), 17);
}

}  // namespace coremlrt::ops
