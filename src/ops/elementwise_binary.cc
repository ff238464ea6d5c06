// Elementwise binary ops (docs/design/coreml-format.md, "Elementwise binary ops"): x and y share one dtype
// and broadcast NumPy-style. Arithmetic on fp16 is done in float and rounded once per element; fp16
// operands are widened and results narrowed in blocks (util.h).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

// Signed overflow is undefined in C++: integer add/sub/mul/pow are done in unsigned
// arithmetic, which wraps modulo 2^32 as NumPy's int32 arithmetic (and coremltools' value
// inference) does.
template <class C, class Fn>
C wrapping(C x, C y, Fn fn) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(fn(static_cast<U>(x), static_cast<U>(y)));
  } else {
    return fn(x, y);
  }
}

template <class C>
C negate_wrapping(C x) {
  return wrapping(C(0), x, [](auto a, auto b) { return a - b; });
}

// Python semantics: floor division rounds toward -inf, mod takes the sign of the divisor.
template <class C>
C floor_div(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    if (y == 0) return 0;  // undefined in MIL; never trap
    if (y == -1) return negate_wrapping(x);  // INT32_MIN / -1 would trap; NumPy wraps it
    C q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
  } else {
    return std::floor(x / y);
  }
}

template <class C>
C mod(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    if (y == 0 || y == -1) return 0;  // INT32_MIN % -1 would trap
    C r = x % y;
    return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
  } else {
    C r = std::fmod(x, y);
    return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
  }
}

template <class C>
C int_pow(C base, C exponent) {
  if (exponent < 0) return base == 1 ? 1 : (base == -1 ? (exponent % 2 ? -1 : 1) : 0);
  using U = std::make_unsigned_t<C>;  // wraps instead of overflowing (see wrapping)
  U result = 1, factor = static_cast<U>(base);
  while (exponent > 0) {
    if (exponent & 1) result *= factor;
    factor *= factor;
    exponent >>= 1;
  }
  return static_cast<C>(result);
}

enum class Op { Add, Sub, Mul, RealDiv, FloorDiv, Mod, Pow, Maximum, Minimum,
                Equal, NotEqual, Greater, GreaterEqual, Less, LessEqual,
                LogicalAnd, LogicalOr, LogicalXor };

template <Op kOp, class C>
auto apply(C x, C y) {
  if constexpr (kOp == Op::Add) return wrapping(x, y, [](auto a, auto b) { return a + b; });
  else if constexpr (kOp == Op::Sub) return wrapping(x, y, [](auto a, auto b) { return a - b; });
  else if constexpr (kOp == Op::Mul) return wrapping(x, y, [](auto a, auto b) { return a * b; });
  else if constexpr (kOp == Op::RealDiv) {
    // Integer division truncates, as coremltools' value inference stores the exact quotient
    // into int32; y == -1 is a negation so that INT32_MIN / -1 wraps instead of trapping.
    if constexpr (std::is_integral_v<C>) return y == 0 ? C(0) : y == -1 ? negate_wrapping(x) : C(x / y);
    else return x / y;
  } else if constexpr (kOp == Op::FloorDiv) return floor_div(x, y);
  else if constexpr (kOp == Op::Mod) return mod(x, y);
  else if constexpr (kOp == Op::Pow) {
    if constexpr (std::is_integral_v<C>) return int_pow(x, y);
    else return C(std::pow(x, y));
  }
  // NaN on either side gives NaN, as NumPy's maximum/minimum (coremltools' value inference)
  // and PyTorch do; a NaN y must not lose to x.
  else if constexpr (kOp == Op::Maximum) return std::isnan(double(x)) ? x : (std::isnan(double(y)) || !(x > y) ? y : x);
  else if constexpr (kOp == Op::Minimum) return std::isnan(double(x)) ? x : (std::isnan(double(y)) || !(x < y) ? y : x);
  else if constexpr (kOp == Op::Equal) return uint8_t(x == y);
  else if constexpr (kOp == Op::NotEqual) return uint8_t(x != y);
  else if constexpr (kOp == Op::Greater) return uint8_t(x > y);
  else if constexpr (kOp == Op::GreaterEqual) return uint8_t(x >= y);
  else if constexpr (kOp == Op::Less) return uint8_t(x < y);
  else if constexpr (kOp == Op::LessEqual) return uint8_t(x <= y);
  else if constexpr (kOp == Op::LogicalAnd) return uint8_t(x && y);
  else if constexpr (kOp == Op::LogicalOr) return uint8_t(x || y);
  else return uint8_t(bool(x) != bool(y));
}

