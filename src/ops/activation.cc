// Activations (docs/design/coreml-format.md, "Activations"): x is fp16 or fp32 and the output keeps its dtype
// and shape. fp16 is computed in float and rounded once on store. Parameters (alpha, beta) are
// read as doubles, which also covers the iOS17 redefinitions where their dtype is
// independent of x, so one registration serves every opset.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/register.h"
#include "ops/util.h"
#include "ops/vector_math.h"

namespace coremlrt::ops {

namespace {

void check_float_x(const KernelBuilder& b) {
  const DType dtype = b.input_type("x").dtype;
  b.check(dtype == DType::Float32 || dtype == DType::Float16, "x has unsupported dtype ", dtype_name(dtype),
          " (expected fp16 or fp32)");
}

// The kernel computing out = block(x) in float, block(a, y, m) writing y[0, m) from a[0, m).
template <class Block>
std::unique_ptr<Kernel> pointwise_blocks(KernelBuilder& b, Block block) {
  check_float_x(b);
  const int x = b.input("x");
  return make_kernel([x, block](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    Tensor& out = ctx.allocate_output(0, in.dtype, in.shape);
    dispatch_float(in.dtype, "activation", [&](auto tag) {
      using T = typename decltype(tag)::type;
      map_float_blocks(in.ptr<T>(), out.ptr<T>(), in.numel(), block);
    });
  });
}

// The kernel computing out[i] = fn(x[i]) in float.
template <class Fn>
std::unique_ptr<Kernel> pointwise(KernelBuilder& b, Fn fn) {
  return pointwise_blocks(b, [fn](const float* a, float* y, int64_t m) {
    for (int64_t i = 0; i < m; ++i) y[i] = fn(a[i]);
  });
}

template <class Block>
void add_blocks(KernelRegistry& registry, const char* name, Block block) {
  registry.add(name, kFloat, [block](KernelBuilder& b) { return pointwise_blocks(b, block); });
}

template <class Fn>
void add_pointwise(KernelRegistry& registry, const char* name, Fn fn) {
  registry.add(name, kFloat, [fn](KernelBuilder& b) { return pointwise(b, fn); });
}

// Registers an op whose function takes (x, alpha, beta) with constant scalar parameters.
template <class Fn>
void add_with_params(KernelRegistry& registry, const char* name, bool has_beta, Fn fn) {
  registry.add(name, kFloat, [has_beta, fn](KernelBuilder& b) {
    const float alpha = static_cast<float>(b.const_float("alpha"));
    const float beta = has_beta ? static_cast<float>(b.const_float("beta")) : 0.0f;
    return pointwise(b, [alpha, beta, fn](float v) { return fn(v, alpha, beta); });
  });
}

// A constant 1-D float tensor (fp16 or fp32) as floats.
std::vector<float> const_floats(const KernelBuilder& b, const char* name) {
  const ir::ConstValue* value = b.constant(name);
  b.check(value && value->type.kind == ir::TypeKind::Tensor, "missing constant tensor parameter '", name, "'");
  const Tensor& t = value->tensor;
  std::vector<float> out(static_cast<size_t>(t.numel()));
  dispatch_float(t.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(t.ptr<T>()[i]);
  });
  return out;
}

// Per-channel activations (prelu, softplus_parametric): x is [B, C, ...] and parameter
// vectors of length C apply along axis 1. fn(v, channel).
template <class Fn>
std::unique_ptr<Kernel> per_channel(KernelBuilder& b, int64_t channels, Fn fn) {
  check_float_x(b);
  const int x = b.input("x");
  return make_kernel([x, channels, fn](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    if (in.rank() < 2 || in.shape[1] != channels)
      ctx.fail("x of shape ", shape_str(in.shape), " does not have ", channels, " channels on axis 1");
    Tensor& out = ctx.allocate_output(0, in.dtype, in.shape);
    int64_t inner = 1;
    for (int64_t d = 2; d < in.rank(); ++d) inner *= in.shape[d];
    const int64_t outer = in.shape[0];
    dispatch_float(in.dtype, "activation", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = in.ptr<T>();
      T* dst = out.ptr<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < channels; ++c) {
          const int64_t base = (o * channels + c) * inner;
          map_float_blocks(src + base, dst + base, inner, [&](const float* a, float* y, int64_t m) {
            for (int64_t k = 0; k < m; ++k) y[k] = fn(a[k], c);
          });
        }
    });
  });
}

