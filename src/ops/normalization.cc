// batch_norm, instance_norm, layer_norm, l2_norm and local_response_norm (docs/design/coreml-format.md,
// "Normalization"). Statistics are computed in float (two passes: mean, then the biased variance of the
// deviations); parameters, whose dtype may differ from x from iOS17 on, are widened at load.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

void check_float_io(KernelBuilder& b) {
  const DType dx = b.input_type("x").dtype;
  b.check(dx == DType::Float32 || dx == DType::Float16, "x must be fp16 or fp32, got ", dtype_name(dx));
  b.check(b.output_type(0).dtype == dx, "output dtype must equal x's");
}

// A constant parameter as floats; empty when an optional one is absent.
std::vector<float> param_floats(KernelBuilder& b, const std::string& name, bool required = false) {
  const ir::ConstValue* v = b.constant(name);
  if (!v) {
    b.check(!required, "missing required parameter '", name, "'");
    return {};
  }
  b.check(is_float(v->tensor.dtype), "parameter '", name, "' must be floating point, got ", dtype_name(v->tensor.dtype));
  return to_floats(v->tensor);
}

// Runs fn(x, y) with x and y as float arrays, converting fp16 on the way in and out.
template <class Fn>
void with_floats(KernelContext& ctx, int x, Fn&& fn) {
  const Tensor& tx = ctx.input(x);
  Tensor& y = ctx.allocate_output(0, tx.dtype, tx.shape);
  std::vector<float> xs, ys;
  const float* xp = read_floats(tx, xs);
  float* yp = float_output(y, ys);
  fn(tx.shape, xp, yp);
  commit_float_output(y, yp);
}

// Per-channel affine normalization of a [n, C, *] tensor: y = (x - mean[c]) * scale[c] + beta[c].
void channel_affine(const Shape& shape, const float* x, float* y, const float* mean, const float* scale,
                    const float* beta) {
  const int64_t n = shape[0], channels = shape[1], plane = shape_numel(shape) / std::max<int64_t>(n * channels, 1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t base = (i * channels + c) * plane;
      const float m = mean[c], s = scale[c], bb = beta[c];
      for (int64_t j = 0; j < plane; ++j) y[base + j] = (x[base + j] - m) * s + bb;
    }
}

// Mean and 1/sqrt(biased variance + eps) of n values read at x[offsets[j]] (offsets may be null: contiguous).
std::pair<float, float> moments(const float* x, const int64_t* offsets, int64_t n, float eps) {
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += x[offsets ? offsets[j] : j];
  const float mean = sum / static_cast<float>(n);
  float sq = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float d = x[offsets ? offsets[j] : j] - mean;
    sq += d * d;
  }
  return {mean, 1.0f / std::sqrt(sq / static_cast<float>(n) + eps)};
}

std::unique_ptr<Kernel> make_batch_norm(KernelBuilder& b) {
  check_float_io(b);
  const int x = b.input("x");
  const std::vector<float> mean = param_floats(b, "mean", true), var = param_floats(b, "variance", true);
  std::vector<float> gamma = param_floats(b, "gamma"), beta = param_floats(b, "beta");
  const float eps = static_cast<float>(b.const_float("epsilon", 1e-5));
  const size_t channels = mean.size();
  if (gamma.empty()) gamma.assign(channels, 1.0f);
  if (beta.empty()) beta.assign(channels, 0.0f);
  b.check(var.size() == channels && gamma.size() == channels && beta.size() == channels,
          "mean, variance, gamma and beta must all have C values");
  std::vector<float> scale(channels);
  for (size_t c = 0; c < channels; ++c) scale[c] = gamma[c] / std::sqrt(var[c] + eps);
  return make_kernel([x, mean, scale = std::move(scale), beta = std::move(beta)](KernelContext& ctx) {
    const Tensor& tx = ctx.input(x);
    if (tx.rank() < 2 || tx.shape[1] != static_cast<int64_t>(mean.size()))
      ctx.fail("x ", shape_str(tx.shape), " must be [n, C, ...] with C = ", mean.size());
    with_floats(ctx, x, [&](const Shape& s, const float* xp, float* yp) {
      channel_affine(s, xp, yp, mean.data(), scale.data(), beta.data());
    });
  });
}