// Float arithmetic (fp16 or fp32 storage) over runs of the output: the longest trailing
// part of the output along which x and y are each either contiguous or one repeated element.
// fp16 runs are widened and narrowed in blocks (util.h); long outputs are split over the pool.
template <Op kOp, class T>
void run_float_runs(const Tensor& x, const Tensor& y, const Shape& shape, T* o) {
  const T* a = x.ptr<T>();
  const T* b = y.ptr<T>();
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  const int64_t rank = static_cast<int64_t>(shape.size());
  const std::vector<int64_t> sa = broadcast_strides(x.shape, shape), sb = broadcast_strides(y.shape, shape);
  // run = elements per run; step_a / step_b = 1 where x / y is contiguous along the run, 0
  // where it repeats one element; outer = the dims left for rows.
  int64_t run = 1, outer = rank;
  int64_t step_a = rank > 0 ? (sa[rank - 1] != 0 || shape[rank - 1] == 1 ? 1 : 0) : 1;
  int64_t step_b = rank > 0 ? (sb[rank - 1] != 0 || shape[rank - 1] == 1 ? 1 : 0) : 1;
  if (x.numel() == 1) step_a = 0;
  if (y.numel() == 1) step_b = 0;
  while (outer > 0) {
    const int64_t d = outer - 1;
    const bool a_fits = shape[d] == 1 || (step_a ? sa[d] == run : sa[d] == 0);
    const bool b_fits = shape[d] == 1 || (step_b ? sb[d] == run : sb[d] == 0);
    if (!a_fits || !b_fits) break;
    run *= shape[d];
    outer = d;
  }
  const int64_t rows = n / run;
  // Offsets of x and y at the start of output row r.
  auto row_offsets = [&](int64_t r, int64_t& ia, int64_t& ib) {
    ia = ib = 0;
    for (int64_t d = outer; d-- > 0;) {
      const int64_t i = r % shape[d];
      r /= shape[d];
      ia += i * sa[d];
      ib += i * sb[d];
    }
  };
  const int64_t rows_per_range = std::max<int64_t>(1, kElementwiseGrain / run);
  parallel_for(rows, rows_per_range, [&](int64_t row_begin, int64_t row_end) {
    // A run of a huge single row is still split: each range takes whole blocks of it.
    for (int64_t r = row_begin; r < row_end; ++r) {
      int64_t ia = 0, ib = 0;
      row_offsets(r, ia, ib);
      const auto body = [&](int64_t j0, int64_t j1) {
        float in_a[kFloatBlock], in_b[kFloatBlock], out[kFloatBlock];
        for (int64_t j = j0; j < j1; j += kFloatBlock) {
          const int64_t m = std::min(kFloatBlock, j1 - j);
          T* dst = o + r * run + j;
          float* res = float_block_out(dst, out);
          if (step_a && step_b) {
            const float* pa = float_block_in(a + ia + j, m, in_a);
            const float* pb = float_block_in(b + ib + j, m, in_b);
            for (int64_t i = 0; i < m; ++i) res[i] = apply<kOp, float>(pa[i], pb[i]);
          } else if (step_a) {
            const float* pa = float_block_in(a + ia + j, m, in_a);
            const float vb = static_cast<float>(b[ib]);
            for (int64_t i = 0; i < m; ++i) res[i] = apply<kOp, float>(pa[i], vb);
          } else if (step_b) {
            const float va = static_cast<float>(a[ia]);
            const float* pb = float_block_in(b + ib + j, m, in_b);
            for (int64_t i = 0; i < m; ++i) res[i] = apply<kOp, float>(va, pb[i]);
          } else {
            const float v = apply<kOp, float>(static_cast<float>(a[ia]), static_cast<float>(b[ib]));
            for (int64_t i = 0; i < m; ++i) res[i] = v;
          }
          float_block_store(dst, res, m);
        }
      };
      if (rows == 1) parallel_for(run, kElementwiseGrain, body);
      else body(0, run);
    }
  });
}

