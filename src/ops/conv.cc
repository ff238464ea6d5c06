// conv and conv_transpose (docs/design/coreml-format.md, "Convolution") for 1-3 spatial dims, computed in
// float through im2col / col2im and the shared GEMM. Shapes of 1 or 2 spatial dims are handled as
// 3-D with leading unit dims, so one code path serves all ranks. The weight is read in place
// by the GEMM (fp16 or fp32), so a constant weight is never copied at load.
#include <algorithm>
#include <array>

#include "ops/gemm.h"
#include "ops/register.h"
#include "ops/thread_pool.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

using Dims = std::array<int64_t, 3>;

// Constant parameters common to both ops, with spatial lists right-aligned into 3 dims.
struct ConvParams {
  int spatial = 0;  // S, the real number of spatial dims
  Dims strides{1, 1, 1}, dilations{1, 1, 1};
  Dims pad_before{0, 0, 0}, pad_after{0, 0, 0};  // custom pads only
  std::string pad_type;
  int64_t groups = 1;
};

Dims to_dims(const std::vector<int64_t>& v, int64_t fill) {
  Dims d{fill, fill, fill};
  std::copy(v.begin(), v.end(), d.begin() + (3 - v.size()));
  return d;
}

ConvParams read_params(KernelBuilder& b, int spatial, bool transpose) {
  ConvParams p;
  b.check(spatial >= 1 && spatial <= 3, "supports 1 to 3 spatial dims, weight has ", spatial);
  p.spatial = spatial;
  const auto ones = std::vector<int64_t>(spatial, 1);
  const auto strides = b.const_ints("strides", ones), dilations = b.const_ints("dilations", ones);
  b.check(static_cast<int>(strides.size()) == spatial, "strides must have ", spatial, " values");
  b.check(static_cast<int>(dilations.size()) == spatial, "dilations must have ", spatial, " values");
  for (int i = 0; i < spatial; ++i)
    b.check(strides[i] >= 1 && dilations[i] >= 1, "strides and dilations must be >= 1");
  p.strides = to_dims(strides, 1);
  p.dilations = to_dims(dilations, 1);
  p.groups = b.const_int("groups", 1);
  b.check(p.groups >= 1, "groups must be >= 1");
  p.pad_type = b.const_string("pad_type", "valid");
  const bool same_lower = p.pad_type == "same_lower" && !transpose;
  b.check(p.pad_type == "valid" || p.pad_type == "same" || p.pad_type == "custom" || same_lower,
          "unsupported pad_type '", p.pad_type, "'");
  b.check(!same_lower || b.ios_version() >= 16, "pad_type same_lower needs the iOS16 opset or later");
  if (p.pad_type == "custom") {
    const auto pad = b.const_ints("pad", std::vector<int64_t>(2 * spatial, 0));
    b.check(static_cast<int>(pad.size()) == 2 * spatial, "pad must have ", 2 * spatial, " values");
    for (int i = 0; i < spatial; ++i) {
      b.check(pad[2 * i] >= 0 && pad[2 * i + 1] >= 0, "pad values must be >= 0");
      p.pad_before[3 - spatial + i] = pad[2 * i];
      p.pad_after[3 - spatial + i] = pad[2 * i + 1];
    }
  }
  return p;
}

// The spatial part of a [n, C, *D] shape as 3 dims.
Dims spatial_dims(const Shape& shape) {
  return to_dims(std::vector<int64_t>(shape.begin() + 2, shape.end()), 1);
}

// A float operand (weight or bias), constant or read at run time. A constant is captured as
// its tensor, which for fp16 and fp32 is the constant itself (a view of weight.bin), not a
// copy. Only the bias, which is small, is widened to floats at load.
// A weight kept packed (src/ops/packed_weight.h) is read by the GEMM as stored, when
// `packed_ok`.
struct FloatOperand {
  int index = -1;
  Tensor constant;            // defined when known at load
  std::vector<float> floats;  // the constant widened, when `widen` was asked for
  std::shared_ptr<const PackedMatrix> packed;

