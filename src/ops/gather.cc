// Gather and scatter ops (docs/design/coreml-format.md, "Gather and scatter"). Indices are read as int64
// whatever their dtype; an index outside [-D, D) fails the prediction instead of touching memory out of
// bounds. Negative indices wrap like Python's: iOS15/16 define that, iOS17+ call it out of
// range with undefined results unless validate_indices is set, in which case we fail. Gathers
// of iOS17+ without validate_indices still wrap; scatters drop such updates
// (scatter_index_rule).
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/packed_weight.h"
#include "ops/register.h"
#include "ops/state_update.h"
#include "ops/strided.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

struct IndexRule {
  bool allow_negative = true;
  // Out-of-range indices are skipped (-1) instead of failing the prediction.
  bool skip_invalid = false;

  int64_t resolve(const KernelContext& ctx, int64_t index, int64_t size, const char* what) const {
    if (index < 0 && allow_negative) index += size;
    if (index >= 0 && index < size) return index;
    if (skip_invalid) return -1;
    ctx.fail(what, " index ", index, " is out of range for a dimension of size ", size);
  }
};

IndexRule index_rule(const KernelBuilder& b) {
  const bool validate = b.const_bool("validate_indices", false);
  return {b.ios_version() < 17 || !validate};
}

// Scatters of iOS17+ take indices in [0, D) only. Without validate_indices an index outside
// it has undefined (but memory-safe) results: its update is dropped. coremltools' tests check
// that such a scatter does not act as if a negative index wrapped.
IndexRule scatter_index_rule(const KernelBuilder& b) {
  if (b.ios_version() < 17) return {true, false};
  return {false, !b.const_bool("validate_indices", false)};
}

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t d = begin; d < end && d < s.size(); ++d) p *= s[d];
  return p;
}

void check_batch_dims(const KernelContext& ctx, const Shape& x, const Shape& indices, int64_t batch_dims) {
  if (batch_dims < 0 || batch_dims > static_cast<int64_t>(indices.size()) || batch_dims > static_cast<int64_t>(x.size()))
    ctx.fail("batch_dims ", batch_dims, " is out of range");
  for (int64_t d = 0; d < batch_dims; ++d)
    if (x[d] != indices[d]) ctx.fail("batch dims of x ", shape_str(x), " and indices ", shape_str(indices), " differ");
}

// Rows of a packed table (an embedding: gather along axis 0 of a compressed weight), each
// decoded straight into the output (src/ops/packed_weight.h).
std::unique_ptr<Kernel> gather_packed_rows(KernelBuilder& b, std::shared_ptr<const PackedMatrix> table) {
  const int indices = b.input("indices");
  const IndexRule rule = index_rule(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& ti = ctx.input(indices);
    const Shape& ts = table->tensor().shape;
    Shape shape = ti.shape;
    shape.insert(shape.end(), ts.begin() + 1, ts.end());
    Tensor& out = ctx.allocate_output(0, table->dtype(), shape);
    const std::vector<int64_t> idx = read_ints(ti);
    const int64_t cols = table->cols();
    for (size_t j = 0; j < idx.size(); ++j) {
      const int64_t row = rule.resolve(ctx, idx[j], table->rows(), "gather");
      if (out.dtype == DType::Float16) table->decode(row, 1, 0, cols, out.ptr<half>() + j * cols, cols);
      else table->decode(row, 1, 0, cols, out.ptr<float>() + j * cols, cols);
    }
  });
}

