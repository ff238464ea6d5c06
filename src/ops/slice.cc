// slice_by_index, slice_by_size and slice_update (docs/design/coreml-format.md, "Tensor transformations"). A
// slice is a strided view of x, so the kernels are one strided copy each.
#include <algorithm>
#include <cstring>

#include "ops/register.h"
#include "ops/state_update.h"
#include "ops/strided.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

struct SliceMasks {
  std::vector<int64_t> stride;  // empty: all 1
  std::vector<bool> begin_mask, end_mask, squeeze_mask;  // empty: all false
};

SliceMasks read_masks(const KernelBuilder& b) {
  return {b.const_ints("stride", std::vector<int64_t>{}), b.const_bools("begin_mask", std::vector<bool>{}),
          b.const_bools("end_mask", std::vector<bool>{}), b.const_bools("squeeze_mask", std::vector<bool>{})};
}

struct Slice {
  StridedView view;  // into x, one stride per dim of x
  Shape shape;       // selected extent per dim of x (1 for squeezed dims)
  Shape out_shape;   // without the squeezed dims
};

// Python slicing x[b0:e0:s0, ...]: negative begin/end count from the end and are clamped;
// a masked begin/end means "from the start"/"to the end" in the stride's direction; a
// squeezed dim takes the single element begin[i].
Slice resolve_slice(const KernelContext& ctx, const Shape& x, const std::vector<int64_t>& begin,
                    const std::vector<int64_t>& end, const SliceMasks& m) {
  const size_t rank = x.size();
  auto sized = [&](size_t n, const char* what) {
    if (n != 0 && n != rank) ctx.fail(what, " has ", n, " entries; x has rank ", rank);
  };
  sized(begin.size(), "begin");
  sized(end.size(), "end");
  sized(m.stride.size(), "stride");
  sized(m.begin_mask.size(), "begin_mask");
  sized(m.end_mask.size(), "end_mask");
  sized(m.squeeze_mask.size(), "squeeze_mask");
  auto flag = [](const std::vector<bool>& v, size_t d) { return !v.empty() && v[d]; };
  Slice s;
  s.view = contiguous_view(x);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t size = x[d];
    const int64_t step = m.stride.empty() ? 1 : m.stride[d];
    int64_t b = begin.empty() ? 0 : begin[d], e = end.empty() ? size : end[d];
    int64_t count;
    if (flag(m.squeeze_mask, d)) {
      if (b < 0) b += size;
      if (b < 0 || b >= size) ctx.fail("squeezed index ", begin[d], " is out of range for dim ", d, " of size ", size);
      count = 1;
    } else if (step == 0) {
      ctx.fail("stride of dim ", d, " is 0");
    } else if (step > 0) {
      auto clamp = [&](int64_t v) { return v < 0 ? std::max<int64_t>(v + size, 0) : std::min(v, size); };
      b = flag(m.begin_mask, d) ? 0 : clamp(b);
      e = flag(m.end_mask, d) ? size : clamp(e);
      count = e > b ? (e - b + step - 1) / step : 0;
    } else {  // stepping backwards: valid positions are size-1 down to -1 (exclusive end)
      auto clamp = [&](int64_t v) { return v < 0 ? std::max<int64_t>(v + size, -1) : std::min(v, size - 1); };
      b = flag(m.begin_mask, d) ? size - 1 : clamp(b);
      e = flag(m.end_mask, d) ? -1 : clamp(e);
      count = b > e ? (b - e - step - 1) / -step : 0;
    }
    if (count > 0) s.view.offset += b * s.view.strides[d];
    if (!flag(m.squeeze_mask, d)) {
      s.view.strides[d] *= step;
      s.out_shape.push_back(count);
    }
    s.shape.push_back(count);
  }
  return s;
}

// Whether the selected elements are one run of x's memory, in order: every dim that selects
// more than one element steps as a contiguous tensor of the selected shape would.
bool one_run(const Slice& s) {
  int64_t expected = 1;
  for (size_t d = s.shape.size(); d-- > 0;) {
    if (s.shape[d] == 0) return false;
    if (s.shape[d] == 1) continue;
    if (s.view.strides[d] != expected) return false;
    expected *= s.shape[d];
  }
  return true;
}

std::unique_ptr<Kernel> slice_by_index(KernelBuilder& b) {
  const int x = b.input("x"), begin = b.optional_input("begin"), end = b.optional_input("end");
  const SliceMasks masks = read_masks(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const Slice s = resolve_slice(ctx, in.shape, begin < 0 ? std::vector<int64_t>{} : read_ints(ctx.input(begin)),
                                  end < 0 ? std::vector<int64_t>{} : read_ints(ctx.input(end)), masks);
    if (in.dtype != DType::String && one_run(s)) {
      // A view of x, as reshape gives one (misc.cc): a decode step's per-layer block of its
      // KV cache is read where the state holds it rather than copied out first.
      Tensor view = in;
      view.shape = s.out_shape;
      view.data = static_cast<char*>(in.data) + s.view.offset * static_cast<int64_t>(dtype_size(in.dtype));
      return ctx.set_output(0, std::move(view));
    }
    Tensor& out = ctx.allocate_output(0, in.dtype, s.out_shape);
    copy_strided(dtype_size(in.dtype), s.shape, in.data, s.view, out.data, contiguous_view(s.shape));
  });
}