  static FloatOperand make(KernelBuilder& b, const std::string& param, bool widen, bool packed_ok = false) {
    FloatOperand o;
    if (!b.has(param)) return o;
    if (packed_ok && b.is_constant(param)) {
      const ir::ConstValue* stored = b.stored_constant(param);
      if (stored->packed && PackedMatrix::readable(*stored->packed)) {
        o.packed = std::make_shared<PackedMatrix>(stored->packed);
        return o;
      }
    }
    o.index = b.input(param);
    if (b.is_constant(param)) {
      const Tensor& t = b.constant(param)->tensor;
      b.check(is_float(t.dtype), param, " must be floating point, got ", dtype_name(t.dtype));
      o.constant = matrix_source(t);
      if (widen) o.floats = to_floats(t);
    } else {
      const DType d = b.input_type(param).dtype;
      b.check(d == DType::Float32 || d == DType::Float16, param, " must be fp16 or fp32, got ", dtype_name(d));
    }
    return o;
  }
  bool present() const { return index >= 0 || packed; }
  bool known() const { return constant.defined() || packed; }
  const Shape& shape(const KernelContext& ctx) const { return packed ? packed->tensor().shape : tensor(ctx).shape; }
  const Shape& shape() const { return packed ? packed->tensor().shape : constant.shape; }
  const Tensor& tensor(const KernelContext& ctx) const { return constant.defined() ? constant : ctx.input(index); }
  // The elements as floats: the widened constant, or the value converted per call in scratch.
  const float* floats_in(const KernelContext& ctx, std::vector<float>& scratch) const {
    return known() && !floats.empty() ? floats.data() : read_floats(tensor(ctx), scratch);
  }
};

// Range [lo, hi) of output positions o with 0 <= o * stride + offset < size.
std::pair<int64_t, int64_t> valid_range(int64_t offset, int64_t stride, int64_t size, int64_t count) {
  int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t hi = size - 1 - offset < 0 ? 0 : (size - 1 - offset) / stride + 1;
  lo = std::min(lo, count);
  hi = std::clamp(hi, lo, count);
  return {lo, hi};
}

// Unfolds one group of one image: cols[(c, kd, kh, kw), (od, oh, ow)] = x[c, id, ih, iw] or 0
// in the padding.
// Channels [c0, c1) only, so that threads can share one unfolding.
void im2col(const float* x, int64_t c0, int64_t c1, const Dims& in, const Dims& k, const Dims& out, const ConvParams& p,
            const Dims& pad, float* cols) {
  const int64_t out_plane = out[0] * out[1] * out[2];
  float* dst = cols + c0 * k[0] * k[1] * k[2] * out_plane;
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t kd = 0; kd < k[0]; ++kd)
      for (int64_t kh = 0; kh < k[1]; ++kh)
        for (int64_t kw = 0; kw < k[2]; ++kw, dst += out_plane) {
          const int64_t off_w = kw * p.dilations[2] - pad[2];
          const auto [lo, hi] = valid_range(off_w, p.strides[2], in[2], out[2]);
          float* row = dst;
          for (int64_t od = 0; od < out[0]; ++od) {
            const int64_t id = od * p.strides[0] + kd * p.dilations[0] - pad[0];
            for (int64_t oh = 0; oh < out[1]; ++oh, row += out[2]) {
              const int64_t ih = oh * p.strides[1] + kh * p.dilations[1] - pad[1];
              if (id < 0 || id >= in[0] || ih < 0 || ih >= in[1]) {
                std::fill(row, row + out[2], 0.0f);
                continue;
              }
              const float* src = x + ((c * in[0] + id) * in[1] + ih) * in[2];
              std::fill(row, row + lo, 0.0f);
              for (int64_t ow = lo; ow < hi; ++ow) row[ow] = src[ow * p.strides[2] + off_w];
              std::fill(row + hi, row + out[2], 0.0f);
            }
          }
        }
}

// The inverse scatter for conv_transpose: out[c, od, oh, ow] += cols[(c, kd, kh, kw), (id, ih, iw)]
// with o = i * stride + k * dilation - pad.
void col2im(const float* cols, int64_t channels, const Dims& in, const Dims& k, const Dims& out, const ConvParams& p,
            const Dims& pad, float* y) {
  const int64_t in_plane = in[0] * in[1] * in[2];
  const float* src = cols;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t kd = 0; kd < k[0]; ++kd)
      for (int64_t kh = 0; kh < k[1]; ++kh)
        for (int64_t kw = 0; kw < k[2]; ++kw, src += in_plane) {
          const int64_t off_w = kw * p.dilations[2] - pad[2];
          const auto [lo, hi] = valid_range(off_w, p.strides[2], out[2], in[2]);
          const float* row = src;
          for (int64_t id = 0; id < in[0]; ++id) {
            const int64_t od = id * p.strides[0] + kd * p.dilations[0] - pad[0];
            for (int64_t ih = 0; ih < in[1]; ++ih, row += in[2]) {
              const int64_t oh = ih * p.strides[1] + kh * p.dilations[1] - pad[1];
              if (od < 0 || od >= out[0] || oh < 0 || oh >= out[1]) continue;
              float* dst = y + ((c * out[0] + od) * out[1] + oh) * out[2];
              for (int64_t iw = lo; iw < hi; ++iw) dst[iw * p.strides[2] + off_w] += row[iw];
            }
          }
        }
}