std::unique_ptr<Kernel> gather(KernelBuilder& b) {
  if (b.is_constant("x") && !b.is_constant("indices")) {
    const ir::ConstValue* stored = b.stored_constant("x");
    if (stored->packed && PackedMatrix::readable(*stored->packed) && b.const_int("batch_dims", 0) == 0 &&
        normalize_axis(b.const_int("axis", 0), static_cast<int64_t>(stored->packed->shape.size())) == 0)
      return gather_packed_rows(b, std::make_shared<PackedMatrix>(stored->packed));
  }
  const int x = b.input("x"), indices = b.input("indices");
  const int64_t axis = b.const_int("axis", 0), batch_dims_param = b.const_int("batch_dims", 0);
  const IndexRule rule = index_rule(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const Tensor& ti = ctx.input(indices);
    const int64_t a = normalize_axis(axis, in.rank());
    const int64_t bd = batch_dims_param < 0 ? batch_dims_param + ti.rank() : batch_dims_param;
    check_batch_dims(ctx, in.shape, ti.shape, bd);
    if (bd > a) ctx.fail("batch_dims ", bd, " exceeds axis ", a);
    Shape shape(in.shape.begin(), in.shape.begin() + a);
    shape.insert(shape.end(), ti.shape.begin() + bd, ti.shape.end());
    shape.insert(shape.end(), in.shape.begin() + a + 1, in.shape.end());
    Tensor& out = ctx.allocate_output(0, in.dtype, shape);
    const std::vector<int64_t> idx = read_ints(ti);
    const int64_t batch = product(in.shape, 0, bd), outer = product(in.shape, bd, a), dim = in.shape[a];
    const int64_t n = product(ti.shape, bd, ti.shape.size());
    const size_t chunk = product(in.shape, a + 1, in.shape.size()) * dtype_size(in.dtype);
    const char* src = static_cast<const char*>(in.data);
    char* dst = static_cast<char*>(out.data);
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t k = rule.resolve(ctx, idx[bi * n + j], dim, "gather");
          std::memcpy(dst + ((bi * outer + o) * n + j) * chunk, src + ((bi * outer + o) * dim + k) * chunk, chunk);
        }
  });
}

// Visits every position of `shape` (row-major) with the offset of the same position in a
// tensor whose strides are `strides`, except along `axis`, which the callback resolves.
template <class Fn>
void for_each_position(const Shape& shape, int64_t axis, const std::vector<int64_t>& strides, Fn&& fn) {
  const int64_t total = shape_numel(shape);
  for (int64_t i = 0; i < total; ++i) {
    int64_t rem = i, offset = 0;
    for (size_t d = shape.size(); d-- > 0;) {
      const int64_t c = rem % shape[d];
      rem /= shape[d];
      if (static_cast<int64_t>(d) != axis) offset += c * strides[d];
    }
    fn(i, offset);
  }
}

// Indices of the same rank as x; off the axis they may not exceed x's dims (torch.gather).
void check_along_axis(const KernelContext& ctx, const Shape& x, const Shape& indices, int64_t axis) {
  bool ok = x.size() == indices.size();
  for (size_t d = 0; ok && d < x.size(); ++d) ok = static_cast<int64_t>(d) == axis || indices[d] <= x[d];
  if (!ok) ctx.fail("indices shape ", shape_str(indices), " does not fit x shape ", shape_str(x), " along axis ", axis);
}

std::unique_ptr<Kernel> gather_along_axis(KernelBuilder& b) {
  const int x = b.input("x"), indices = b.input("indices");
  const int64_t axis = b.const_int("axis", 0);
  const IndexRule rule = index_rule(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const Tensor& ti = ctx.input(indices);
    const int64_t a = normalize_axis(axis, in.rank());
    check_along_axis(ctx, in.shape, ti.shape, a);
    Tensor& out = ctx.allocate_output(0, in.dtype, ti.shape);
    const std::vector<int64_t> idx = read_ints(ti);
    const std::vector<int64_t> strides = contiguous_strides(in.shape);
    const size_t es = dtype_size(in.dtype);
    for_each_position(ti.shape, a, strides, [&](int64_t i, int64_t offset) {
      const int64_t k = rule.resolve(ctx, idx[i], in.shape[a], "gather_along_axis");
      std::memcpy(static_cast<char*>(out.data) + i * es, static_cast<const char*>(in.data) + (offset + k * strides[a]) * es, es);
    });
  });
}

// Offset of the slice of x addressed by one index tuple indices[p, :] (after batch dims).
int64_t nd_offset(const KernelContext& ctx, const IndexRule& rule, const std::vector<int64_t>& idx, int64_t p,
                  int64_t k, const Shape& x, const std::vector<int64_t>& strides, int64_t first_dim) {
  int64_t offset = 0;
  for (int64_t t = 0; t < k; ++t) {
    const int64_t i = rule.resolve(ctx, idx[p * k + t], x[first_dim + t], "nd");
    if (i < 0) return -1;  // skipped (see IndexRule::skip_invalid)
    offset += i * strides[first_dim + t];
  }
  return offset;
}

