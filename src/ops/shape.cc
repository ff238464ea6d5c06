// Shape and layout ops (docs/design/coreml-format.md, "Tensor operations", "Tensor transformations"): reshape
// and friends, transpose, reverse, concat/split/stack, tile, pad. Everything here moves data without looking
// at it, so kernels work on any dtype by element size; reshape-like ops return views (no copy).
#include <algorithm>
#include <cstring>

#include "ops/register.h"
#include "ops/strided.h"
#include "ops/util.h"

namespace coremlrt::ops {

// Defined in the other files of this family (slice.cc, tensor_ops.cc, space.cc).

namespace {

// The shape `target` asks for, with 0 and -1 resolved. iOS15/16 copy x's dim for a 0 only
// when the ranks match; iOS17+ match 0s against x's dims counted from the right (1 if none).
Shape resolve_reshape(const KernelContext& ctx, const Shape& in, Shape t, bool right_aligned_zeros) {
  const int64_t k = static_cast<int64_t>(t.size()), rank = static_cast<int64_t>(in.size());
  int64_t infer = -1;
  for (int64_t i = 0; i < k; ++i) {
    if (t[i] == 0) {
      if (right_aligned_zeros) {
        const int64_t j = rank - (k - i);
        t[i] = j >= 0 ? in[j] : 1;
      } else {
        if (k != rank) ctx.fail("shape ", shape_str(t), " has a 0 but its length differs from x's rank ", rank);
        t[i] = in[i];
      }
    } else if (t[i] == -1) {
      if (infer >= 0) ctx.fail("shape ", shape_str(t), " has more than one -1");
      infer = i;
    } else if (t[i] < 0) {
      ctx.fail("shape ", shape_str(t), " has a negative dimension");
    }
  }
  const int64_t numel = shape_numel(in);
  if (infer >= 0) {
    t[infer] = 1;
    const int64_t known = shape_numel(t);
    if (known == 0 ? numel != 0 : numel % known != 0)
      ctx.fail("cannot reshape ", shape_str(in), " to ", shape_str(t), " with one inferred dim");
    t[infer] = known == 0 ? 0 : numel / known;
  }
  if (shape_numel(t) != numel) ctx.fail("cannot reshape ", shape_str(in), " (", numel, " elements) to ", shape_str(t));
  return t;
}

KernelFactory reshape_factory(bool right_aligned_zeros) {
  return [right_aligned_zeros](KernelBuilder& b) {
    const int x = b.input("x"), shape = b.input("shape");
    return make_kernel([=](KernelContext& ctx) {
      const Tensor& in = ctx.input(x);
      ctx.set_output(0, in.reshaped(resolve_reshape(ctx, in.shape, read_ints(ctx.input(shape)), right_aligned_zeros)));
    });
  };
}

// Sorted, normalized axes; duplicates are an error.
std::vector<int64_t> normalized_axes(const KernelContext& ctx, std::vector<int64_t> axes, int64_t rank) {
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) ctx.fail("axis ", a, " is out of range for rank ", rank);
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) ctx.fail("repeated axis");
  return axes;
}

std::unique_ptr<Kernel> expand_dims(KernelBuilder& b) {
  const int x = b.input("x");
  const std::vector<int64_t> axes = b.const_ints("axes");
  b.check(!axes.empty(), "axes must not be empty");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const int64_t out_rank = in.rank() + static_cast<int64_t>(axes.size());
    std::vector<int64_t> sorted = normalized_axes(ctx, axes, out_rank);
    Shape shape;
    size_t next_axis = 0, next_in = 0;
    for (int64_t d = 0; d < out_rank; ++d) {
      if (next_axis < sorted.size() && sorted[next_axis] == d) {
        shape.push_back(1);
        ++next_axis;
      } else {
        shape.push_back(in.shape[next_in++]);
      }
    }
    ctx.set_output(0, in.reshaped(std::move(shape)));
  });
}