std::unique_ptr<Kernel> make_instance_norm(KernelBuilder& b) {
  check_float_io(b);
  const int x = b.input("x");
  const std::vector<float> gamma = param_floats(b, "gamma"), beta = param_floats(b, "beta");
  const float eps = static_cast<float>(b.const_float("epsilon", 1e-5));
  return make_kernel([x, gamma, beta, eps](KernelContext& ctx) {
    const Tensor& tx = ctx.input(x);
    if (tx.rank() < 3) ctx.fail("x ", shape_str(tx.shape), " must be [n, C, *D] with at least one spatial dim");
    const int64_t channels = tx.shape[1];
    if ((!gamma.empty() && static_cast<int64_t>(gamma.size()) != channels) ||
        (!beta.empty() && static_cast<int64_t>(beta.size()) != channels))
      ctx.fail("gamma and beta must have C = ", channels, " values");
    with_floats(ctx, x, [&](const Shape& s, const float* xp, float* yp) {
      const int64_t plane = shape_numel(s) / (s[0] * channels);
      for (int64_t i = 0; i < s[0] * channels; ++i) {
        const int64_t c = i % channels;
        const auto [mean, rstd] = moments(xp + i * plane, nullptr, plane, eps);
        const float scale = rstd * (gamma.empty() ? 1.0f : gamma[c]), shift = beta.empty() ? 0.0f : beta[c];
        for (int64_t j = 0; j < plane; ++j) yp[i * plane + j] = (xp[i * plane + j] - mean) * scale + shift;
      }
    });
  });
}

std::unique_ptr<Kernel> make_layer_norm(KernelBuilder& b) {
  check_float_io(b);
  const int x = b.input("x");
  const bool has_axes = b.constant("axes") != nullptr;
  const std::vector<int64_t> axes = b.const_ints("axes", std::vector<int64_t>{});
  const std::vector<float> gamma = param_floats(b, "gamma"), beta = param_floats(b, "beta");
  const float eps = static_cast<float>(b.const_float("epsilon", 1e-5));
  return make_kernel([x, has_axes, axes, gamma, beta, eps](KernelContext& ctx) {
    const Tensor& tx = ctx.input(x);
    const int64_t rank = tx.rank();
    // Normalized axes, in the given order (gamma is laid out as x.shape[axes]).
    std::vector<int64_t> norm;
    if (has_axes) {
      for (int64_t a : axes) norm.push_back(normalize_axis(a, rank));
    } else {
      norm.resize(rank);
      std::iota(norm.begin(), norm.end(), 0);
    }
    std::vector<bool> reduced(rank, false);
    for (int64_t a : norm) {
      if (reduced[a]) ctx.fail("axes repeat dimension ", a);
      reduced[a] = true;
    }
    int64_t inner = 1;
    for (int64_t a : norm) inner *= tx.shape[a];
    if ((!gamma.empty() && static_cast<int64_t>(gamma.size()) != inner) ||
        (!beta.empty() && static_cast<int64_t>(beta.size()) != inner))
      ctx.fail("gamma and beta must have ", inner, " values (the size of x ", shape_str(tx.shape), " over axes)");
    // Trailing axes in order: each group is a contiguous row.
    bool trailing = true;
    for (size_t i = 0; i < norm.size(); ++i) trailing = trailing && norm[i] == rank - static_cast<int64_t>(norm.size() - i);
    with_floats(ctx, x, [&](const Shape& s, const float* xp, float* yp) {
      if (inner == 0 || shape_numel(s) == 0) return;
      const int64_t groups = shape_numel(s) / inner;
      auto normalize = [&](int64_t base, const int64_t* offsets) {
        const auto [mean, rstd] = moments(xp + base, offsets, inner, eps);
        for (int64_t j = 0; j < inner; ++j) {
          const int64_t o = base + (offsets ? offsets[j] : j);
          float v = (xp[o] - mean) * rstd;
          if (!gamma.empty()) v *= gamma[j];
          if (!beta.empty()) v += beta[j];
          yp[o] = v;
        }
      };
      if (trailing) {
        parallel_for(groups, std::max<int64_t>(1, kElementwiseGrain / inner), [&](int64_t begin, int64_t end) {
          for (int64_t g = begin; g < end; ++g) normalize(g * inner, nullptr);
        });
        return;
      }
      // General axes: element offsets of one group (axes order) and of each group start.
      const auto strides = contiguous_strides(s);
      auto offsets_over = [&](const std::vector<int64_t>& dims) {
        std::vector<int64_t> offs{0};
        for (int64_t d : dims) {
          std::vector<int64_t> next;
          next.reserve(offs.size() * s[d]);
          for (int64_t o : offs)
            for (int64_t i = 0; i < s[d]; ++i) next.push_back(o + i * strides[d]);
          offs.swap(next);
        }
        return offs;
      };
      std::vector<int64_t> kept;
      for (int64_t d = 0; d < rank; ++d)
        if (!reduced[d]) kept.push_back(d);
      const std::vector<int64_t> inner_offs = offsets_over(norm), outer_offs = offsets_over(kept);
      for (int64_t base : outer_offs) normalize(base, inner_offs.data());
    });
  });
}