std::unique_ptr<Kernel> gather_nd(KernelBuilder& b) {
  const int x = b.input("x"), indices = b.input("indices");
  const int64_t batch_dims = b.const_int("batch_dims", 0);
  const IndexRule rule = index_rule(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const Tensor& ti = ctx.input(indices);
    if (ti.rank() < 1) ctx.fail("indices must have rank >= 1");
    check_batch_dims(ctx, in.shape, ti.shape, batch_dims);
    const int64_t k = ti.shape.back();
    if (batch_dims >= ti.rank() || batch_dims + k > in.rank())
      ctx.fail("indices ", shape_str(ti.shape), " with batch_dims ", batch_dims, " do not fit x ", shape_str(in.shape));
    Shape shape(ti.shape.begin(), ti.shape.end() - 1);
    shape.insert(shape.end(), in.shape.begin() + batch_dims + k, in.shape.end());
    Tensor& out = ctx.allocate_output(0, in.dtype, shape);
    const std::vector<int64_t> idx = read_ints(ti);
    const std::vector<int64_t> strides = contiguous_strides(in.shape);
    const int64_t positions = product(ti.shape, 0, ti.shape.size() - 1);
    const int64_t per_batch = product(ti.shape, batch_dims, ti.shape.size() - 1);
    const int64_t batch_stride = product(in.shape, batch_dims, in.shape.size());
    const size_t es = dtype_size(in.dtype), chunk = product(in.shape, batch_dims + k, in.shape.size()) * es;
    for (int64_t p = 0; p < positions; ++p) {
      const int64_t offset = (per_batch ? p / per_batch : 0) * batch_stride + nd_offset(ctx, rule, idx, p, k, in.shape, strides, batch_dims);
      std::memcpy(static_cast<char*>(out.data) + p * chunk, static_cast<const char*>(in.data) + offset * es, chunk);
    }
  });
}

enum class Mode { Update, Add, Sub, Mul, Div, Max, Min };

Mode parse_mode(const KernelBuilder& b) {
  const std::string mode = b.const_string("mode", "add");  // the materialized default is "add"
  static const std::pair<const char*, Mode> kModes[] = {{"update", Mode::Update}, {"add", Mode::Add}, {"sub", Mode::Sub},
                                                        {"mul", Mode::Mul},       {"div", Mode::Div}, {"max", Mode::Max},
                                                        {"min", Mode::Min}};
  for (auto& [name, m] : kModes)
    if (mode == name) return m;
  b.fail("unknown mode '", mode, "'");
}

template <class C>
C combine(Mode mode, C old, C update) {
  switch (mode) {
    case Mode::Update: return update;
    case Mode::Add: return old + update;
    case Mode::Sub: return old - update;
    case Mode::Mul: return old * update;
    case Mode::Div:
      // An integer divisor of -1 negates: INT32_MIN / -1 would trap, and wraps to INT32_MIN as
      // the elementwise real_div does.
      if constexpr (std::is_same_v<C, bool>) {
        return update ? old : false;
      } else if constexpr (std::is_signed_v<C> && std::is_integral_v<C>) {
        if (update == -1) return C(C(0) - static_cast<std::make_unsigned_t<C>>(old));
        return update == 0 ? C(0) : C(old / update);
      } else if constexpr (std::is_integral_v<C>) {
        return update == 0 ? C(0) : C(old / update);
      }
      else return old / update;
    case Mode::Max: return old > update ? old : update;
    case Mode::Min: return old < update ? old : update;
  }
  return update;
}

// Copies data to the output, then calls visit(apply) where apply(dst_offset, src_offset,
// count) combines `count` consecutive update elements into the output.
template <class Visit>
void run_scatter(KernelContext& ctx, Mode mode, const Tensor& data, const Tensor& updates, Visit&& visit) {
  if (updates.dtype != data.dtype)
    ctx.fail("updates is ", dtype_name(updates.dtype), " but data is ", dtype_name(data.dtype));
  Tensor& out = ctx.allocate_output(0, data.dtype, data.shape);
  if (data.nbytes()) std::memcpy(out.data, data.data, data.nbytes());
  dispatch_all(data.dtype, "scatter", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    T* o = out.ptr<T>();
    const T* u = updates.ptr<T>();
    visit([&](int64_t dst, int64_t src, int64_t count) {
      for (int64_t i = 0; i < count; ++i) o[dst + i] = static_cast<T>(combine<C>(mode, o[dst + i], u[src + i]));
    });
  });
}

