// cast (docs/design/coreml-format.md, "Elementwise unary ops and cast"), identity and select (same file,
// "Control flow, lists, identity and select").
#include <cmath>
#include <limits>

#include "coremlrt/float_formats.h"
#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

DType parse_cast_dtype(const KernelBuilder& b, const std::string& name) {
  static const std::pair<const char*, DType> kNames[] = {
      {"fp32", DType::Float32}, {"fp16", DType::Float16}, {"int32", DType::Int32}, {"bool", DType::Bool},
      {"int8", DType::Int8},    {"uint8", DType::UInt8},  {"int16", DType::Int16}, {"uint16", DType::UInt16},
      {"fp64", DType::Float64}, {"int64", DType::Int64}};
  for (auto& [text, dtype] : kNames)
    if (name == text) return dtype;
  b.fail("unsupported cast dtype '", name, "'");
}

// float -> integer conversion truncates toward zero; NaN becomes 0 and out-of-range values
// saturate, so that no input can trigger undefined behaviour.
template <class To, class From>
To convert(From value) {
  if constexpr (std::is_same_v<To, uint8_t> && std::is_same_v<From, uint8_t>) {
    return value;
  } else if constexpr (std::is_integral_v<To> && !std::is_integral_v<From>) {
    double v = static_cast<double>(value);
    if (std::isnan(v)) return 0;
    if (v <= static_cast<double>(std::numeric_limits<To>::min())) return std::numeric_limits<To>::min();
    if (v >= static_cast<double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(static_cast<compute_t<From>>(value));
  }
}

}  // namespace

// The narrow float formats of weight files, widened to fp32.
Tensor widen_narrow_float(const Tensor& in) {
  Tensor out = Tensor::empty(DType::Float32, in.shape);
  float* dst = out.ptr<float>();
  for (int64_t i = 0; i < in.numel(); ++i) {
    switch (in.dtype) {
      case DType::BFloat16: dst[i] = bfloat16_to_float(in.ptr<uint16_t>()[i]); break;
      case DType::Float8E4M3FN: dst[i] = float8_e4m3fn_to_float(in.ptr<uint8_t>()[i]); break;
      default: dst[i] = float8_e5m2_to_float(in.ptr<uint8_t>()[i]); break;
    }
  }
  return out;
}

// Copies `in` into a new tensor of dtype `to` (bool: nonzero -> 1).
Tensor cast_tensor(const Tensor& in, DType to, Tensor out) {
  if (in.dtype == DType::BFloat16 || in.dtype == DType::Float8E4M3FN || in.dtype == DType::Float8E5M2)
    return cast_tensor(widen_narrow_float(in), to, std::move(out));
  // fp16 <-> fp32 in bulk (the CPU's conversion instructions; same results as static_cast): a
  // KV cache's casts convert ~10^5..10^6 values a step, too many for a per-element library call.
  if (in.dtype == DType::Float32 && to == DType::Float16) {
    float_to_half(in.ptr<float>(), out.ptr<half>(), in.numel());
    return out;
  }
  if (in.dtype == DType::Float16 && to == DType::Float32) {
    half_to_float(in.ptr<half>(), out.ptr<float>(), in.numel());
    return out;
  }
  dispatch_all(in.dtype, "cast", [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    dispatch_all(to, "cast", [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      const From* src = in.ptr<From>();
      To* dst = out.ptr<To>();
      const int64_t n = in.numel();
      if (to == DType::Bool) {
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<To>(static_cast<compute_t<From>>(src[i]) != 0);
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = convert<To>(src[i]);
      }
    });
  });
  return out;
}

void register_misc_kernels(KernelRegistry& registry) {
  // cast_tensor reads every dispatch_all dtype and widens the narrow float formats of weights.
  constexpr DTypeSet kCastFrom = kPlainDTypes | DTypeSet{DType::BFloat16, DType::Float8E4M3FN, DType::Float8E5M2};
  registry.add("cast", kCastFrom, [](KernelBuilder& b) {
    const int x = b.input("x");
    const DType to = parse_cast_dtype(b, b.const_string("dtype"));
    return make_kernel([x, to](KernelContext& ctx) {
      const Tensor& in = ctx.input(x);
      if (in.dtype == to) {
        ctx.set_output(0, in);
        return;
      }
      cast_tensor(in, to, ctx.allocate_output(0, to, in.shape));
    });
  });

  registry.add("identity", kAnyDType, [](KernelBuilder& b) {
    const int x = b.input("x");
    return make_kernel([x](KernelContext& ctx) { ctx.set_output(0, ctx.input(x)); });
  });

  registry.add("select", kPlainDTypes, [](KernelBuilder& b) {
    const int cond = b.input("cond"), a = b.input("a"), c = b.input("b");
    b.check(b.input_type("a").dtype == b.input_type("b").dtype, "a and b must have the same dtype");
    return make_kernel([cond, a, c](KernelContext& ctx) {
      const Tensor& tc = ctx.input(cond);
      const Tensor& ta = ctx.input(a);
      const Tensor& tb = ctx.input(c);
      const Shape shape = broadcast_shapes(broadcast_shapes(tc.shape, ta.shape), tb.shape);
      Tensor& out = ctx.allocate_output(0, ta.dtype, shape);
      const auto sc = broadcast_strides(tc.shape, shape), sa = broadcast_strides(ta.shape, shape),
                 sb = broadcast_strides(tb.shape, shape);
      dispatch_all(ta.dtype, "select", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* pa = ta.ptr<T>();
        const T* pb = tb.ptr<T>();
        T* o = out.ptr<T>();
        // Walk cond and a together, then b separately: two cheap passes instead of a 3-way iterator.
        std::vector<uint8_t> pick(static_cast<size_t>(out.numel()));
        dispatch_all(tc.dtype, "select", [&](auto ctag) {
          using B = typename decltype(ctag)::type;
          const B* pc = tc.ptr<B>();
          for_each_broadcast(shape, sc, sa, [&](int64_t i, int64_t ic, int64_t ia) {
            pick[i] = static_cast<compute_t<B>>(pc[ic]) != 0;
            if (pick[i]) o[i] = pa[ia];
          });
        });
        for_each_broadcast(shape, sb, sb, [&](int64_t i, int64_t ib, int64_t) {
          if (!pick[i]) o[i] = pb[ib];
        });
      });
    });
  });
}

}  // namespace coremlrt::ops
