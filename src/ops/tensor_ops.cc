// Tensor operations (docs/design/coreml-format.md, "Tensor operations") that compute values rather than only
// move them: fill, fill_like, band_part, cumsum, range_1d, one_hot, non_zero, argsort, topk,
// and sliding_windows (a strided view).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "ops/register.h"
#include "ops/strided.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

// Splits a shape around `axis` into (outer, dim, inner) extents.
struct AxisSplit {
  int64_t outer = 1, dim = 1, inner = 1;
};
AxisSplit split_at(const Shape& shape, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
    (d < axis ? s.outer : d == axis ? s.dim : s.inner) *= shape[d];
  return s;
}

std::unique_ptr<Kernel> fill(KernelBuilder& b) {
  const int shape = b.input("shape");
  const double value = b.const_float("value", 0.0);
  const DType dtype = b.output_type(0).dtype;
  return make_kernel([=](KernelContext& ctx) {
    const Shape s = read_ints(ctx.input(shape));
    for (int64_t d : s)
      if (d < 0) ctx.fail("shape ", shape_str(s), " has a negative dimension");
    fill_value(ctx.allocate_output(0, dtype, s), value);
  });
}

std::unique_ptr<Kernel> fill_like(KernelBuilder& b) {
  const int ref = b.input("ref_tensor");
  const double value = b.const_float("value", 0.0);
  const DType dtype = b.output_type(0).dtype;
  return make_kernel([=](KernelContext& ctx) { fill_value(ctx.allocate_output(0, dtype, ctx.input(ref).shape), value); });
}

// Keeps element (m, n) of the last two dims iff (lower < 0 or m - n <= lower) and
// (upper < 0 or n - m <= upper); the rest become 0 (all-zero bytes in every dtype).
std::unique_ptr<Kernel> band_part(KernelBuilder& b) {
  const int x = b.input("x");
  const int64_t lower = b.const_int("lower", -1), upper = b.const_int("upper", -1);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    if (in.rank() < 2) ctx.fail("x must have rank >= 2, got ", shape_str(in.shape));
    Tensor& out = ctx.allocate_output(0, in.dtype, in.shape);
    const int64_t rows = in.shape[in.rank() - 2], cols = in.shape[in.rank() - 1];
    const size_t es = dtype_size(in.dtype);
    const char* src = static_cast<const char*>(in.data);
    char* dst = static_cast<char*>(out.data);
    for (int64_t i = 0, n = in.numel(); i < n; ++i) {
      const int64_t m = (i / cols) % rows, c = i % cols;
      const bool keep = (lower < 0 || m - c <= lower) && (upper < 0 || c - m <= upper);
      if (keep) std::memcpy(dst + i * es, src + i * es, es);
      else std::memset(dst + i * es, 0, es);
    }
  });
}

std::unique_ptr<Kernel> cumsum(KernelBuilder& b) {
  const int x = b.input("x");
  const int64_t axis = b.const_int("axis", 0);
  const bool exclusive = b.const_bool("exclusive", false), reverse = b.const_bool("reverse", false);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const AxisSplit s = split_at(in.shape, normalize_axis(axis, in.rank()));
    Tensor& out = ctx.allocate_output(0, in.dtype, in.shape);
    dispatch_float_int(in.dtype, "cumsum", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = in.ptr<T>();
      T* dst = out.ptr<T>();
      for (int64_t o = 0; o < s.outer; ++o)
        for (int64_t i = 0; i < s.inner; ++i) {
          compute_t<T> sum = 0;
          for (int64_t k = 0; k < s.dim; ++k) {
            const int64_t j = (o * s.dim + (reverse ? s.dim - 1 - k : k)) * s.inner + i;
            const compute_t<T> v = src[j];
            if (!exclusive) sum += v;
            dst[j] = static_cast<T>(sum);
            if (exclusive) sum += v;
          }
        }
    });
  });
}

std::unique_ptr<Kernel> range_1d(KernelBuilder& b) {
  const int end = b.input("end"), start = b.input("start"), step = b.input("step");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& ts = ctx.input(start);
    const double s = read_double(ts, 0), e = read_double(ctx.input(end), 0), d = read_double(ctx.input(step), 0);
    if (d == 0) ctx.fail("step must not be 0");
    const double n = std::ceil((e - s) / d);
    if (!(n < 1e12)) ctx.fail("range [", s, ", ", e, ") by ", d, " is too long");
    const int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
    Tensor& out = ctx.allocate_output(0, ts.dtype, {count});
    dispatch_float_int(ts.dtype, "range_1d", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* o = out.ptr<T>();
      for (int64_t i = 0; i < count; ++i) o[i] = static_cast<T>(s + static_cast<double>(i) * d);
    });
  });
}