void check_updates(const KernelContext& ctx, const Shape& updates, const Shape& expected) {
  if (updates != expected) ctx.fail("updates has shape ", shape_str(updates), "; expected ", shape_str(expected));
}

// scatter_nd's shapes: index tuples (the last dim of indices) no longer than data's rank, and
// updates of shape indices[:-1] + data[k:]. Returns the tuples' length k.
int64_t check_scatter_nd(const KernelContext& ctx, const Shape& data, const Shape& indices, const Shape& updates) {
  if (indices.empty()) ctx.fail("indices must have rank >= 1");
  const int64_t k = indices.back();
  if (k > static_cast<int64_t>(data.size())) ctx.fail("index tuples of length ", k, " for data of rank ", data.size());
  Shape expected(indices.begin(), indices.end() - 1);
  expected.insert(expected.end(), data.begin() + k, data.end());
  check_updates(ctx, updates, expected);
  return k;
}

std::unique_ptr<Kernel> scatter(KernelBuilder& b) {
  const int data = b.input("data"), indices = b.input("indices"), updates = b.input("updates");
  const int64_t axis = b.const_int("axis", 0);
  const Mode mode = parse_mode(b);
  const IndexRule rule = scatter_index_rule(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& td = ctx.input(data);
    const Tensor& ti = ctx.input(indices);
    const Tensor& tu = ctx.input(updates);
    const int64_t a = normalize_axis(axis, td.rank());
    Shape expected(td.shape.begin(), td.shape.begin() + a);
    expected.insert(expected.end(), ti.shape.begin(), ti.shape.end());
    expected.insert(expected.end(), td.shape.begin() + a + 1, td.shape.end());
    check_updates(ctx, tu.shape, expected);
    const std::vector<int64_t> idx = read_ints(ti);
    const int64_t outer = product(td.shape, 0, a), dim = td.shape[a], inner = product(td.shape, a + 1, td.shape.size());
    const int64_t n = static_cast<int64_t>(idx.size());
    run_scatter(ctx, mode, td, tu, [&](auto&& apply) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < n; ++j)
          if (const int64_t k = rule.resolve(ctx, idx[j], dim, "scatter"); k >= 0)
            apply((o * dim + k) * inner, (o * n + j) * inner, inner);
    });
  });
}

std::unique_ptr<Kernel> scatter_along_axis(KernelBuilder& b) {
  const int data = b.input("data"), indices = b.input("indices"), updates = b.input("updates");
  const int64_t axis = b.const_int("axis", 0);
  const Mode mode = parse_mode(b);
  const IndexRule rule = scatter_index_rule(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& td = ctx.input(data);
    const Tensor& ti = ctx.input(indices);
    const Tensor& tu = ctx.input(updates);
    const int64_t a = normalize_axis(axis, td.rank());
    check_along_axis(ctx, td.shape, ti.shape, a);
    check_updates(ctx, tu.shape, ti.shape);
    const std::vector<int64_t> idx = read_ints(ti);
    const std::vector<int64_t> strides = contiguous_strides(td.shape);
    run_scatter(ctx, mode, td, tu, [&](auto&& apply) {
      for_each_position(ti.shape, a, strides, [&](int64_t i, int64_t offset) {
        if (const int64_t k = rule.resolve(ctx, idx[i], td.shape[a], "scatter_along_axis"); k >= 0)
          apply(offset + k * strides[a], i, 1);
      });
    });
  });
}

std::unique_ptr<Kernel> scatter_nd(KernelBuilder& b) {
  const int data = b.input("data"), indices = b.input("indices"), updates = b.input("updates");
  const Mode mode = parse_mode(b);
  const IndexRule rule = scatter_index_rule(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& td = ctx.input(data);
    const Tensor& ti = ctx.input(indices);
    const Tensor& tu = ctx.input(updates);
    const int64_t k = check_scatter_nd(ctx, td.shape, ti.shape, tu.shape);
    const std::vector<int64_t> idx = read_ints(ti);
    const std::vector<int64_t> strides = contiguous_strides(td.shape);
    const int64_t positions = product(ti.shape, 0, ti.shape.size() - 1), chunk = product(td.shape, k, td.shape.size());
    run_scatter(ctx, mode, td, tu, [&](auto&& apply) {
      for (int64_t p = 0; p < positions; ++p)
        if (const int64_t offset = nd_offset(ctx, rule, idx, p, k, td.shape, strides, 0); offset >= 0)
          apply(offset, p * chunk, chunk);
    });
  });
}

}  // namespace