std::unique_ptr<Kernel> squeeze(KernelBuilder& b) {
  const int x = b.input("x");
  const bool all = !b.has("axes");
  const std::vector<int64_t> axes = b.const_ints("axes", std::vector<int64_t>{});
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    std::vector<bool> drop(in.shape.size(), all);
    for (int64_t a : normalized_axes(ctx, axes, in.rank())) drop[a] = true;
    Shape shape;
    // Listed axes whose size is not 1 stay (PyTorch behaviour, which Core ML follows).
    for (size_t d = 0; d < in.shape.size(); ++d)
      if (!drop[d] || in.shape[d] != 1) shape.push_back(in.shape[d]);
    ctx.set_output(0, in.reshaped(std::move(shape)));
  });
}

std::unique_ptr<Kernel> flatten2d(KernelBuilder& b) {
  const int x = b.input("x");
  const int64_t axis = b.const_int("axis", 1);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const int64_t rank = in.rank();
    if (axis < -rank || axis > rank) ctx.fail("axis ", axis, " is out of range for rank ", rank);
    const int64_t a = axis < 0 ? axis + rank : axis;
    const int64_t outer = shape_numel(Shape(in.shape.begin(), in.shape.begin() + a));
    ctx.set_output(0, in.reshaped({outer, outer == 0 ? 0 : in.numel() / outer}));
  });
}

std::unique_ptr<Kernel> shape_op(KernelBuilder& b) {
  const int x = b.input("x");
  const DType dtype = b.output_type(0).dtype;
  b.check(dtype == DType::Int32 || dtype == DType::Int64, "output must be int32, not ", dtype_name(dtype));
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    Tensor& out = ctx.allocate_output(0, dtype, {in.rank()});
    for (int64_t d = 0; d < in.rank(); ++d) {
      if (dtype == DType::Int32) out.ptr<int32_t>()[d] = static_cast<int32_t>(in.shape[d]);
      else out.ptr<int64_t>()[d] = in.shape[d];
    }
  });
}

// Output shape = concat over i of ref_i.shape[begins[i]:ends[i]] (to the end when end_masks[i]).
// begins/ends/end_masks are tuples of scalar constants: one binding per element.
std::unique_ptr<Kernel> reshape_like(KernelBuilder& b) {
  const int x = b.input("x");
  const std::vector<int> refs = b.variadic_input("ref_tensors"), begins = b.variadic_input("begins"),
                         ends = b.variadic_input("ends"), masks = b.variadic_input("end_masks");
  b.check(begins.size() == refs.size() && ends.size() == refs.size() && masks.size() == refs.size(),
          "ref_tensors, begins, ends and end_masks must have the same length");
  return make_kernel([=](KernelContext& ctx) {
    Shape shape;
    for (size_t i = 0; i < refs.size(); ++i) {
      const Shape& ref = ctx.input(refs[i]).shape;
      const int64_t rank = static_cast<int64_t>(ref.size());
      int64_t begin = read_ints(ctx.input(begins[i]))[0], end = read_ints(ctx.input(ends[i]))[0];
      if (read_ints(ctx.input(masks[i]))[0]) end = rank;
      if (begin < 0) begin += rank;
      if (end < 0) end += rank;
      if (begin < 0 || end > rank || begin > end) ctx.fail("ref_tensors[", i, "]: range [", begin, ", ", end, ") is out of bounds for rank ", rank);
      shape.insert(shape.end(), ref.begin() + begin, ref.begin() + end);
    }
    const Tensor& in = ctx.input(x);
    if (shape_numel(shape) != in.numel()) ctx.fail("cannot reshape ", shape_str(in.shape), " to ", shape_str(shape));
    ctx.set_output(0, in.reshaped(std::move(shape)));
  });
}

std::unique_ptr<Kernel> transpose(KernelBuilder& b) {
  const int x = b.input("x");
  const std::vector<int64_t> perm = b.const_ints("perm");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    if (static_cast<int64_t>(perm.size()) != in.rank()) ctx.fail("perm has ", perm.size(), " entries for rank ", in.rank());
    std::vector<int64_t> p = perm;
    std::vector<bool> seen(p.size(), false);
    Shape shape;
    for (int64_t& a : p) {
      a = a < 0 ? a + in.rank() : a;
      if (a < 0 || a >= in.rank() || seen[a]) ctx.fail("perm ", shape_str(perm), " is not a permutation");
      seen[a] = true;
      shape.push_back(in.shape[a]);
    }
    permute_copy(in, in.shape, p, ctx.allocate_output(0, in.dtype, shape));
  });
}