// Checks a per-channel parameter against x's declared type where it is known.
void check_channel_param(const KernelBuilder& b, const char* name, size_t count, int64_t min_rank, int64_t max_rank) {
  b.check(b.constant(name)->type.rank == 1, "parameter '", name, "' must be rank 1");
  const ir::ValueType& x = b.input_type("x");
  if (x.rank < 0) return;
  b.check(x.rank >= min_rank && x.rank <= max_rank, "x has rank ", x.rank, ", expected ", min_rank, " to ", max_rank);
  b.check(x.dims[1] < 0 || x.dims[1] == static_cast<int64_t>(count), "parameter '", name, "' has ", count,
          " values but x has ", x.dims[1], " channels");
}

// A row of fp16 or fp32 as floats (in place for fp32), and floats stored as T.
inline const float* src_floats(const float* src, int64_t, float*) { return src; }
inline const float* src_floats(const half* src, int64_t n, float* buf) {
  half_to_float(src, buf, n);
  return buf;
}
inline void load_floats(const float* src, float* dst, int64_t n) { std::copy_n(src, n, dst); }
inline void load_floats(const half* src, float* dst, int64_t n) { half_to_float(src, dst, n); }
inline void store_floats(const float* values, float* dst, int64_t n) { std::copy_n(values, n, dst); }
inline void store_floats(const float* values, half* dst, int64_t n) { float_to_half(values, dst, n); }

// e^(v - max), a softmax's numerators. Below -87.33 e^v is under the smallest normal float, so 0
// (exp_lanes alone stops at e^-87).
[[gnu::always_inline]] inline void exp_below_max(Lanes& v, const Lanes& max) {
  v -= max;
  const SignedBits underflow = v < -87.33f;
  exp_lanes(v);
  v = underflow ? Lanes{} : v;
}

// One row of a softmax in floats: out = e^(x - max(x)) / sum, eight lanes at a time with
// vector_math.h's exp (within 1 unit in the last place; the C library's scalar expf took most
// of a decode step's softmax). A NaN, or an infinity the max cannot cancel, makes the sum NaN
// and with it the row, as the scalar loop gave.
[[gnu::always_inline]] inline void softmax_row_lanes(const float* x, float* out, int64_t n) {
  const int64_t whole = n / kLanes * kLanes;
  Lanes m = Lanes{} - INFINITY;
  for (int64_t i = 0; i < whole; i += kLanes) {
    Lanes v;
    __builtin_memcpy(&v, x + i, sizeof v);
    m = v > m ? v : m;
  }
  float max = -INFINITY;
  for (int l = 0; l < kLanes; ++l) max = std::max(max, m[l]);
  for (int64_t i = whole; i < n; ++i) max = std::max(max, x[i]);
  Lanes sum{};
  const Lanes max_lanes = Lanes{} + max;
  auto exp_block = [&](const float* from, float* to) {
    Lanes v;
    __builtin_memcpy(&v, from, sizeof v);
    exp_below_max(v, max_lanes);
    sum += v;
    __builtin_memcpy(to, &v, sizeof v);
  };
  for (int64_t i = 0; i < whole; i += kLanes) exp_block(x + i, out + i);
  if (whole < n) {  // the tail through a block padded with -inf, whose e^-inf adds nothing
    float block[kLanes];
    std::fill_n(block, kLanes, -INFINITY);
    std::copy(x + whole, x + n, block);
    exp_block(block, block);
    std::copy_n(block, n - whole, out + whole);
  }
  double total = 0;
  for (int l = 0; l < kLanes; ++l) total += sum[l];
  const float scale = static_cast<float>(1.0 / total);
  for (int64_t i = 0; i < n; ++i) out[i] *= scale;
}