// Depthwise convolution (one input and one output channel per group) computed directly, with
// no unfolding. Each output keeps sixteen running sums in registers, starting from the bias,
// and adds w[c, tap] * x tap by tap in the order of the unfolded rows (kd, kh, kw): the same
// products in the same order as the GEMM of the unfolded form, padding included (it adds
// w * 0 there too, read from a zero-padded copy of the channel). Built for the same targets
// as the GEMM (gemm.cc), so that its multiply-adds are fused exactly where the GEMM's are.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(COREMLRT_GEMM_PORTABLE_ONLY)
#define COREMLRT_CONV_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define COREMLRT_CONV_CLONES
#endif

constexpr int64_t kDepthwiseLanes = 16;

// The zero-padded copy of one channel: input position i along dim d sits at i + pad[d]; the
// extent covers every read, rows rounded up to whole groups of kDepthwiseLanes outputs.
Dims padded_extent(const Dims& in, const Dims& k, const Dims& out, const ConvParams& p, const Dims& pad) {
  Dims size;
  for (int d = 0; d < 3; ++d) {
    const int64_t outputs = d == 2 ? (out[2] + kDepthwiseLanes - 1) / kDepthwiseLanes * kDepthwiseLanes : out[d];
    const int64_t reads = outputs == 0 ? 0 : (outputs - 1) * p.strides[d] + (k[d] - 1) * p.dilations[d] + 1;
    size[d] = std::max(in[d] + pad[d], reads);
  }
  return size;
}

void pad_channel(const float* x, const Dims& in, const Dims& pad, const Dims& size, float* padded) {
  std::fill(padded, padded + size[0] * size[1] * size[2], 0.0f);
  for (int64_t id = 0; id < in[0]; ++id)
    for (int64_t ih = 0; ih < in[1]; ++ih)
      std::copy_n(x + (id * in[1] + ih) * in[2], in[2], padded + ((id + pad[0]) * size[1] + ih + pad[1]) * size[2] + pad[2]);
}

template <int64_t kStride>  // along w; 0: read from p at run time
[[gnu::always_inline]] inline void depthwise_rows(const float* padded, const Dims& size, const float* w, const Dims& k,
                                                  const Dims& out, const ConvParams& p, float* y) {
  const int64_t sw = kStride ? kStride : p.strides[2];
  for (int64_t od = 0; od < out[0]; ++od)
    for (int64_t oh = 0; oh < out[1]; ++oh) {
      float* row = y + (od * out[1] + oh) * out[2];
      for (int64_t ow0 = 0; ow0 < out[2]; ow0 += kDepthwiseLanes) {
        const int64_t n = std::min(kDepthwiseLanes, out[2] - ow0);
        float acc[kDepthwiseLanes] = {};
        std::copy_n(row + ow0, n, acc);
        const float* tap_w = w;
        for (int64_t kd = 0; kd < k[0]; ++kd)
          for (int64_t kh = 0; kh < k[1]; ++kh) {
            const int64_t r = (od * p.strides[0] + kd * p.dilations[0]) * size[1] + oh * p.strides[1] + kh * p.dilations[1];
            const float* src_row = padded + r * size[2] + ow0 * sw;
            for (int64_t kw = 0; kw < k[2]; ++kw) {
              const float wv = *tap_w++;
              const float* src = src_row + kw * p.dilations[2];
              for (int64_t i = 0; i < kDepthwiseLanes; ++i) acc[i] += wv * src[i * sw];
            }
          }
        std::copy_n(acc, n, row + ow0);
      }
    }
}

COREMLRT_CONV_CLONES
void depthwise_channel(const float* padded, const Dims& size, const float* w, const Dims& k, const Dims& out,
                       const ConvParams& p, float* y) {
  if (p.strides[2] == 1) depthwise_rows<1>(padded, size, w, k, out, p, y);
  else if (p.strides[2] == 2) depthwise_rows<2>(padded, size, w, k, out, p, y);
  else depthwise_rows<0>(padded, size, w, k, out, p, y);
}

