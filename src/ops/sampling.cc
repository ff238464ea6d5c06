// Spatial sampling (docs/design/coreml-format.md, "Resizing and sampling"): resample (PyTorch
// grid_sample-like) and affine (an affine grid fed to the same sampler).
//
// The sampler treats the image as if it were padded infinitely (the op definition's model:
// "the input image is assumed to be padded with ..."): every interpolation tap is mapped to
// an in-image pixel (border, reflection, symmetric) or to padding_value (constant). For
// bilinear sampling this equals PyTorch's way of clipping/reflecting the coordinate first,
// because reflections about pixel centres (reflection) or pixel edges (symmetric) map the
// integer grid onto itself, so the interpolant of the reflected samples is the reflected
// interpolant. Taps and weights depend only on the coordinates, so they are computed once per
// output position and shared by all channels. Arithmetic is in float; fp16 is rounded once.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

enum class Padding { Constant, Border, Reflection, Symmetric };
enum class Coordinates { Unnormalized, MinusOneToOne, ZeroToOne };

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The sampling parameters shared by resample and affine, read and checked at load.
struct Sampler {
  bool nearest = false;
  Padding padding = Padding::Constant;
  Coordinates coordinates = Coordinates::MinusOneToOne;
  bool align_corners = false;
  float padding_value = 0;

  // Coordinate value v along an axis of n pixels -> position in pixels (0 = first pixel centre).
  double to_pixel(double v, int64_t n) const {
    switch (coordinates) {
      case Coordinates::Unnormalized: return v;
      case Coordinates::ZeroToOne: v = 2 * v - 1; break;  // then as [-1, 1]
      default: break;
    }
    // align_corners: -1 and 1 are the centres of the first and last pixels; otherwise their
    // outer edges.
    return align_corners ? (v + 1) / 2 * static_cast<double>(n - 1) : ((v + 1) * static_cast<double>(n) - 1) / 2;
  }

  // The pixel nearest to position p along an axis of n pixels (before padding). The
  // reflecting modes mirror the position first and round afterwards, so that a tie rounds as
  // it would in the mirrored image (as Core ML and PyTorch's grid_sample do); rounding first
  // would pick the pixel on the other side of the mirror.
  int64_t nearest_index(double p, int64_t n) const {
    if (padding == Padding::Symmetric) p = mirror(p + 0.5, static_cast<double>(n)) - 0.5;  // about the edges
    else if (padding == Padding::Reflection && n > 1) p = mirror(p, static_cast<double>(n - 1));  // about the centres
    return static_cast<int64_t>(std::nearbyint(p));  // half to even, as grid_sample's nearbyint
  }

  // q reflected into [0, len] by mirrors at 0 and len.
  static double mirror(double q, double len) {
    const double period = 2 * len;
    double m = std::fmod(q, period);
    if (m < 0) m += period;
    return m > len ? period - m : m;
  }

  // Pixel i of the padded axis of n pixels -> in-image pixel, or -1 for padding_value.
  int64_t map_index(int64_t i, int64_t n) const {
    if (i >= 0 && i < n) return i;
    switch (padding) {
      case Padding::Constant: return -1;
      case Padding::Border: return i < 0 ? 0 : n - 1;
      case Padding::Reflection: {  // |1 2 3| -> 3 2 | 1 2 3 | 2 1: the edge is not repeated
        if (n == 1) return 0;
        const int64_t period = 2 * (n - 1);
        int64_t m = i % period;
        if (m < 0) m += period;
        return m < n ? m : period - m;
      }
      case Padding::Symmetric: {  // |1 2 3| -> 2 1 | 1 2 3 | 3 2: the edge is repeated
        const int64_t period = 2 * n;
        int64_t m = i % period;
        if (m < 0) m += period;
        return m < n ? m : period - 1 - m;
      }
    }
    return -1;
  }
};

// coremltools only produces bilinear / constant 0 / [-1, 1] / align_corners for affine
// (PyTorch's affine_grid + grid_sample); the general sampler serves its other choices too.
Sampler read_sampler(const KernelBuilder& b) {
  Sampler s;
  // Every parameter is required by the op definition; padding_value has an obvious default
  // (it is ignored except in constant mode), so a producer that omits it is still accepted.
  const std::string sampling = lower(b.const_string("sampling_mode"));
  b.check(sampling == "bilinear" || sampling == "nearest", "unknown sampling_mode '", sampling, "'");
  s.nearest = sampling == "nearest";
  const std::string padding = lower(b.const_string("padding_mode"));
  if (padding == "constant") s.padding = Padding::Constant;
  else if (padding == "border") s.padding = Padding::Border;
  else if (padding == "reflection") s.padding = Padding::Reflection;
  else if (padding == "symmetric") s.padding = Padding::Symmetric;
  else b.fail("unknown padding_mode '", padding, "'");
  s.padding_value = static_cast<float>(b.const_float("padding_value", 0.0));
  const std::string coords = lower(b.const_string("coordinates_mode"));
  if (coords == "unnormalized") s.coordinates = Coordinates::Unnormalized;
  else if (coords == "normalized_minus_one_to_one") s.coordinates = Coordinates::MinusOneToOne;
  else if (coords == "normalized_zero_to_one") s.coordinates = Coordinates::ZeroToOne;
  else b.fail("unknown coordinates_mode '", coords, "'");
  s.align_corners = b.const_bool("align_corners");
  return s;
}