COREMLRT_LANES_VERSIONS(void softmax_row(const float* x, float* out, int64_t n) { softmax_row_lanes(x, out, n); })

// Softmax down the columns of a [len, width] block of floats (width a multiple of kLanes), each
// column one softmax computed as softmax_row computes a row, eight columns at a time; the sums
// in double, as the scalar loop before it summed. out may be x.
[[gnu::always_inline]] inline void softmax_columns_lanes(const float* x, float* out, int64_t len, int64_t width) {
  typedef double Doubles __attribute__((vector_size(8 * kLanes)));
  for (int64_t c = 0; c < width; c += kLanes) {
    Lanes m = Lanes{} - INFINITY;
    for (int64_t j = 0; j < len; ++j) {
      Lanes v;
      __builtin_memcpy(&v, x + j * width + c, sizeof v);
      m = v > m ? v : m;
    }
    Doubles sum{};
    for (int64_t j = 0; j < len; ++j) {
      Lanes v;
      __builtin_memcpy(&v, x + j * width + c, sizeof v);
      exp_below_max(v, m);
      sum += __builtin_convertvector(v, Doubles);
      __builtin_memcpy(out + j * width + c, &v, sizeof v);
    }
    const Lanes scale = __builtin_convertvector(1.0 / sum, Lanes);
    for (int64_t j = 0; j < len; ++j) {
      Lanes v;
      __builtin_memcpy(&v, out + j * width + c, sizeof v);
      v *= scale;
      __builtin_memcpy(out + j * width + c, &v, sizeof v);
    }
  }
}

COREMLRT_LANES_VERSIONS(void softmax_columns(const float* x, float* out, int64_t len, int64_t width) {
  softmax_columns_lanes(x, out, len, width);
})

// f of a[0, m) into y, eight lanes at a time.
template <class F>
[[gnu::always_inline]] inline void lanes_block(const float* a, float* y, int64_t m, F f) {
  std::copy_n(a, m, y);
  map_lanes(y, m, f);
}

// Activations (and the exp and tanh ops) through vector_math.h rather than the C library's
// scalar functions, which cost 4.5 to 19 ns a value (erff), 6 (expf) and 22 (tanhf):
// docs/reports/performance.md, design choices.
COREMLRT_LANES_VERSIONS(void gelu_block(const float* a, float* y, int64_t m) {
  lanes_block(a, y, m, [](Lanes& v) { gelu_lanes(v); });
})
COREMLRT_LANES_VERSIONS(void gelu_tanh_block(const float* a, float* y, int64_t m) {
  lanes_block(a, y, m, [](Lanes& v) { gelu_tanh_lanes(v); });
})
COREMLRT_LANES_VERSIONS(void gelu_sigmoid_block(const float* a, float* y, int64_t m) {
  lanes_block(a, y, m, [](Lanes& v) { gelu_sigmoid_lanes(v); });
})
COREMLRT_LANES_VERSIONS(void sigmoid_block(const float* a, float* y, int64_t m) {
  lanes_block(a, y, m, [](Lanes& v) { sigmoid_lanes(v); });
})
COREMLRT_LANES_VERSIONS(void silu_block(const float* a, float* y, int64_t m) {
  lanes_block(a, y, m, [](Lanes& v) {
    Lanes s = v;
    sigmoid_lanes(s);
    v = v * s;
  });
})
COREMLRT_LANES_VERSIONS(void tanh_block(const float* a, float* y, int64_t m) {
  lanes_block(a, y, m, [](Lanes& v) { tanh_lanes(v); });
})
COREMLRT_LANES_VERSIONS(void exp_block(const float* a, float* y, int64_t m) {
  lanes_block(a, y, m, [](Lanes& v) { exp_op_lanes(v); });
})

