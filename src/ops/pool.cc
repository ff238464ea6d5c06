// avg_pool, max_pool and l2_pool (docs/design/coreml-format.md, "Pooling") over 1-3 spatial dims, computed in
// float. Shapes are handled as 3-D with leading unit dims.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

using Dims = std::array<int64_t, 3>;
enum class PoolKind { Avg, Max, L2 };

struct PoolParams {
  int spatial = 0;
  Dims kernel{1, 1, 1}, strides{1, 1, 1}, pad_before{0, 0, 0}, pad_after{0, 0, 0};
  std::string pad_type;
  bool ceil_mode = false;
  bool exclude_padding = false;
};

Dims to_dims(const std::vector<int64_t>& v) {
  Dims d{1, 1, 1};
  std::copy(v.begin(), v.end(), d.begin() + (3 - v.size()));
  return d;
}

template <PoolKind kPool>
std::unique_ptr<Kernel> make_pool(KernelBuilder& b) {
  const int x = b.input("x");
  const DType dx = b.input_type("x").dtype;
  b.check(dx == DType::Float32 || dx == DType::Float16, "x must be fp16 or fp32, got ", dtype_name(dx));
  b.check(b.output_type(0).dtype == dx, "output dtype must equal x's");
  PoolParams p;
  const auto kernel = b.const_ints("kernel_sizes");
  p.spatial = static_cast<int>(kernel.size());
  b.check(p.spatial >= 1 && p.spatial <= (kPool == PoolKind::L2 ? 2 : 3), "unsupported number of spatial dims ", p.spatial);
  const auto strides = b.const_ints("strides", std::vector<int64_t>(p.spatial, 1));
  b.check(strides.size() == kernel.size(), "strides must have ", p.spatial, " values");
  for (int i = 0; i < p.spatial; ++i) b.check(kernel[i] >= 1 && strides[i] >= 1, "kernel sizes and strides must be >= 1");
  p.kernel = to_dims(kernel);
  p.strides = to_dims(strides);
  p.pad_type = b.const_string("pad_type");
  b.check(p.pad_type == "valid" || p.pad_type == "same" || p.pad_type == "custom" || p.pad_type == "same_lower",
          "unsupported pad_type '", p.pad_type, "'");
  b.check(p.pad_type != "same_lower" || b.ios_version() >= 16, "pad_type same_lower needs the iOS16 opset or later");
  if (p.pad_type == "custom") {
    const auto pad = b.const_ints("pad", std::vector<int64_t>(2 * p.spatial, 0));
    b.check(static_cast<int>(pad.size()) == 2 * p.spatial, "pad must have ", 2 * p.spatial, " values");
    for (int i = 0; i < p.spatial; ++i) {
      b.check(pad[2 * i] >= 0 && pad[2 * i + 1] >= 0, "pad values must be >= 0");
      p.pad_before[3 - p.spatial + i] = pad[2 * i];
      p.pad_after[3 - p.spatial + i] = pad[2 * i + 1];
    }
  }
  p.ceil_mode = b.const_bool("ceil_mode", false);
  b.check(!p.ceil_mode || p.pad_type == "valid" || p.pad_type == "custom", "ceil_mode needs pad_type valid or custom");
  if constexpr (kPool == PoolKind::Avg) p.exclude_padding = b.const_bool("exclude_padding_from_average", false);

  return make_kernel([x, p](KernelContext& ctx) {
    const Tensor& tx = ctx.input(x);
    if (tx.rank() != p.spatial + 2) ctx.fail("x ", shape_str(tx.shape), " must have rank ", p.spatial + 2);
    const Dims in = to_dims(std::vector<int64_t>(tx.shape.begin() + 2, tx.shape.end()));
    Dims out, pb, pa;
    for (int i = 0; i < 3; ++i) {
      const int64_t k = p.kernel[i], s = p.strides[i];
      if (p.pad_type == "same" || p.pad_type == "same_lower") {
        out[i] = (in[i] + s - 1) / s;
        const int64_t total = std::max<int64_t>(0, (out[i] - 1) * s + k - in[i]);
        pb[i] = p.pad_type == "same" ? total / 2 : total - total / 2;  // the odd pixel goes after / before
        pa[i] = total - pb[i];
        continue;
      }
      pb[i] = p.pad_before[i];
      pa[i] = p.pad_after[i];
      const int64_t span = in[i] + pb[i] + pa[i] - k;
      if (span < 0) ctx.fail("kernel is larger than the padded input ", shape_str(tx.shape));
      out[i] = (p.ceil_mode ? (span + s - 1) / s : span / s) + 1;
      // The last window must start inside the input or the leading padding.
      if (p.ceil_mode && (pb[i] > 0 || pa[i] > 0) && (out[i] - 1) * s >= in[i] + pb[i]) --out[i];
    }
    Shape out_shape = {tx.shape[0], tx.shape[1]};
    for (int i = 3 - p.spatial; i < 3; ++i) out_shape.push_back(out[i]);
    Tensor& y = ctx.allocate_output(0, tx.dtype, out_shape);
    std::vector<float> xs, ys;
    const float* xp = read_floats(tx, xs);
    float* yp = float_output(y, ys);
    const int64_t planes = tx.shape[0] * tx.shape[1], in_plane = in[0] * in[1] * in[2];

    // Window of output o along dim i: [start, start + k) clipped to the input (lo, hi) and,
    // for the averaging divisor that counts padding, to the padded extent.
    struct Range { int64_t lo, hi, padded; };
    auto window = [&](int i, int64_t o) {
      const int64_t start = o * p.strides[i] - pb[i], end = start + p.kernel[i];
      return Range{std::max<int64_t>(start, 0), std::min(end, in[i]), std::min(end, in[i] + pa[i]) - start};
    };
    const int64_t out_plane = out[0] * out[1] * out[2];
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(in_plane, 1));
    parallel_for(planes, grain, [&](int64_t plane_begin, int64_t plane_end) {
      float* dst = yp + plane_begin * out_plane;
      for (int64_t plane = plane_begin; plane < plane_end; ++plane) {
        const float* src = xp + plane * in_plane;
        for (int64_t od = 0; od < out[0]; ++od) {
          const Range rd = window(0, od);
          for (int64_t oh = 0; oh < out[1]; ++oh) {
            const Range rh = window(1, oh);
            for (int64_t ow = 0; ow < out[2]; ++ow) {
              const Range rw = window(2, ow);
              float acc = kPool == PoolKind::Max ? -std::numeric_limits<float>::infinity() : 0.0f;
              for (int64_t d = rd.lo; d < rd.hi; ++d)
                for (int64_t h = rh.lo; h < rh.hi; ++h) {
                  const float* row = src + (d * in[1] + h) * in[2];
                  for (int64_t w = rw.lo; w < rw.hi; ++w) {
                    if constexpr (kPool == PoolKind::Max) acc = (row[w] > acc || std::isnan(row[w])) ? row[w] : acc;  // NaN wins
                    else if constexpr (kPool == PoolKind::Avg) acc += row[w];
                    else acc += row[w] * row[w];
                  }
                }
              if constexpr (kPool == PoolKind::Avg) {
                const int64_t count = p.exclude_padding
                                          ? (rd.hi - rd.lo) * (rh.hi - rh.lo) * (rw.hi - rw.lo)
                                          : rd.padded * rh.padded * rw.padded;
                acc = count > 0 ? acc / static_cast<float>(count) : 0.0f;
              } else if constexpr (kPool == PoolKind::L2) {
                acc = std::sqrt(acc);
              }
              *dst++ = acc;
            }
          }
        }
      }
    });
    commit_float_output(y, yp);
  });
}

}  // namespace

void register_pool_kernels(KernelRegistry& registry) {
  registry.add("avg_pool", kFloat, make_pool<PoolKind::Avg>);
  registry.add("max_pool", kFloat, make_pool<PoolKind::Max>);
  registry.add("l2_pool", kFloat, make_pool<PoolKind::L2>);
}

}  // namespace coremlrt::ops