void check_image(const KernelBuilder& b) {
  const ir::ValueType& x = b.input_type("x");
  b.check(x.dtype == DType::Float32 || x.dtype == DType::Float16, "x must be fp16 or fp32, got ", dtype_name(x.dtype));
  b.check(x.rank == 4 || x.rank < 0, "x must have rank 4 [B, C, H, W], got ", x.str());
  b.check(b.output_type(0).dtype == x.dtype, "output dtype must equal x's");
}

std::vector<float> widen_to_floats(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::Float16) {
    half_to_float(t.ptr<half>(), out.data(), t.numel());
    return out;
  }
  dispatch_all(t.dtype, "sampling", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.ptr<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(static_cast<compute_t<T>>(p[i]));
  });
  return out;
}

void narrow(const std::vector<float>& v, Tensor& out) {
  if (out.dtype == DType::Float16) float_to_half(v.data(), out.ptr<half>(), static_cast<int64_t>(v.size()));
  else std::copy(v.begin(), v.end(), out.ptr<float>());
}

// One interpolation tap: pixel offset in the plane (-1 = padding_value) and its weight.
struct SampleTap {
  int64_t offset;
  float weight;
};

// A pixel position as an integer-safe double: NaN and huge values (which floor() cannot turn
// into an int64) are moved far outside the image, where constant padding gives padding_value
// and the other modes still land on some pixel.
double safe_position(double p) {
  constexpr double kFar = 1 << 30;
  if (std::isnan(p)) return -kFar;
  return std::clamp(p, -kFar, kFar);
}

// Appends the taps of the sample at pixel position (px, py) of an h x w image; always 4
// taps (nearest: one with weight 1 and three with weight 0), so positions index uniformly.
void add_taps(const Sampler& s, double px, double py, int64_t h, int64_t w, SampleTap* taps) {
  for (int k = 1; k < 4; ++k) taps[k] = {0, 0.f};
  if (h <= 0 || w <= 0) {  // an empty image has nothing but padding
    taps[0] = {-1, 1.f};
    return;
  }
  px = safe_position(px);
  py = safe_position(py);
  if (s.nearest) {
    const int64_t ix = s.map_index(s.nearest_index(px, w), w);
    const int64_t iy = s.map_index(s.nearest_index(py, h), h);
    taps[0] = {ix < 0 || iy < 0 ? -1 : iy * w + ix, 1.f};
    return;
  }
  const double fx0 = std::floor(px), fy0 = std::floor(py);
  const float fx = static_cast<float>(px - fx0), fy = static_cast<float>(py - fy0);
  const int64_t x0 = static_cast<int64_t>(fx0), y0 = static_cast<int64_t>(fy0);
  const int64_t xs[2] = {s.map_index(x0, w), s.map_index(x0 + 1, w)};
  const int64_t ys[2] = {s.map_index(y0, h), s.map_index(y0 + 1, h)};
  const float wx[2] = {1 - fx, fx}, wy[2] = {1 - fy, fy};
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 2; ++i) taps[j * 2 + i] = {xs[i] < 0 || ys[j] < 0 ? -1 : ys[j] * w + xs[i], wy[j] * wx[i]};
}

// out[b, c, k] = sum of the taps of position k of batch b over plane (b, c) of x.
// `taps` holds 4 taps per output position for each batch entry.
void apply_taps(const Sampler& s, const Tensor& x, const std::vector<SampleTap>& taps, int64_t positions, Tensor& out) {
  const int64_t batch = x.shape[0], channels = x.shape[1], plane = x.shape[2] * x.shape[3];
  const std::vector<float> src = widen_to_floats(x);
  std::vector<float> dst(static_cast<size_t>(out.numel()));
  for (int64_t b = 0; b < batch; ++b) {
    const SampleTap* t = &taps[static_cast<size_t>(b * positions * 4)];
    for (int64_t c = 0; c < channels; ++c) {
      const float* in = &src[static_cast<size_t>((b * channels + c) * plane)];
      float* o = &dst[static_cast<size_t>((b * channels + c) * positions)];
      for (int64_t k = 0; k < positions; ++k) {
        float v = 0;
        for (int j = 0; j < 4; ++j) {
          const SampleTap& tap = t[k * 4 + j];
          if (tap.weight == 0.f) continue;  // also skips the unused taps of nearest sampling
          v += tap.weight * (tap.offset < 0 ? s.padding_value : in[tap.offset]);
        }
        o[k] = v;
      }
    }
  }
  narrow(dst, out);
}