std::unique_ptr<Kernel> reverse(KernelBuilder& b) {
  const int x = b.input("x");
  const bool all = !b.has("axes");
  const std::vector<int64_t> axes = b.const_ints("axes", std::vector<int64_t>{});
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    StridedView view = contiguous_view(in.shape);
    std::vector<int64_t> flip = all ? std::vector<int64_t>() : normalized_axes(ctx, axes, in.rank());
    if (all)
      for (int64_t d = 0; d < in.rank(); ++d) flip.push_back(d);
    for (int64_t d : flip) {
      if (in.shape[d] == 0) continue;
      view.offset += (in.shape[d] - 1) * view.strides[d];
      view.strides[d] = -view.strides[d];
    }
    copy_view(in, view, ctx.allocate_output(0, in.dtype, in.shape));
  });
}

// For each batch b, reverses the first lengths[b] entries along seq_axis; the rest stay.
std::unique_ptr<Kernel> reverse_sequence(KernelBuilder& b) {
  const int x = b.input("x"), lengths = b.input("lengths");
  const int64_t seq_axis = b.const_int("seq_axis", 0), batch_axis = b.const_int("batch_axis", 0);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const int64_t s = normalize_axis(seq_axis, in.rank()), ba = normalize_axis(batch_axis, in.rank());
    if (s == ba) ctx.fail("seq_axis and batch_axis must differ");
    const std::vector<int64_t> lens = read_ints(ctx.input(lengths));
    if (static_cast<int64_t>(lens.size()) != in.shape[ba])
      ctx.fail("lengths has ", lens.size(), " entries but the batch axis has size ", in.shape[ba]);
    Tensor& out = ctx.allocate_output(0, in.dtype, in.shape);
    if (in.nbytes()) std::memcpy(out.data, in.data, in.nbytes());
    // One strided copy per (batch, position) moves a whole slab of the remaining dims.
    Shape slab = in.shape;
    slab[s] = slab[ba] = 1;
    const std::vector<int64_t> strides = contiguous_strides(in.shape);
    for (int64_t bi = 0; bi < in.shape[ba]; ++bi) {
      if (lens[bi] < 0 || lens[bi] > in.shape[s]) ctx.fail("lengths[", bi, "] = ", lens[bi], " is out of range [0, ", in.shape[s], "]");
      for (int64_t i = 0; i < lens[bi]; ++i)
        copy_strided(dtype_size(in.dtype), slab, in.data, {bi * strides[ba] + (lens[bi] - 1 - i) * strides[s], strides},
                     out.data, {bi * strides[ba] + i * strides[s], strides});
    }
  });
}

std::unique_ptr<Kernel> concat(KernelBuilder& b) {
  const std::vector<int> values = b.variadic_input("values");
  const int64_t axis = b.const_int("axis");
  const bool interleave = b.const_bool("interleave", false);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& first = ctx.input(values[0]);
    // Scalars concatenate as one-element vectors.
    const Shape base = first.rank() == 0 ? Shape{1} : first.shape;
    const int64_t rank = static_cast<int64_t>(base.size());
    const int64_t a = normalize_axis(axis, rank);
    Shape shape = base;
    shape[a] = 0;
    for (int v : values) {
      const Tensor& t = ctx.input(v);
      const Shape s = t.rank() == 0 ? Shape{1} : t.shape;
      bool ok = t.dtype == first.dtype && s.size() == base.size();
      for (int64_t d = 0; ok && d < rank; ++d) ok = d == a ? (!interleave || s[d] == base[d]) : s[d] == base[d];
      if (!ok) ctx.fail("values have incompatible shapes or dtypes: ", shape_str(base), " ", dtype_name(first.dtype), " vs ",
                        shape_str(s), " ", dtype_name(t.dtype), interleave ? " (interleave needs equal shapes)" : "");
      shape[a] += s[a];
    }
    Tensor& out = ctx.allocate_output(0, first.dtype, shape);
    const std::vector<int64_t> out_strides = contiguous_strides(shape);
    int64_t position = 0;
    for (size_t k = 0; k < values.size(); ++k) {
      const Tensor& t = ctx.input(values[k]);
      const Shape s = t.rank() == 0 ? Shape{1} : t.shape;
      StridedView to{0, out_strides};
      if (interleave) {  // slice j of value k goes to position j * n + k
        to.offset = static_cast<int64_t>(k) * out_strides[a];
        to.strides[a] *= static_cast<int64_t>(values.size());
      } else {
        to.offset = position * out_strides[a];
        position += s[a];
      }
      copy_strided(dtype_size(t.dtype), s, t.data, contiguous_view(s), out.data, to);
    }
  });
}