std::unique_ptr<Kernel> one_hot(KernelBuilder& b) {
  const int indices = b.input("indices"), depth = b.input("one_hot_vector_size");
  const int64_t axis = b.const_int("axis", -1);
  const double on = b.const_float("on_value", 1.0), off = b.const_float("off_value", 0.0);
  const DType dtype = b.output_type(0).dtype;
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& idx = ctx.input(indices);
    const int64_t n = read_ints(ctx.input(depth)).at(0);
    if (n < 0) ctx.fail("one_hot_vector_size must be >= 0, got ", n);
    const int64_t a = normalize_axis(axis, idx.rank() + 1);
    Shape shape = idx.shape;
    shape.insert(shape.begin() + a, n);
    Tensor& out = ctx.allocate_output(0, dtype, shape);
    fill_value(out, off);
    const std::vector<int64_t> values = read_ints(idx);
    const AxisSplit s = split_at(shape, a);
    dispatch_all(dtype, "one_hot", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T on_v = dtype == DType::Bool ? T(on != 0) : static_cast<T>(static_cast<compute_t<T>>(on));
      T* o = out.ptr<T>();
      for (int64_t p = 0; p < s.outer; ++p)
        for (int64_t i = 0; i < s.inner; ++i) {
          const int64_t v = values[p * s.inner + i];
          if (v >= 0 && v < n) o[(p * n + v) * s.inner + i] = on_v;  // out-of-range: all off
        }
    });
  });
}

std::unique_ptr<Kernel> non_zero(KernelBuilder& b) {
  const int x = b.input("x");
  const DType dtype = b.output_type(0).dtype;
  b.check(dtype == DType::Int32, "output must be int32, not ", dtype_name(dtype));
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    std::vector<int64_t> hits;
    dispatch_all(in.dtype, "non_zero", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* p = in.ptr<T>();
      for (int64_t i = 0, n = in.numel(); i < n; ++i)
        if (static_cast<compute_t<T>>(p[i]) != 0) hits.push_back(i);
    });
    const int64_t rank = in.rank();
    Tensor& out = ctx.allocate_output(0, DType::Int32, {static_cast<int64_t>(hits.size()), rank});
    int32_t* o = out.ptr<int32_t>();
    for (size_t h = 0; h < hits.size(); ++h)
      for (int64_t d = rank, flat = hits[h]; d-- > 0; flat /= in.shape[d]) o[h * rank + d] = static_cast<int32_t>(flat % in.shape[d]);
  });
}

// Orders one line of (value, index) pairs and leaves its first k entries sorted. Ties keep
// the lower index first (what a stable sort gives); descending puts NaN first, ascending last.
template <class C>
void sort_line(std::vector<std::pair<C, int64_t>>& line, int64_t k, bool ascending) {
  auto nan = [](C v) { return std::isnan(static_cast<double>(v)); };
  auto before = [&](C a, C b) { return ascending ? (!nan(a) && nan(b)) || a < b : (nan(a) && !nan(b)) || a > b; };
  auto order = [&](const auto& a, const auto& b) {
    return before(a.first, b.first) || (!before(b.first, a.first) && a.second < b.second);
  };
  std::partial_sort(line.begin(), line.begin() + k, line.end(), order);
}

// Shared by argsort and topk: sorts every line along `axis` and writes the first k entries
// (values to out_values if given, indices to out_indices if given).
void sort_along(const Tensor& in, int64_t axis, int64_t k, bool ascending, Tensor* out_values, Tensor* out_indices) {
  const AxisSplit s = split_at(in.shape, axis);
  dispatch_all(in.dtype, "sort", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* src = in.ptr<T>();
    std::vector<std::pair<C, int64_t>> line(static_cast<size_t>(s.dim));
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t i = 0; i < s.inner; ++i) {
        for (int64_t j = 0; j < s.dim; ++j) line[j] = {static_cast<C>(src[(o * s.dim + j) * s.inner + i]), j};
        sort_line(line, k, ascending);
        for (int64_t j = 0; j < k; ++j) {
          const int64_t at = (o * k + j) * s.inner + i;
          if (out_values) out_values->ptr<T>()[at] = static_cast<T>(line[j].first);
          if (out_indices && out_indices->dtype == DType::UInt16) out_indices->ptr<uint16_t>()[at] = static_cast<uint16_t>(line[j].second);
          else if (out_indices) out_indices->ptr<int32_t>()[at] = static_cast<int32_t>(line[j].second);
        }
      }
  });
}