// Writes bias[c] (or 0) over each channel plane of one image.
void fill_bias(float* y, int64_t channels, int64_t plane, const float* bias) {
  for (int64_t c = 0; c < channels; ++c) std::fill(y + c * plane, y + (c + 1) * plane, bias ? bias[c] : 0.0f);
}

std::unique_ptr<Kernel> make_conv(KernelBuilder& b) {
  const int x = b.input("x");
  const DType dx = b.input_type("x").dtype;
  b.check(dx == DType::Float32 || dx == DType::Float16, "x must be fp16 or fp32, got ", dtype_name(dx));
  b.check(b.output_type(0).dtype == dx, "output dtype must equal x's");
  b.check(b.has("weight"), "missing weight");
  const FloatOperand weight = FloatOperand::make(b, "weight", false, true), bias = FloatOperand::make(b, "bias", true);
  const int64_t w_rank = weight.known() ? static_cast<int64_t>(weight.shape().size()) : b.input_type("weight").rank;
  const ConvParams p = read_params(b, static_cast<int>(w_rank - 2), false);
  if (weight.known()) {
    const int64_t c_out = weight.shape()[0];
    b.check(c_out % p.groups == 0, "C_out ", c_out, " is not divisible by groups ", p.groups);
  }

  return make_kernel([x, weight, bias, p](KernelContext& ctx) {
    const Tensor& tx = ctx.input(x);
    const Shape& ws = weight.shape(ctx);
    if (tx.rank() != p.spatial + 2 || static_cast<int>(ws.size()) != p.spatial + 2)
      ctx.fail("x ", shape_str(tx.shape), " and weight ", shape_str(ws), " must have rank ", p.spatial + 2);
    const int64_t n = tx.shape[0], c_in = tx.shape[1], c_out = ws[0], cg_in = ws[1], groups = p.groups;
    if (cg_in * groups != c_in || c_out % groups != 0)
      ctx.fail("x has ", c_in, " channels; weight ", shape_str(ws), " with groups ", groups, " does not match");
    if (bias.present() && bias.tensor(ctx).numel() != c_out) ctx.fail("bias must have C_out = ", c_out, " values");
    const Dims in = spatial_dims(tx.shape), k = spatial_dims(ws);
    Dims out, pad;
    for (int i = 0; i < 3; ++i) {
      const int64_t k_eff = (k[i] - 1) * p.dilations[i] + 1, s = p.strides[i];
      if (p.pad_type == "same" || p.pad_type == "same_lower") {
        out[i] = (in[i] + s - 1) / s;
        const int64_t total = std::max<int64_t>(0, (out[i] - 1) * s + k_eff - in[i]);
        pad[i] = p.pad_type == "same" ? total / 2 : total - total / 2;  // the odd pixel goes after / before
      } else {
        pad[i] = p.pad_before[i];
        const int64_t span = in[i] + p.pad_before[i] + p.pad_after[i] - k_eff;
        if (span < 0) ctx.fail("kernel (effective size ", k_eff, ") is larger than the padded input ", shape_str(tx.shape));
        out[i] = span / s + 1;
      }
    }
    Shape out_shape = {n, c_out};
    for (int i = 3 - p.spatial; i < 3; ++i) out_shape.push_back(out[i]);
    Tensor& y = ctx.allocate_output(0, tx.dtype, out_shape);

    std::vector<float> xs, bs, ys, cols;
    const float* xp = read_floats(tx, xs);
    const float* bp = bias.present() ? bias.floats_in(ctx, bs) : nullptr;
    float* yp = float_output(y, ys);
    const int64_t in_plane = in[0] * in[1] * in[2], out_plane = out[0] * out[1] * out[2];
    const int64_t kp = k[0] * k[1] * k[2], cg_out = c_out / groups, kdim = cg_in * kp;
    // A 1x1 kernel with unit stride and no padding reads x directly as the [C_in, plane] operand.
    const bool pointwise = kp == 1 && in == out && pad == Dims{0, 0, 0};
    // y_g [cg_out, plane] += W_g [cg_out, kdim] * cols [kdim, plane], W_g read in place.
    auto group_product = [&](const float* x_g, int64_t g, float* y_img, float* group_cols) {
      const MatrixView w_g =
          weight.packed ? MatrixView(*weight.packed).at(g * cg_out, 0) : matrix_view(weight.tensor(ctx), g * cg_out * kdim, kdim);
      gemm(cg_out, out_plane, kdim, w_g, MatrixView(pointwise ? x_g : group_cols, out_plane), y_img + g * cg_out * out_plane,
           out_plane, true);
    };
    // Many small groups (depthwise convolutions) are spread over the pool a group at a time,
    // each range with its own unfolding; otherwise the unfolding and the GEMM of each group
    // are split instead.
    const int64_t group_macs = cg_out * out_plane * kdim;
    const bool depthwise = cg_in == 1 && cg_out == 1 && groups > 1 && !pointwise;
    const bool by_groups = groups >= 2 * available_threads();
    if (!pointwise && !by_groups && !depthwise) cols.resize(static_cast<size_t>(kdim * out_plane));
    for (int64_t img = 0; img < n; ++img) {
      float* y_img = yp + img * c_out * out_plane;
      fill_bias(y_img, c_out, out_plane, bp);
      const float* x_img = xp + img * c_in * in_plane;
      if (depthwise) {
        // The weights as floats, tap by tap per channel (fp16 ones widened, 9 or so per channel).
        std::vector<float> ws;
        const float* w = nullptr;
        if (weight.packed) {
          ws.resize(static_cast<size_t>(c_out * kp));
          weight.packed->decode(0, c_out, 0, kp, ws.data(), kp);
          w = ws.data();
        } else {
          w = read_floats(weight.tensor(ctx), ws);
        }
        const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(group_macs, 1));
        const Dims size = padded_extent(in, k, out, p, pad);
        parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
          std::vector<float> padded(static_cast<size_t>(size[0] * size[1] * size[2]));
          for (int64_t g = g0; g < g1; ++g) {
            pad_channel(x_img + g * in_plane, in, pad, size, padded.data());
            depthwise_channel(padded.data(), size, w + g * kp, k, out, p, y_img + g * out_plane);
          }
        });
        continue;
      }
      if (by_groups) {
        const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 17) / std::max<int64_t>(group_macs, 1));
        parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
          std::vector<float> group_cols(pointwise ? 0 : static_cast<size_t>(kdim * out_plane));
          for (int64_t g = g0; g < g1; ++g) {
            const float* x_g = x_img + g * cg_in * in_plane;
            if (!pointwise) im2col(x_g, 0, cg_in, in, k, out, p, pad, group_cols.data());
            group_product(x_g, g, y_img, group_cols.data());
          }
        });
        continue;
      }
      for (int64_t g = 0; g < groups; ++g) {
        const float* x_g = x_img + g * cg_in * in_plane;
        if (!pointwise) {
          const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(kp * out_plane, 1));
          parallel_for(cg_in, grain,
                       [&](int64_t c0, int64_t c1) { im2col(x_g, c0, c1, in, k, out, p, pad, cols.data()); });
        }
        group_product(x_g, g, y_img, cols.data());
      }
    }
    commit_float_output(y, yp);
  });
}