std::unique_ptr<Kernel> split(KernelBuilder& b) {
  const int x = b.input("x");
  const int64_t axis = b.const_int("axis");
  const int64_t count = static_cast<int64_t>(b.op().outputs.size());
  std::vector<int64_t> sizes = b.const_ints("split_sizes", std::vector<int64_t>{});
  const int64_t num_splits = b.const_int("num_splits", sizes.empty() ? count : static_cast<int64_t>(sizes.size()));
  b.check(sizes.empty() || static_cast<int64_t>(sizes.size()) == count, "split_sizes has ", sizes.size(),
          " entries for ", count, " outputs");
  b.check(num_splits == count, "num_splits is ", num_splits, " but the op has ", count, " outputs");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const int64_t a = normalize_axis(axis, in.rank());
    const int64_t dim = in.shape[a];
    std::vector<int64_t> parts = sizes;
    if (parts.empty()) {
      if (dim % count != 0) ctx.fail("axis size ", dim, " does not split evenly into ", count, " parts");
      parts.assign(count, dim / count);
    }
    int64_t total = 0, infer = -1;
    for (int64_t i = 0; i < count; ++i) {
      if (parts[i] == -1 && infer < 0) infer = i;
      else if (parts[i] < 0) ctx.fail("invalid split size ", parts[i]);
      else total += parts[i];
    }
    if (infer >= 0) parts[infer] = dim - total, total = dim;
    if (total != dim || (infer >= 0 && parts[infer] < 0))
      ctx.fail("split sizes ", shape_str(parts), " do not add up to the axis size ", dim);
    const std::vector<int64_t> strides = contiguous_strides(in.shape);
    const int64_t outer = shape_numel(Shape(in.shape.begin(), in.shape.begin() + a));
    int64_t position = 0;
    for (int64_t i = 0; i < count; ++i) {
      Shape shape = in.shape;
      shape[a] = parts[i];
      if (outer == 1) {  // each part is one contiguous run of x: share x's storage
        Tensor view = in;
        view.shape = shape;
        view.data = static_cast<char*>(in.data) + position * strides[a] * dtype_size(in.dtype);
        ctx.set_output(static_cast<int>(i), std::move(view));
      } else {
        copy_view(in, {position * strides[a], strides}, ctx.allocate_output(static_cast<int>(i), in.dtype, shape));
      }
      position += parts[i];
    }
  });
}

std::unique_ptr<Kernel> stack(KernelBuilder& b) {
  const std::vector<int> values = b.variadic_input("values");
  const int64_t axis = b.const_int("axis");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& first = ctx.input(values[0]);
    const int64_t a = normalize_axis(axis, first.rank() + 1);
    Shape shape = first.shape;
    shape.insert(shape.begin() + a, static_cast<int64_t>(values.size()));
    Tensor& out = ctx.allocate_output(0, first.dtype, shape);
    const std::vector<int64_t> strides = contiguous_strides(shape);
    Shape slab = first.shape;
    slab.insert(slab.begin() + a, 1);
    for (size_t k = 0; k < values.size(); ++k) {
      const Tensor& t = ctx.input(values[k]);
      if (t.shape != first.shape || t.dtype != first.dtype)
        ctx.fail("values[", k, "] is ", dtype_name(t.dtype), " ", shape_str(t.shape), " but values[0] is ",
                 dtype_name(first.dtype), " ", shape_str(first.shape));
      copy_strided(dtype_size(t.dtype), slab, t.data, contiguous_view(slab), out.data,
                   {static_cast<int64_t>(k) * strides[a], strides});
    }
  });
}