// log(1 + e^v) without overflow for large v or loss of precision for very negative v.
float softplus(float v) { return std::max(v, 0.0f) + std::log1p(std::exp(-std::abs(v))); }

std::unique_ptr<Kernel> make_gelu(KernelBuilder& b) {
  const std::string mode = b.const_string("mode", "EXACT");
  if (mode == "EXACT") return pointwise_blocks(b, [](const float* a, float* y, int64_t m) { gelu_block(a, y, m); });
  if (mode == "TANH_APPROXIMATION")
    return pointwise_blocks(b, [](const float* a, float* y, int64_t m) { gelu_tanh_block(a, y, m); });
  if (mode == "SIGMOID_APPROXIMATION")
    return pointwise_blocks(b, [](const float* a, float* y, int64_t m) { gelu_sigmoid_block(a, y, m); });
  b.fail("unsupported mode '", mode, "' (expected EXACT, TANH_APPROXIMATION or SIGMOID_APPROXIMATION)");
}

// exp(x - max) / sum(exp(x - max)) along one axis; max subtraction keeps exp from overflowing.
std::unique_ptr<Kernel> make_softmax(KernelBuilder& b) {
  check_float_x(b);
  const int x = b.input("x");
  const int64_t axis = b.const_int("axis", -1);
  const int64_t rank = b.input_type("x").rank;
  if (rank >= 0) b.check(axis >= -rank && axis < std::max<int64_t>(rank, 1), "axis ", axis, " is out of range for rank ", rank);
  return make_kernel([x, axis](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const int64_t ax = normalize_axis(axis, in.rank());
    int64_t outer = 1, inner = 1;
    const int64_t len = in.rank() == 0 ? 1 : in.shape[ax];
    for (int64_t d = 0; d < ax; ++d) outer *= in.shape[d];
    for (int64_t d = ax + 1; d < in.rank(); ++d) inner *= in.shape[d];
    Tensor& out = ctx.allocate_output(0, in.dtype, in.shape);
    dispatch_float(in.dtype, "softmax", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (inner == 1) {
        // Rows along the last axis: widen a row in bulk, one row per range of the pool.
        const int64_t rows_per_range = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(len, 1));
        parallel_for(outer, rows_per_range, [&](int64_t begin, int64_t end) {
          std::vector<float> row(static_cast<size_t>(len)), e(static_cast<size_t>(len));
          for (int64_t o = begin; o < end; ++o) {
            const T* src = in.ptr<T>() + o * len;
            const float* x = src_floats(src, len, row.data());
            softmax_row(x, e.data(), len);
            store_floats(e.data(), out.ptr<T>() + o * len, len);
          }
        });
        return;
      }
      // Columns (an axis before the last): each of the inner positions is one softmax down len
      // rows. Blocks of kSoftmaxColumns positions are widened into a [len, columns] float block,
      // ranges of blocks spread over the pool.
      constexpr int64_t kSoftmaxColumns = 64;
      const int64_t blocks = (inner + kSoftmaxColumns - 1) / kSoftmaxColumns;
      const int64_t blocks_per_range = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(len * kSoftmaxColumns, 1));
      parallel_for(outer * blocks, blocks_per_range, [&](int64_t begin, int64_t end) {
        std::vector<float> block(static_cast<size_t>(len * kSoftmaxColumns));
        for (int64_t b = begin; b < end; ++b) {
          const int64_t o = b / blocks, k0 = b % blocks * kSoftmaxColumns;
          const int64_t width = std::min(kSoftmaxColumns, inner - k0);
          const int64_t padded = (width + kLanes - 1) / kLanes * kLanes;  // lanes past width are not stored
          const T* src = in.ptr<T>() + o * len * inner + k0;
          T* dst = out.ptr<T>() + o * len * inner + k0;
          for (int64_t j = 0; j < len; ++j) {
            float* row = block.data() + j * padded;
            std::fill(row + width, row + padded, 0.0f);
            load_floats(src + j * inner, row, width);
          }
          softmax_columns(block.data(), block.data(), len, padded);
          for (int64_t j = 0; j < len; ++j) store_floats(block.data() + j * padded, dst + j * inner, width);
        }
      });
    });
  });
}

}  // namespace