std::unique_ptr<Kernel> make_conv_transpose(KernelBuilder& b) {
  const int x = b.input("x");
  const DType dx = b.input_type("x").dtype;
  b.check(dx == DType::Float32 || dx == DType::Float16, "x must be fp16 or fp32, got ", dtype_name(dx));
  b.check(b.output_type(0).dtype == dx, "output dtype must equal x's");
  b.check(b.has("weight"), "missing weight");
  const FloatOperand weight = FloatOperand::make(b, "weight", false), bias = FloatOperand::make(b, "bias", true);
  const int64_t w_rank = weight.known() ? weight.constant.rank() : b.input_type("weight").rank;
  const ConvParams p = read_params(b, static_cast<int>(w_rank - 2), true);
  // output_shape is [n, C_out, *D_out]; a list of only the spatial sizes is accepted too.
  std::vector<int64_t> output_shape = b.const_ints("output_shape", std::vector<int64_t>{});
  if (!output_shape.empty()) {
    b.check(static_cast<int>(output_shape.size()) == p.spatial + 2 || static_cast<int>(output_shape.size()) == p.spatial,
            "output_shape must have ", p.spatial + 2, " values");
    output_shape.erase(output_shape.begin(), output_shape.end() - p.spatial);
  }
  const bool has_out_shape = !output_shape.empty();
  const Dims fixed_out = has_out_shape ? to_dims(output_shape, 1) : Dims{};

  return make_kernel([=](KernelContext& ctx) {
    const Tensor& tx = ctx.input(x);
    const Tensor& tw = weight.tensor(ctx);
    const Shape& ws = tw.shape;
    if (tx.rank() != p.spatial + 2 || static_cast<int>(ws.size()) != p.spatial + 2)
      ctx.fail("x ", shape_str(tx.shape), " and weight ", shape_str(ws), " must have rank ", p.spatial + 2);
    const int64_t n = tx.shape[0], c_in = tx.shape[1], groups = p.groups, cg_out = ws[1], c_out = cg_out * groups;
    if (ws[0] != c_in || c_in % groups != 0)
      ctx.fail("x has ", c_in, " channels; weight ", shape_str(ws), " with groups ", groups, " does not match");
    if (bias.present() && bias.tensor(ctx).numel() != c_out) ctx.fail("bias must have C_out = ", c_out, " values");
    const Dims in = spatial_dims(tx.shape), k = spatial_dims(ws);
    Dims out, pad;
    for (int i = 0; i < 3; ++i) {
      const int64_t k_eff = (k[i] - 1) * p.dilations[i] + 1, s = p.strides[i];
      const int64_t full = (in[i] - 1) * s + k_eff;  // extent before any cropping
      if (p.pad_type == "same") {
        out[i] = has_out_shape ? fixed_out[i] : in[i] * s;
        pad[i] = std::max<int64_t>(0, full - out[i]) / 2;
      } else {
        pad[i] = p.pad_before[i];
        out[i] = has_out_shape ? fixed_out[i] : full - p.pad_before[i] - p.pad_after[i];
      }
      if (out[i] < 0) ctx.fail("negative output size for x ", shape_str(tx.shape));
    }
    Shape out_shape = {n, c_out};
    for (int i = 3 - p.spatial; i < 3; ++i) out_shape.push_back(out[i]);
    Tensor& y = ctx.allocate_output(0, tx.dtype, out_shape);

    std::vector<float> xs, bs, ys, cols;
    const float* xp = read_floats(tx, xs);
    const float* bp = bias.present() ? bias.floats_in(ctx, bs) : nullptr;
    float* yp = float_output(y, ys);
    const int64_t in_plane = in[0] * in[1] * in[2], out_plane = out[0] * out[1] * out[2];
    const int64_t kp = k[0] * k[1] * k[2], cg_in = c_in / groups, rows = cg_out * kp;
    cols.resize(static_cast<size_t>(rows * in_plane));
    for (int64_t img = 0; img < n; ++img) {
      float* y_img = yp + img * c_out * out_plane;
      fill_bias(y_img, c_out, out_plane, bp);
      for (int64_t g = 0; g < groups; ++g) {
        // weight rows for this group form [cg_in, cg_out * kp]; read transposed as the A operand.
        gemm(rows, in_plane, cg_in, matrix_view(tw, g * cg_in * rows, 1, rows),
             MatrixView(xp + (img * c_in + g * cg_in) * in_plane, in_plane), cols.data(), in_plane, false);
        col2im(cols.data(), cg_out, in, k, out, p, pad, y_img + g * cg_out * out_plane);
      }
    }
    commit_float_output(y, yp);
  });
}