std::unique_ptr<Kernel> make_resample(KernelBuilder& b) {
  check_image(b);
  const int x = b.input("x"), coordinates = b.input("coordinates");
  const DType dc = b.input_type("coordinates").dtype;
  b.check(dc == DType::Float32 || dc == DType::Float16 || dc == DType::Int32 || dc == DType::Int16 ||
              dc == DType::UInt16 || dc == DType::Int8 || dc == DType::UInt8,
          "coordinates have unsupported dtype ", dtype_name(dc));
  const Sampler s = read_sampler(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& tx = ctx.input(x);
    const Tensor& tc = ctx.input(coordinates);
    if (tx.rank() != 4) ctx.fail("x must have rank 4 [B, C, H, W], got ", shape_str(tx.shape));
    if (tc.rank() != 4 || tc.shape[3] != 2 || tc.shape[0] != tx.shape[0])
      ctx.fail("coordinates must be [B, H2, W2, 2] with B = ", tx.shape[0], ", got ", shape_str(tc.shape));
    const int64_t batch = tx.shape[0], h = tx.shape[2], w = tx.shape[3];
    const int64_t h2 = tc.shape[1], w2 = tc.shape[2], positions = h2 * w2;
    const std::vector<float> grid = widen_to_floats(tc);
    std::vector<SampleTap> taps(static_cast<size_t>(batch * positions * 4));
    for (int64_t k = 0; k < batch * positions; ++k)  // coordinates are (x, y), i.e. (w, h)
      add_taps(s, s.to_pixel(grid[2 * k], w), s.to_pixel(grid[2 * k + 1], h), h, w, &taps[static_cast<size_t>(k * 4)]);
    apply_taps(s, tx, taps, positions, ctx.allocate_output(0, tx.dtype, {batch, tx.shape[1], h2, w2}));
  });
}

// Coordinate of output pixel i of n in the coordinate space (PyTorch's affine_grid base grid
// for the normalized modes: pixel centres of the output, spanning [-1, 1] corner to corner with
// align_corners, edge to edge without).
double base_coordinate(const Sampler& s, int64_t i, int64_t n) {
  if (s.coordinates == Coordinates::Unnormalized) return static_cast<double>(i);
  double v;
  if (s.align_corners) v = n == 1 ? 0.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1);
  else v = (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(n) - 1.0;
  return s.coordinates == Coordinates::ZeroToOne ? (v + 1) / 2 : v;
}

std::unique_ptr<Kernel> make_affine(KernelBuilder& b) {
  check_image(b);
  const int x = b.input("x"), matrix = b.input("transform_matrix");
  const DType dm = b.input_type("transform_matrix").dtype;
  b.check(dm == DType::Float32 || dm == DType::Float16, "transform_matrix must be fp16 or fp32, got ", dtype_name(dm));
  const int64_t oh = b.const_int("output_height"), ow = b.const_int("output_width");
  b.check(oh > 0 && ow > 0, "output_height and output_width must be positive, got ", oh, " and ", ow);
  const Sampler s = read_sampler(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& tx = ctx.input(x);
    const Tensor& tm = ctx.input(matrix);
    if (tx.rank() != 4) ctx.fail("x must have rank 4 [B, C, H, W], got ", shape_str(tx.shape));
    const int64_t batch = tx.shape[0], h = tx.shape[2], w = tx.shape[3];
    if (tm.rank() != 2 || tm.shape[1] != 6 || (tm.shape[0] != batch && tm.shape[0] != 1))
      ctx.fail("transform_matrix must be [B or 1, 6] with B = ", batch, ", got ", shape_str(tm.shape));
    const std::vector<float> m = widen_to_floats(tm);
    const int64_t positions = oh * ow;
    std::vector<SampleTap> taps(static_cast<size_t>(batch * positions * 4));
    for (int64_t n = 0; n < batch; ++n) {
      const float* a = &m[static_cast<size_t>(tm.shape[0] == 1 ? 0 : n * 6)];
      for (int64_t i = 0; i < oh; ++i) {
        const double y = base_coordinate(s, i, oh);
        for (int64_t j = 0; j < ow; ++j) {
          const double xc = base_coordinate(s, j, ow);
          // x' = a0 x + a1 y + a2, y' = b0 x + b1 y + b2 (the row [a0 a1 a2 b0 b1 b2]).
          const double xs = a[0] * xc + a[1] * y + a[2], ys = a[3] * xc + a[4] * y + a[5];
          add_taps(s, s.to_pixel(xs, w), s.to_pixel(ys, h), h, w, &taps[static_cast<size_t>(((n * oh + i) * ow + j) * 4)]);
        }
      }
    }
    apply_taps(s, tx, taps, positions, ctx.allocate_output(0, tx.dtype, {batch, tx.shape[1], oh, ow}));
  });
}

}  // namespace

void register_sampling_kernels(KernelRegistry& registry) {
  registry.add("resample", kFloat, make_resample);
  registry.add("affine", kFloat, make_affine);
}

}  // namespace coremlrt::ops