std::unique_ptr<Kernel> make_l2_norm(KernelBuilder& b) {
  check_float_io(b);
  const int x = b.input("x");
  const float eps = static_cast<float>(b.const_float("epsilon", 1e-6));
  return make_kernel([x, eps](KernelContext& ctx) {
    const Tensor& tx = ctx.input(x);
    if (tx.rank() < 3) ctx.fail("x ", shape_str(tx.shape), " must have rank >= 3");
    with_floats(ctx, x, [&](const Shape& s, const float* xp, float* yp) {
      const int64_t inner = s[s.size() - 1] * s[s.size() - 2] * s[s.size() - 3];  // the last 3 dims
      if (inner == 0) return;
      for (int64_t g = 0; g < shape_numel(s) / inner; ++g) {
        const float* in = xp + g * inner;
        float sq = 0;
        for (int64_t j = 0; j < inner; ++j) sq += in[j] * in[j];
        const float inv = 1.0f / std::sqrt(sq + eps);
        for (int64_t j = 0; j < inner; ++j) yp[g * inner + j] = in[j] * inv;
      }
    });
  });
}

std::unique_ptr<Kernel> make_local_response_norm(KernelBuilder& b) {
  check_float_io(b);
  const int x = b.input("x");
  const int64_t size = b.const_int("size");
  b.check(size >= 1, "size must be >= 1, got ", size);
  const float alpha = static_cast<float>(b.const_float("alpha", 1e-4)), beta = static_cast<float>(b.const_float("beta", 0.75)),
              k = static_cast<float>(b.const_float("k", 1.0));
  return make_kernel([x, size, alpha, beta, k](KernelContext& ctx) {
    const Tensor& tx = ctx.input(x);
    if (tx.rank() < 3) ctx.fail("x ", shape_str(tx.shape), " must be [n, C, *D]");
    with_floats(ctx, x, [&](const Shape& s, const float* xp, float* yp) {
      const int64_t n = s[0], channels = s[1], plane = shape_numel(s) / std::max<int64_t>(n * channels, 1);
      std::vector<float> sum(static_cast<size_t>(plane));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < channels; ++c) {
          // Channels [c - size/2, c + (size-1)/2], clipped: centred for odd sizes.
          const int64_t lo = std::max<int64_t>(0, c - size / 2), hi = std::min(channels - 1, c + (size - 1) / 2);
          std::fill(sum.begin(), sum.end(), 0.0f);
          for (int64_t j = lo; j <= hi; ++j) {
            const float* in = xp + (i * channels + j) * plane;
            for (int64_t p = 0; p < plane; ++p) sum[p] += in[p] * in[p];
          }
          const int64_t base = (i * channels + c) * plane;
          for (int64_t p = 0; p < plane; ++p)
            yp[base + p] = xp[base + p] / std::pow(k + alpha / static_cast<float>(size) * sum[p], beta);
        }
    });
  });
}

}  // namespace

void register_normalization_kernels(KernelRegistry& registry) {
  registry.add("batch_norm", kFloat, make_batch_norm);
  registry.add("instance_norm", kFloat, make_instance_norm);
  registry.add("layer_norm", kFloat, make_layer_norm);
  registry.add("l2_norm", kFloat, make_l2_norm);
  registry.add("local_response_norm", kFloat, make_local_response_norm);
}

}  // namespace coremlrt::ops
