// Reductions (docs/design/coreml-format.md, "Reductions"). x is fp16, fp32 or int32 and the result keeps its
// dtype (argmax/argmin return indices). Values are accumulated in double and rounded once on store;
// int32 results are truncated toward zero, as coremltools' value inference does with astype.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

enum class Reduce { Sum, Mean, Prod, Max, Min, SumSquare, L1Norm, L2Norm, LogSum, LogSumExp };

void check_fi_x(const KernelBuilder& b) {
  const DType dtype = b.input_type("x").dtype;
  b.check(dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::Int32, "x has unsupported dtype ",
          dtype_name(dtype), " (expected fp16, fp32 or int32)");
}

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_integral_v<T>) return false;
  else return std::isnan(v);
}

// double -> T with one rounding; for integers truncation with saturation (NaN -> 0), so that
// no value can trigger undefined behaviour.
template <class T>
T store(double v) {
  if constexpr (std::is_integral_v<T>) {
    if (std::isnan(v)) return 0;
    return static_cast<T>(std::clamp(v, double(std::numeric_limits<T>::min()), double(std::numeric_limits<T>::max())));
  } else {
    return static_cast<T>(v);
  }
}

// Max/min that propagate NaN (NumPy's max/min do).
double nan_max(double a, double b) { return (b > a || std::isnan(b)) && !std::isnan(a) ? b : a; }
double nan_min(double a, double b) { return (b < a || std::isnan(b)) && !std::isnan(a) ? b : a; }

// Which axes of a rank-`rank` tensor are reduced: all of them when axes are absent.
std::vector<bool> reduced_mask(const std::optional<std::vector<int64_t>>& axes, int64_t rank) {
  std::vector<bool> mask(static_cast<size_t>(rank), !axes.has_value());
  if (axes)
    for (int64_t a : *axes) mask[normalize_axis(a, rank)] = true;
  return mask;
}

template <Reduce kOp, class T>
void reduce_typed(KernelContext& ctx, const Tensor& in, const std::vector<bool>& mask, bool keep_dims) {
  // Each input element adds into the output element with the same kept coordinates: walk x
  // with the output's strides, 0 on reduced dims.
  Shape kept = in.shape, out_shape;
  int64_t count = 1;
  for (size_t d = 0; d < kept.size(); ++d) {
    if (mask[d]) {
      count *= kept[d];
      kept[d] = 1;
      if (keep_dims) out_shape.push_back(1);
    } else {
      out_shape.push_back(kept[d]);
    }
  }
  std::vector<int64_t> ostride = contiguous_strides(kept);
  for (size_t d = 0; d < kept.size(); ++d)
    if (mask[d]) ostride[d] = 0;

  Tensor& out = ctx.allocate_output(0, in.dtype, out_shape);
  const int64_t n_out = out.numel();
  const T* src = in.ptr<T>();
  auto visit = [&](auto&& fn) {  // fn(value, output index)
    for_each_broadcast(in.shape, ostride, ostride, [&](int64_t i, int64_t o, int64_t) {
      fn(static_cast<double>(static_cast<compute_t<T>>(src[i])), o);
    });
  };

  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double init = kOp == Reduce::Prod ? 1.0 : kOp == Reduce::Max || kOp == Reduce::LogSumExp ? -kInf
                                               : kOp == Reduce::Min                               ? kInf
                                                                                                  : 0.0;
  std::vector<double> acc(static_cast<size_t>(n_out), init);
  if constexpr (kOp == Reduce::LogSumExp) {
    // Stable: max + log(sum(exp(x - max))). An infinite (or NaN) max is the answer itself
    // (all -inf gives -inf, any +inf gives +inf), so the shift is 0 there.
    visit([&](double v, int64_t o) { acc[o] = nan_max(acc[o], v); });
    std::vector<double> shift(acc.size());
    for (size_t o = 0; o < acc.size(); ++o) shift[o] = std::isfinite(acc[o]) ? acc[o] : 0.0;
    std::fill(acc.begin(), acc.end(), 0.0);
    visit([&](double v, int64_t o) { acc[o] += std::exp(v - shift[o]); });
    for (size_t o = 0; o < acc.size(); ++o) acc[o] = shift[o] + std::log(acc[o]);
  } else {
    visit([&](double v, int64_t o) {
      double& a = acc[o];
      if constexpr (kOp == Reduce::Prod) a *= v;
      else if constexpr (kOp == Reduce::Max) a = nan_max(a, v);
      else if constexpr (kOp == Reduce::Min) a = nan_min(a, v);
      else if constexpr (kOp == Reduce::SumSquare || kOp == Reduce::L2Norm) a += v * v;
      else if constexpr (kOp == Reduce::L1Norm) a += std::abs(v);
      else a += v;  // Sum, Mean, LogSum
    });
    for (double& a : acc) {
      if constexpr (kOp == Reduce::Mean) a /= static_cast<double>(count);
      else if constexpr (kOp == Reduce::L2Norm) a = std::sqrt(a);
      else if constexpr (kOp == Reduce::LogSum) a = std::log(a);
    }
  }
  T* dst = out.ptr<T>();
  for (int64_t o = 0; o < n_out; ++o) dst[o] = store<T>(acc[o]);
}