std::unique_ptr<Kernel> argsort(KernelBuilder& b) {
  const int x = b.input("x");
  const int64_t axis = b.const_int("axis", -1);
  const bool ascending = b.const_bool("ascending", false);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const int64_t a = normalize_axis(axis, in.rank());
    sort_along(in, a, in.shape[a], ascending, nullptr, &ctx.allocate_output(0, DType::Int32, in.shape));
  });
}

std::unique_ptr<Kernel> topk(KernelBuilder& b) {
  const int x = b.input("x");
  // k is known at load in MIL programs; the neuralNetwork topK layer may take it from a
  // second input at run time (src/format/neural_network/reduction_layers.cc).
  const bool k_at_load = !b.has("k") || b.is_constant("k");
  const int64_t k_const = k_at_load ? b.const_int("k", 1) : 0;
  const int k_input = k_at_load ? -1 : b.input("k");
  const int64_t axis = b.const_int("axis", -1);
  const bool ascending = b.const_bool("ascending", false);
  const bool indices = b.const_bool("return_indices", true);
  const std::string index_dtype = b.const_string("output_indices_dtype", "int32");
  b.check(index_dtype == "int32" || index_dtype == "uint16", "unsupported output_indices_dtype '", index_dtype, "'");
  b.check(static_cast<int>(b.op().outputs.size()) == (indices ? 2 : 1), "expects ", indices ? 2 : 1, " outputs");
  const DType idx_dtype = index_dtype == "int32" ? DType::Int32 : DType::UInt16;
  // "sort" (iOS16) may be False, which leaves the order unspecified: sorted output is valid.
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const int64_t a = normalize_axis(axis, in.rank());
    const int64_t k = k_input >= 0 ? read_ints(ctx.input(k_input)).at(0) : k_const;
    const int64_t kk = k == -1 ? in.shape[a] : k;
    if (kk < 0 || kk > in.shape[a]) ctx.fail("k = ", k, " is out of range for an axis of size ", in.shape[a]);
    Shape shape = in.shape;
    shape[a] = kk;
    Tensor& values = ctx.allocate_output(0, in.dtype, shape);
    Tensor* idx = indices ? &ctx.allocate_output(1, idx_dtype, shape) : nullptr;
    sort_along(in, a, kk, ascending, &values, idx);
  });
}

// Windows of `size` every `stride` along axis: a strided view with a new dim after axis.
std::unique_ptr<Kernel> sliding_windows(KernelBuilder& b) {
  const int x = b.input("x");
  const int64_t axis = b.const_int("axis"), size = b.const_int("size"), stride = b.const_int("stride", 1);
  b.check(size > 0 && stride > 0, "size and stride must be positive");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const int64_t a = normalize_axis(axis, in.rank());
    if (in.shape[a] < size) ctx.fail("window size ", size, " exceeds the axis size ", in.shape[a]);
    StridedView view = contiguous_view(in.shape);
    Shape shape = in.shape;
    shape[a] = (in.shape[a] - size) / stride + 1;
    shape.insert(shape.begin() + a + 1, size);
    view.strides.insert(view.strides.begin() + a + 1, view.strides[a]);
    view.strides[a] *= stride;
    copy_view(in, view, ctx.allocate_output(0, in.dtype, shape));
  });
}

}  // namespace

void register_tensor_ops_kernels(KernelRegistry& registry) {
  // fill, fill_like and one_hot: the dtypes they can produce.
  registry.add("fill", kPlainDTypes, fill);
  registry.add("fill_like", kPlainDTypes, fill_like, 16);
  registry.add("band_part", kAnyDType, band_part);
  registry.add("cumsum", kFloatInt, cumsum);
  registry.add("range_1d", kFloatInt, range_1d);
  registry.add("one_hot", kPlainDTypes, one_hot);
  registry.add("non_zero", kPlainDTypes, non_zero);
  registry.add("argsort", kPlainDTypes, argsort);
  registry.add("topk", kPlainDTypes, topk);
  registry.add("sliding_windows", kAnyDType, sliding_windows);
}

}  // namespace coremlrt::ops
