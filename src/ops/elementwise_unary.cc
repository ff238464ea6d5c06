// Elementwise unary ops (docs/design/coreml-format.md, "Elementwise unary ops and cast"; `cast` lives in
// misc.cc). The output keeps the input's dtype and shape; fp16 is computed in float and rounded once per
// element on store (widened and narrowed in blocks: util.h, map_float_blocks).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

// The dtype set an op accepts for x: F = {fp16, fp32}, FI adds int32.
enum class Types { F, FI };

// The kernel computing out[i] = fn(x[i]), fn called with compute_t<T>. Types is a template
// parameter so that F-only functions are never instantiated for int32.
template <Types kTypes, class Fn>
std::unique_ptr<Kernel> unary_kernel(KernelBuilder& b, Fn fn) {
  const int x = b.input("x");
  const DType dtype = b.input_type("x").dtype;
  const bool ok = dtype == DType::Float32 || dtype == DType::Float16 || (kTypes == Types::FI && dtype == DType::Int32);
  b.check(ok, "x has unsupported dtype ", dtype_name(dtype), kTypes == Types::FI ? " (expected fp16, fp32 or int32)"
                                                                                  : " (expected fp16 or fp32)");
  return make_kernel([x, fn](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    Tensor& out = ctx.allocate_output(0, in.dtype, in.shape);
    auto run = [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const T* src = in.ptr<T>();
      T* dst = out.ptr<T>();
      const int64_t n = in.numel();
      if constexpr (std::is_same_v<C, float>) {
        map_float_blocks(src, dst, n, [&](const float* a, float* y, int64_t m) {
          for (int64_t i = 0; i < m; ++i) y[i] = static_cast<float>(fn(a[i]));
        });
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(fn(static_cast<C>(src[i])));
      }
    };
    if constexpr (kTypes == Types::FI) dispatch_float_int(in.dtype, "elementwise unary op", run);
    else dispatch_float(in.dtype, "elementwise unary op", run);
  });
}

template <Types kTypes, class Fn>
void add_plain(KernelRegistry& registry, const char* name, Fn fn) {
  registry.add(name, kTypes == Types::FI ? kFloatInt : kFloat,
               [fn](KernelBuilder& b) { return unary_kernel<kTypes>(b, fn); });
}

// An optional float parameter. coremltools materialises a missing epsilon as
// nptype(x.dtype)(default), so for fp16 x the default is first rounded to fp16
// (log's 1e-45 becomes 0, as the format notes say).
double param_or_default(const KernelBuilder& b, const char* name, double fallback) {
  if (b.constant(name)) return b.const_float(name);
  return b.input_type("x").dtype == DType::Float16 ? static_cast<double>(static_cast<half>(fallback)) : fallback;
}

// Integer ops must not overflow into undefined behaviour: widen, then wrap modulo 2^32 on
// the way back (well defined since C++20), as NumPy's int32 arithmetic does.
template <class C>
C int_abs(C v) {
  if constexpr (std::is_integral_v<C>) return static_cast<C>(v < 0 ? -static_cast<int64_t>(v) : v);
  else return std::abs(v);
}

}  // namespace