std::unique_ptr<Kernel> slice_by_size(KernelBuilder& b) {
  const int x = b.input("x"), begin = b.input("begin"), size = b.input("size");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const std::vector<int64_t> bv = read_ints(ctx.input(begin)), sv = read_ints(ctx.input(size));
    if (bv.size() != in.shape.size() || sv.size() != in.shape.size())
      ctx.fail("begin and size need ", in.rank(), " entries; got ", bv.size(), " and ", sv.size());
    StridedView view = contiguous_view(in.shape);
    Shape shape;
    for (size_t d = 0; d < in.shape.size(); ++d) {
      const int64_t dim = in.shape[d];
      const int64_t start = bv[d] < 0 ? bv[d] + dim : bv[d];
      const int64_t count = sv[d] == -1 ? dim - start : sv[d];
      if (start < 0 || count < 0 || start + count > dim)
        ctx.fail("slice [", bv[d], ", size ", sv[d], "] is out of range for dim ", d, " of size ", dim);
      view.offset += start * view.strides[d];
      shape.push_back(count);
    }
    copy_view(in, view, ctx.allocate_output(0, in.dtype, shape));
  });
}

// x with the slice (same rules as slice_by_index) replaced by update.
std::unique_ptr<Kernel> slice_update(KernelBuilder& b) {
  const int x = b.input("x"), update = b.input("update"), begin = b.input("begin"), end = b.input("end");
  const SliceMasks masks = read_masks(b);
  b.check(b.input_type("x").dtype == b.input_type("update").dtype, "x and update must have the same dtype");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    const Tensor& up = ctx.input(update);
    const Slice s = resolve_slice(ctx, in.shape, read_ints(ctx.input(begin)), read_ints(ctx.input(end)), masks);
    if (up.shape != s.out_shape && up.shape != s.shape)
      ctx.fail("update has shape ", shape_str(up.shape), " but the slice has shape ", shape_str(s.out_shape));
    Tensor& out = ctx.allocate_output(0, in.dtype, in.shape);
    if (in.nbytes()) std::memcpy(out.data, in.data, in.nbytes());
    copy_strided(dtype_size(in.dtype), s.shape, up.data, contiguous_view(s.shape), out.data, s.view);
  });
}

}  // namespace

std::unique_ptr<Kernel> in_place_state_slice_update(KernelBuilder& b, int state_input) {
  const int update = b.input("update"), begin = b.input("begin"), end = b.input("end");
  const SliceMasks masks = read_masks(b);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& current = ctx.input(state_input);
    const Tensor& up = ctx.input(update);
    const Slice s = resolve_slice(ctx, current.shape, read_ints(ctx.input(begin)), read_ints(ctx.input(end)), masks);
    if (up.shape != s.out_shape && up.shape != s.shape)
      ctx.fail("update has shape ", shape_str(up.shape), " but the slice has shape ", shape_str(s.out_shape));
    const size_t elem = dtype_size(current.dtype);
    const StridedView packed = contiguous_view(s.shape);
    // The update in the state's dtype, contiguous.
    Tensor rounded;
    const void* source = up.data;
    if (up.dtype != current.dtype) {
      if (up.dtype != DType::Float32 || current.dtype != DType::Float16)
        ctx.fail("writes a ", dtype_name(up.dtype), " update into a state of ", dtype_name(current.dtype));
      rounded = Tensor::empty(DType::Float16, up.shape);
      float_to_half(up.ptr<float>(), rounded.ptr<half>(), up.numel());
      source = rounded.data;
    }
    const size_t written = static_cast<size_t>(shape_numel(s.shape)) * elem;
    if (Tensor* target = ctx.writable_state(state_input)) {
      // Keep what the update overwrites, to put it back if the prediction fails.
      Tensor saved = Tensor::empty(current.dtype, s.shape);
      copy_strided(elem, s.shape, target->data, s.view, saved.data, packed);
      ctx.on_failure(state_input, [data = target->data, saved, s, elem, packed] {
        copy_strided(elem, s.shape, saved.data, packed, data, s.view);
      });
      copy_strided(elem, s.shape, source, packed, target->data, s.view);
      ctx.count_state_bytes(written, written);
      return;
    }
    // Something else still views the state's buffer: the new value is a copy.
    Tensor copy = current.clone();
    copy_strided(elem, s.shape, source, packed, copy.data, s.view);
    ctx.count_state_bytes(copy.nbytes(), written);
    ctx.replace_state(state_input, std::move(copy));
  });
}

void register_slice_kernels(KernelRegistry& registry) {
  registry.add("slice_by_index", kAnyDType, slice_by_index);
  registry.add("slice_by_size", kAnyDType, slice_by_size);
  registry.add("slice_update", kAnyDType, slice_update, 18);
}

}  // namespace coremlrt::ops