std::unique_ptr<Kernel> tile(KernelBuilder& b) {
  const int x = b.input("x"), reps = b.input("reps");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    std::vector<int64_t> r = read_ints(ctx.input(reps));
    // Like np.tile: the shorter of reps and x's shape is padded with leading 1s.
    Shape in_shape = in.shape;
    while (in_shape.size() < r.size()) in_shape.insert(in_shape.begin(), 1);
    while (r.size() < in_shape.size()) r.insert(r.begin(), 1);
    std::vector<std::vector<int64_t>> index(r.size());
    Shape shape;
    for (size_t d = 0; d < r.size(); ++d) {
      if (r[d] < 0) ctx.fail("reps ", shape_str(r), " has a negative entry");
      shape.push_back(in_shape[d] * r[d]);
      for (int64_t i = 0; i < shape[d]; ++i) index[d].push_back(i % in_shape[d]);
    }
    gather_axes(in.reshaped(in_shape), index, ctx.allocate_output(0, in.dtype, shape));
  });
}

// pad lists (before, after) pairs for the last len(pad)/2 dims, outermost first.
std::unique_ptr<Kernel> pad(KernelBuilder& b) {
  const int x = b.input("x"), pad_input = b.input("pad");
  const std::string mode = b.const_string("mode", "constant");
  b.check(mode == "constant" || mode == "reflect" || mode == "replicate", "unknown mode '", mode, "'");
  const double constant = b.const_float("constant_val", 0.0);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const std::vector<int64_t> p = read_ints(ctx.input(pad_input));
    const int64_t rank = in.rank(), n = static_cast<int64_t>(p.size()) / 2;
    if (p.size() % 2 || n > rank) ctx.fail("pad has ", p.size(), " entries; expected an even count up to ", 2 * rank);
    std::vector<int64_t> before(rank, 0), after(rank, 0);
    Shape shape = in.shape;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t d = rank - n + i;
      before[d] = p[2 * i];
      after[d] = p[2 * i + 1];
      if (before[d] < 0 || after[d] < 0) ctx.fail("negative padding ", shape_str(p), " is not supported");
      if (mode == "reflect" && (before[d] >= in.shape[d] || after[d] >= in.shape[d]))
        ctx.fail("reflect padding of dim ", d, " must be smaller than its size ", in.shape[d]);
      if (mode == "replicate" && in.shape[d] == 0 && before[d] + after[d] > 0) ctx.fail("cannot replicate an empty dim");
      shape[d] += before[d] + after[d];
    }
    Tensor& out = ctx.allocate_output(0, in.dtype, shape);
    if (mode == "constant") {
      fill_value(out, constant);
      StridedView to = contiguous_view(shape);
      for (int64_t d = 0; d < rank; ++d) to.offset += before[d] * to.strides[d];
      copy_strided(dtype_size(in.dtype), in.shape, in.data, contiguous_view(in.shape), out.data, to);
      return;
    }
    std::vector<std::vector<int64_t>> index(rank);
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t size = in.shape[d];
      for (int64_t o = 0; o < shape[d]; ++o) {
        int64_t i = o - before[d];
        if (mode == "reflect") i = i < 0 ? -i : (i >= size ? 2 * (size - 1) - i : i);  // edge not repeated
        else i = std::clamp<int64_t>(i, 0, size - 1);
        index[d].push_back(i);
      }
    }
    gather_axes(in, index, out);
  });
}

}  // namespace

void register_shape_kernels(KernelRegistry& registry) {
  // Views and byte copies: any dtype. pad fills its constant through dispatch_all.
  registry.add("reshape", kAnyDType, reshape_factory(false), 15, 16);
  registry.add("reshape", kAnyDType, reshape_factory(true), 17);
  registry.add("expand_dims", kAnyDType, expand_dims);
  registry.add("squeeze", kAnyDType, squeeze);
  registry.add("flatten2d", kAnyDType, flatten2d);
  registry.add("shape", kAnyDType, shape_op);
  registry.add("reshape_like", kAnyDType, reshape_like, 16);
  registry.add("transpose", kAnyDType, transpose);
  registry.add("reverse", kAnyDType, reverse);
  registry.add("reverse_sequence", kAnyDType, reverse_sequence);
  registry.add("concat", kAnyDType, concat);
  registry.add("split", kAnyDType, split);
  registry.add("stack", kAnyDType, stack);
  registry.add("tile", kAnyDType, tile);
  registry.add("pad", kPlainDTypes, pad);
}

}  // namespace coremlrt::ops