void register_elementwise_unary_kernels(KernelRegistry& registry) {
  // Functions of F only (fp16 / fp32 computed in float).
  add_plain<Types::F>(registry, "acos", [](auto v) { return std::acos(v); });
  add_plain<Types::F>(registry, "asin", [](auto v) { return std::asin(v); });
  add_plain<Types::F>(registry, "atan", [](auto v) { return std::atan(v); });
  add_plain<Types::F>(registry, "atanh", [](auto v) { return std::atanh(v); });
  // asinh and acosh are not MIL ops; the neuralNetwork layers of those names lower onto them.
  add_plain<Types::F>(registry, "asinh", [](auto v) { return std::asinh(v); });
  add_plain<Types::F>(registry, "acosh", [](auto v) { return std::acosh(v); });
  add_plain<Types::F>(registry, "cos", [](auto v) { return std::cos(v); });
  add_plain<Types::F>(registry, "sin", [](auto v) { return std::sin(v); });
  add_plain<Types::F>(registry, "tan", [](auto v) { return std::tan(v); });
  add_plain<Types::F>(registry, "cosh", [](auto v) { return std::cosh(v); });
  add_plain<Types::F>(registry, "sinh", [](auto v) { return std::sinh(v); });
  // tanh: activation.cc, eight lanes at a time (vector_math.h), as exp below.
  add_plain<Types::F>(registry, "ceil", [](auto v) { return std::ceil(v); });
  add_plain<Types::F>(registry, "floor", [](auto v) { return std::floor(v); });
  // nearbyint in the default rounding mode (to nearest) rounds halves to even, like NumPy.
  add_plain<Types::F>(registry, "round", [](auto v) { return std::nearbyint(v); });
  add_plain<Types::F>(registry, "erf", [](auto v) { return std::erf(v); });
  // exp: activation.cc, eight lanes at a time (vector_math.h).
  add_plain<Types::F>(registry, "sqrt", [](auto v) { return std::sqrt(v); });

  // FI functions: the lambdas also see int32_t.
  add_plain<Types::FI>(registry, "abs", [](auto v) { return int_abs(v); });
  add_plain<Types::FI>(registry, "square", [](auto v) {
    using C = decltype(v);
    if constexpr (std::is_integral_v<C>) return static_cast<C>(static_cast<int64_t>(v) * v);
    else return v * v;
  });
  add_plain<Types::FI>(registry, "sign", [](auto v) {
    using C = decltype(v);
    return v > 0 ? C(1) : (v < 0 ? C(-1) : v);  // keeps 0 and NaN as they are
  });
  add_plain<Types::FI>(registry, "exp2", [](auto v) {
    using C = decltype(v);
    if constexpr (std::is_integral_v<C>) {
      // 2^v truncated toward zero; saturate where int32 cannot hold it.
      return v < 0 ? C(0) : (v >= 31 ? C(INT32_MAX) : static_cast<C>(int32_t{1} << v));
    } else {
      return std::exp2(v);
    }
  });

  // Ops with an epsilon that is always added (also to positive x).
  registry.add("inverse", kFloat, [](KernelBuilder& b) {
    const float eps = static_cast<float>(param_or_default(b, "epsilon", 1e-4));
    return unary_kernel<Types::F>(b, [eps](float v) { return 1.0f / (v + eps); });
  });
  registry.add("log", kFloat, [](KernelBuilder& b) {
    const float eps = static_cast<float>(param_or_default(b, "epsilon", 1e-45));
    return unary_kernel<Types::F>(b, [eps](float v) { return std::log(v + eps); });
  });
  registry.add("rsqrt", kFloat, [](KernelBuilder& b) {
    const float eps = static_cast<float>(param_or_default(b, "epsilon", 1e-12));
    return unary_kernel<Types::F>(b, [eps](float v) { return 1.0f / std::sqrt(v + eps); });
  });

  registry.add("clip", kFloat, [](KernelBuilder& b) {
    const double alpha = b.const_float("alpha"), beta = b.const_float("beta");
    // The iOS17 definition validates alpha < beta; iOS15 just applies min(max(x, alpha), beta).
    if (b.ios_version() >= 17) b.check(alpha < beta, "alpha (", alpha, ") must be smaller than beta (", beta, ")");
    const float lo = static_cast<float>(alpha), hi = static_cast<float>(beta);
    // std::max/min return their first argument when it is NaN, so NaN passes through.
    return unary_kernel<Types::F>(b, [lo, hi](float v) { return std::min(std::max(v, lo), hi); });
  });
  registry.add("threshold", kFloatInt, [](KernelBuilder& b) {
    const double alpha = b.const_float("alpha");
    return unary_kernel<Types::FI>(b, [alpha](auto v) { return std::max(v, static_cast<decltype(v)>(alpha)); });
  });

  registry.add("logical_not", kBool, [](KernelBuilder& b) {
    const int x = b.input("x");
    b.check(b.input_type("x").dtype == DType::Bool, "expects a bool input, got ", dtype_name(b.input_type("x").dtype));
    return make_kernel([x](KernelContext& ctx) {
      const Tensor& in = ctx.input(x);
      if (in.dtype != DType::Bool) ctx.fail("expects a bool input, got ", dtype_name(in.dtype));
      Tensor& out = ctx.allocate_output(0, DType::Bool, in.shape);
      const uint8_t* src = in.ptr<uint8_t>();
      uint8_t* dst = out.ptr<uint8_t>();
      for (int64_t i = 0, n = in.numel(); i < n; ++i) dst[i] = src[i] == 0;
    });
  });
}

}  // namespace coremlrt::ops