void softmax_floats(const float* x, float* out, int64_t n) { softmax_row(x, out, n); }

void register_activation_kernels(KernelRegistry& registry) {
  // std::max/min return their first argument when it is NaN, so NaN passes through.
  add_pointwise(registry, "relu", [](float v) { return std::max(v, 0.0f); });
  add_pointwise(registry, "relu6", [](float v) { return std::min(std::max(v, 0.0f), 6.0f); });
  add_blocks(registry, "sigmoid", [](const float* a, float* y, int64_t m) { sigmoid_block(a, y, m); });
  add_blocks(registry, "silu", [](const float* a, float* y, int64_t m) { silu_block(a, y, m); });
  add_blocks(registry, "tanh", [](const float* a, float* y, int64_t m) { tanh_block(a, y, m); });
  add_blocks(registry, "exp", [](const float* a, float* y, int64_t m) { exp_block(a, y, m); });
  add_pointwise(registry, "softplus", softplus);
  add_pointwise(registry, "softsign", [](float v) { return v / (1.0f + std::abs(v)); });

  add_with_params(registry, "elu", false, [](float v, float a, float) { return v > 0.0f ? v : a * std::expm1(v); });
  add_with_params(registry, "leaky_relu", false, [](float v, float a, float) { return v >= 0.0f ? v : a * v; });
  add_with_params(registry, "thresholded_relu", false, [](float v, float a, float) { return v >= a ? v : 0.0f; });
  add_with_params(registry, "linear_activation", true, [](float v, float a, float b) { return a * v + b; });
  add_with_params(registry, "scaled_tanh", true, [](float v, float a, float b) { return a * std::tanh(b * v); });
  add_with_params(registry, "sigmoid_hard", true,
                  [](float v, float a, float b) { return std::min(std::max(a * v + b, 0.0f), 1.0f); });
  add_with_params(registry, "clamped_relu", true,
                  [](float v, float a, float b) { return std::min(v >= 0.0f ? v : a * v, b); });

  registry.add("prelu", kFloat, [](KernelBuilder& b) {
    const std::vector<float> alpha = const_floats(b, "alpha");
    check_channel_param(b, "alpha", alpha.size(), 3, 5);
    // Only rank 4 may have distinct per-channel slopes (a restriction of the op definition).
    const int64_t rank = b.input_type("x").rank;
    if (rank == 3 || rank == 5)
      for (float a : alpha)
        b.check(std::abs(a - alpha[0]) <= 1e-5f, "rank ", rank, " x requires all alpha values to be equal");
    return per_channel(b, static_cast<int64_t>(alpha.size()),
                       [alpha](float v, int64_t c) { return v > 0.0f ? v : alpha[c] * v; });
  });
  registry.add("softplus_parametric", kFloat, [](KernelBuilder& b) {
    const std::vector<float> alpha = const_floats(b, "alpha"), beta = const_floats(b, "beta");
    check_channel_param(b, "alpha", alpha.size(), 3, INT64_MAX);
    check_channel_param(b, "beta", beta.size(), 3, INT64_MAX);
    b.check(alpha.size() == beta.size(), "alpha and beta must have the same length");
    return per_channel(b, static_cast<int64_t>(alpha.size()),
                       [alpha, beta](float v, int64_t c) { return alpha[c] * softplus(beta[c] * v); });
  });

  registry.add("gelu", kFloat, make_gelu);
  registry.add("softmax", kFloat, make_softmax);
}

}  // namespace coremlrt::ops