std::unique_ptr<Kernel> in_place_state_scatter_nd(KernelBuilder& b, int state_input) {
  const int indices = b.input("indices"), updates = b.input("updates");
  b.check(parse_mode(b) == Mode::Update, "an in-place state scatter_nd takes mode \"update\" only");
  const IndexRule rule = scatter_index_rule(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& current = ctx.input(state_input);
    const Tensor& ti = ctx.input(indices);
    const Tensor& tu = ctx.input(updates);
    const int64_t k = check_scatter_nd(ctx, current.shape, ti.shape, tu.shape);
    // The updates in the state's dtype (fp32 beside casts is written rounded to fp16, as
    // cast(scatter_nd(cast(state)), fp16) gives: src/ops/state_update.h).
    Tensor rounded;
    const Tensor* source = &tu;
    if (tu.dtype != current.dtype) {
      if (tu.dtype != DType::Float32 || current.dtype != DType::Float16)
        ctx.fail("writes ", dtype_name(tu.dtype), " updates into a state of ", dtype_name(current.dtype));
      rounded = Tensor::empty(DType::Float16, tu.shape);
      float_to_half(tu.ptr<float>(), rounded.ptr<half>(), tu.numel());
      source = &rounded;
    }
    // Every index is resolved (and a bad one fails) before anything is written.
    const std::vector<int64_t> idx = read_ints(ti);
    const std::vector<int64_t> strides = contiguous_strides(current.shape);
    const int64_t positions = product(ti.shape, 0, ti.shape.size() - 1);
    const size_t es = dtype_size(current.dtype);
    const size_t chunk = static_cast<size_t>(product(current.shape, k, current.shape.size())) * es;
    std::vector<std::pair<size_t, size_t>> writes;  // (byte offset in the state, update position)
    for (int64_t p = 0; p < positions; ++p)
      if (const int64_t offset = nd_offset(ctx, rule, idx, p, k, current.shape, strides, 0); offset >= 0)
        writes.emplace_back(static_cast<size_t>(offset) * es, static_cast<size_t>(p));
    const char* from = static_cast<const char*>(source->data);
    auto write_into = [&](char* data) {
      for (const auto& [offset, p] : writes) std::memcpy(data + offset, from + p * chunk, chunk);
    };
    const size_t written = writes.size() * chunk;
    if (Tensor* target = ctx.writable_state(state_input)) {
      // Keep what the writes overwrite, all read before any is written, to put it back if the
      // prediction fails.
      auto saved = std::make_shared<std::vector<char>>(written);
      char* data = static_cast<char*>(target->data);
      for (size_t i = 0; i < writes.size(); ++i) std::memcpy(saved->data() + i * chunk, data + writes[i].first, chunk);
      ctx.on_failure(state_input, [data, saved, writes, chunk] {
        for (size_t i = 0; i < writes.size(); ++i) std::memcpy(data + writes[i].first, saved->data() + i * chunk, chunk);
      });
      write_into(data);
      ctx.count_state_bytes(written, written);
      return;
    }
    // Something else still views the state's buffer: the new value is a copy.
    Tensor copy = current.clone();
    write_into(static_cast<char*>(copy.data));
    ctx.count_state_bytes(copy.nbytes(), written);
    ctx.replace_state(state_input, std::move(copy));
  });
}

void register_gather_kernels(KernelRegistry& registry) {
  // Gathers copy elements as bytes; scatters combine them with dispatch_all.
  registry.add("gather", kAnyDType, gather);
  registry.add("gather_along_axis", kAnyDType, gather_along_axis);
  registry.add("gather_nd", kAnyDType, gather_nd);
  registry.add("scatter", kPlainDTypes, scatter);
  registry.add("scatter_along_axis", kPlainDTypes, scatter_along_axis);
  registry.add("scatter_nd", kPlainDTypes, scatter_nd);
}

}  // namespace coremlrt::ops