template <Reduce kOp>
void add_reduce(KernelRegistry& registry, const char* name) {
  registry.add(name, kFloatInt, [name](KernelBuilder& b) {
    check_fi_x(b);
    const int x = b.input("x");
    std::optional<std::vector<int64_t>> axes;
    if (b.constant("axes")) axes = b.const_ints("axes");
    const bool keep_dims = b.const_bool("keep_dims", false);
    const int64_t rank = b.input_type("x").rank;
    if (axes && rank >= 0) {
      std::vector<bool> seen(static_cast<size_t>(rank), false);
      for (int64_t a : *axes) {
        b.check(a >= -rank && a < rank, "axis ", a, " is out of range for rank ", rank);
        const int64_t d = a < 0 ? a + rank : a;
        b.check(!seen[d], "axis ", a, " is listed twice");
        seen[d] = true;
      }
    }
    return make_kernel([x, axes, keep_dims, name](KernelContext& ctx) {
      const Tensor& in = ctx.input(x);
      const std::vector<bool> mask = reduced_mask(axes, in.rank());
      dispatch_float_int(in.dtype, name,
                         [&](auto tag) { reduce_typed<kOp, typename decltype(tag)::type>(ctx, in, mask, keep_dims); });
    });
  });
}

// reduce_argmax / reduce_argmin along one axis. Ties go to the first index and the first NaN
// wins, like NumPy's argmax/argmin.
template <bool kMax>
void add_arg_reduce(KernelRegistry& registry, const char* name) {
  registry.add(name, kFloatInt, [name](KernelBuilder& b) {
    check_fi_x(b);
    const int x = b.input("x");
    const int64_t axis = b.const_int("axis", -1);
    const bool keep_dims = b.const_bool("keep_dims", false);
    const std::string out_name = b.const_string("output_dtype", "int32");  // iOS17+
    b.check(out_name == "int32" || out_name == "uint16", "output_dtype must be \"int32\" or \"uint16\", got \"",
            out_name, "\"");
    const DType out_dtype = out_name == "int32" ? DType::Int32 : DType::UInt16;
    const int64_t rank = b.input_type("x").rank;
    if (rank >= 0) b.check(axis >= -rank && axis < rank, "axis ", axis, " is out of range for rank ", rank);
    return make_kernel([x, axis, keep_dims, out_dtype, name](KernelContext& ctx) {
      const Tensor& in = ctx.input(x);
      if (in.rank() == 0) ctx.fail("x must have rank 1 or more");
      const int64_t ax = normalize_axis(axis, in.rank());
      const int64_t len = in.shape[ax];
      if (len == 0) ctx.fail("cannot take ", name, " over an empty axis");
      if (out_dtype == DType::UInt16 && len > 65536) ctx.fail("axis of length ", len, " does not fit uint16 indices");
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < ax; ++d) outer *= in.shape[d];
      for (int64_t d = ax + 1; d < in.rank(); ++d) inner *= in.shape[d];
      Shape out_shape = in.shape;
      if (keep_dims) out_shape[ax] = 1;
      else out_shape.erase(out_shape.begin() + ax);
      Tensor& out = ctx.allocate_output(0, out_dtype, out_shape);
      dispatch_float_int(in.dtype, name, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = compute_t<T>;
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t k = 0; k < inner; ++k) {
            const T* src = in.ptr<T>() + o * len * inner + k;
            int64_t best = 0;
            C best_v = static_cast<C>(src[0]);
            for (int64_t j = 1; j < len && !is_nan(best_v); ++j) {
              const C v = static_cast<C>(src[j * inner]);
              if (is_nan(v) || (kMax ? v > best_v : v < best_v)) {
                best = j;
                best_v = v;
              }
            }
            const int64_t i = o * inner + k;
            if (out_dtype == DType::Int32) out.ptr<int32_t>()[i] = static_cast<int32_t>(best);
            else out.ptr<uint16_t>()[i] = static_cast<uint16_t>(best);
          }
        }
      });
    });
  });
}

}  // namespace

void register_reduction_kernels(KernelRegistry& registry) {
  add_reduce<Reduce::Sum>(registry, "reduce_sum");
  add_reduce<Reduce::Mean>(registry, "reduce_mean");
  add_reduce<Reduce::Prod>(registry, "reduce_prod");
  add_reduce<Reduce::Max>(registry, "reduce_max");
  add_reduce<Reduce::Min>(registry, "reduce_min");
  add_reduce<Reduce::SumSquare>(registry, "reduce_sum_square");
  add_reduce<Reduce::L1Norm>(registry, "reduce_l1_norm");
  add_reduce<Reduce::L2Norm>(registry, "reduce_l2_norm");
  add_reduce<Reduce::LogSum>(registry, "reduce_log_sum");
  add_reduce<Reduce::LogSumExp>(registry, "reduce_log_sum_exp");
  add_arg_reduce<true>(registry, "reduce_argmax");
  add_arg_reduce<false>(registry, "reduce_argmin");
}

}  // namespace coremlrt::ops