template <Op kOp, class T>
void run_typed(KernelContext& ctx, const Tensor& x, const Tensor& y) {
  using C = compute_t<T>;
  using Out = std::conditional_t<(kOp >= Op::Equal), uint8_t, T>;
  const Shape shape = x.shape == y.shape ? x.shape : broadcast_shapes(x.shape, y.shape);
  Tensor& out = ctx.allocate_output(0, kOp >= Op::Equal ? DType::Bool : x.dtype, shape);
  if constexpr (kOp < Op::Equal && std::is_same_v<C, float>) {
    run_float_runs<kOp, T>(x, y, shape, out.ptr<T>());
    return;
  }
  const T* a = x.ptr<T>();
  const T* b = y.ptr<T>();
  Out* o = out.ptr<Out>();
  const int64_t n = out.numel();
  if (x.shape == y.shape) {
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(apply<kOp, C>(C(a[i]), C(b[i])));
  } else if (y.numel() == 1) {
    const C scalar = C(b[0]);
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(apply<kOp, C>(C(a[i]), scalar));
  } else if (x.numel() == 1) {
    const C scalar = C(a[0]);
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(apply<kOp, C>(scalar, C(b[i])));
  } else {
    for_each_broadcast(shape, broadcast_strides(x.shape, shape), broadcast_strides(y.shape, shape),
                       [&](int64_t i, int64_t ia, int64_t ib) {
                         o[i] = static_cast<Out>(apply<kOp, C>(C(a[ia]), C(b[ib])));
                       });
  }
}

template <Op kOp>
void register_binary(KernelRegistry& registry, const char* name) {
  registry.add(name, kOp >= Op::LogicalAnd ? kBool : kFloatInt, [name](KernelBuilder& b) {
    const int x = b.input("x");
    const int y = b.input("y");
    const DType dx = b.input_type("x").dtype, dy = b.input_type("y").dtype;
    b.check(dx == dy, "x is ", dtype_name(dx), " but y is ", dtype_name(dy), "; both must have the same dtype");
    if constexpr (kOp >= Op::LogicalAnd) {
      b.check(dx == DType::Bool, "expects bool inputs, got ", dtype_name(dx));
    } else {
      b.check(dx == DType::Float32 || dx == DType::Float16 || dx == DType::Int32, "expects fp16, fp32 or int32 inputs, got ",
              dtype_name(dx));
    }
    return make_kernel([x, y, name](KernelContext& ctx) {
      const Tensor& tx = ctx.input(x);
      const Tensor& ty = ctx.input(y);
      if (tx.dtype != ty.dtype) ctx.fail("x is ", dtype_name(tx.dtype), " but y is ", dtype_name(ty.dtype));
      if constexpr (kOp >= Op::LogicalAnd) {
        static_cast<void>(name);  // named in the numeric ops' dtype errors only
        run_typed<kOp, uint8_t>(ctx, tx, ty);
      } else {
        dispatch_float_int(tx.dtype, name, [&](auto tag) { run_typed<kOp, typename decltype(tag)::type>(ctx, tx, ty); });
      }
    });
  });
}

}  // namespace

void register_elementwise_binary_kernels(KernelRegistry& registry) {
  register_binary<Op::Add>(registry, "add");
  register_binary<Op::Sub>(registry, "sub");
  register_binary<Op::Mul>(registry, "mul");
  register_binary<Op::RealDiv>(registry, "real_div");
  register_binary<Op::FloorDiv>(registry, "floor_div");
  register_binary<Op::Mod>(registry, "mod");
  register_binary<Op::Pow>(registry, "pow");
  register_binary<Op::Maximum>(registry, "maximum");
  register_binary<Op::Minimum>(registry, "minimum");
  register_binary<Op::Equal>(registry, "equal");
  register_binary<Op::NotEqual>(registry, "not_equal");
  register_binary<Op::Greater>(registry, "greater");
  register_binary<Op::GreaterEqual>(registry, "greater_equal");
  register_binary<Op::Less>(registry, "less");
  register_binary<Op::LessEqual>(registry, "less_equal");
  register_binary<Op::LogicalAnd>(registry, "logical_and");
  register_binary<Op::LogicalOr>(registry, "logical_or");
  register_binary<Op::LogicalXor>(registry, "logical_xor");
}

}  // namespace coremlrt::ops