// A convolution's output element is a dot product over the weight's [C_in / groups, *kernel];
// a transposed convolution spreads each input element over the weight's [C_out / groups, *kernel].
OpCost conv_cost() {
  OpCost cost;
  cost.macs = [](const CostReader& op) -> double {
    const ir::ValueType* w = op.type("weight");
    if (!w || w->rank < 3 || op.op().outputs.empty()) return 0;
    return cost_numel(op.op().outputs[0].type) * cost_numel(*w) / cost_extent(w->dims[0]);
  };
  cost.weights = {"weight"};
  return cost;
}

OpCost conv_transpose_cost() {
  OpCost cost;
  cost.macs = [](const CostReader& op) -> double {
    const ir::ValueType* w = op.type("weight");
    const ir::ValueType* x = op.type("x");
    if (!w || !x || w->rank < 3) return 0;
    return cost_numel(*x) * cost_numel(*w) / cost_extent(w->dims[0]);
  };
  cost.weights = {"weight"};
  return cost;
}

}  // namespace

void register_conv_kernels(KernelRegistry& registry) {
  registry.add("conv", kFloat, make_conv).cost = conv_cost();
  registry.add("conv_transpose", kFloat, make_conv_transpose).cost = conv_transpose_cost();
}

}  // namespace coremlrt::ops
