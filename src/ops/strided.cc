#include "ops/strided.h"

#include <algorithm>
#include <cstring>

#include "ops/thread_pool.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

template <class Fn>
void dispatch_size(size_t elem_size, Fn&& fn) {
  switch (elem_size) {
    case 1: fn(TypeTag<uint8_t>{}); return;
    case 2: fn(TypeTag<uint16_t>{}); return;
    case 4: fn(TypeTag<uint32_t>{}); return;
    case 8: fn(TypeTag<uint64_t>{}); return;
    default: fail("unsupported element size ", elem_size);
  }
}

struct Dim {
  int64_t size, from, to;
};

// Drops size-1 dims and merges neighbours that are contiguous on both sides, so that
// common cases (slices of whole rows, concats along an outer axis) copy long runs.
std::vector<Dim> coalesce(const Shape& shape, const StridedView& from, const StridedView& to) {
  std::vector<Dim> dims;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    Dim next{shape[d], from.strides[d], to.strides[d]};
    if (!dims.empty() && dims.back().from == next.from * next.size && dims.back().to == next.to * next.size) {
      dims.back() = {dims.back().size * next.size, next.from, next.to};
    } else {
      dims.push_back(next);
    }
  }
  return dims;
}

}  // namespace

StridedView contiguous_view(const Shape& shape, int64_t offset) { return {offset, contiguous_strides(shape)}; }

namespace {

// Copies the index space `dims` (outermost first) from s to o, the innermost dim in one run.
template <class T>
void copy_dims(const std::vector<Dim>& dims, const T* s, T* o) {
  const size_t rank = dims.size();
  const Dim inner = dims.back();
  std::vector<int64_t> index(rank - 1, 0);
  while (true) {
    if (inner.from == 1 && inner.to == 1) {
      std::memcpy(o, s, static_cast<size_t>(inner.size) * sizeof(T));
    } else {
      for (int64_t i = 0; i < inner.size; ++i) o[i * inner.to] = s[i * inner.from];
    }
    size_t d = rank - 1;
    for (; d-- > 0;) {
      s += dims[d].from;
      o += dims[d].to;
      if (++index[d] < dims[d].size) break;
      s -= dims[d].from * dims[d].size;
      o -= dims[d].to * dims[d].size;
      index[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

// Copies of at least twice this many bytes are split along their outermost dim over the
// threads, in ranges of at least this many: one core alone streams memory at a fraction of what
// two do (a decode step slices each layer's 384 KiB of cached keys and values out of a state
// that the weights have pushed out of cache).
constexpr int64_t kParallelCopyBytes = int64_t{1} << 17;

}  // namespace

void copy_strided(size_t elem_size, const Shape& shape, const void* src, const StridedView& from, void* dst,
                  const StridedView& to) {
  const int64_t count = shape_numel(shape);
  if (count == 0) return;
  std::vector<Dim> dims = coalesce(shape, from, to);
  if (dims.empty()) dims.push_back({1, 1, 1});
  // Ranges of the outermost dim write disjoint elements unless some dim writes in place.
  const bool disjoint = std::all_of(dims.begin(), dims.end(), [](const Dim& d) { return d.to != 0; });
  const int64_t bytes = count * static_cast<int64_t>(elem_size);
  dispatch_size(elem_size, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* s = static_cast<const T*>(src) + from.offset;
    T* o = static_cast<T*>(dst) + to.offset;
    const Dim outer = dims.front();
    if (!disjoint || bytes < 2 * kParallelCopyBytes || outer.size < 2 || available_threads() <= 1) {
      copy_dims(dims, s, o);
      return;
    }
    const int64_t bytes_per_index = bytes / outer.size;
    const int64_t grain = std::max<int64_t>(1, kParallelCopyBytes / std::max<int64_t>(1, bytes_per_index));
    parallel_for(outer.size, grain, [&](int64_t begin, int64_t end) {
      std::vector<Dim> part = dims;
      part.front().size = end - begin;
      copy_dims(part, s + begin * outer.from, o + begin * outer.to);
    });
  });
}

void copy_view(const Tensor& x, const StridedView& view, Tensor& out) {
  copy_strided(dtype_size(x.dtype), out.shape, x.data, view, out.data, contiguous_view(out.shape));
}

void permute_copy(const Tensor& x, const Shape& x_shape, const std::vector<int64_t>& perm, Tensor& out) {
  const std::vector<int64_t> in_strides = contiguous_strides(x_shape);
  StridedView view;
  for (int64_t p : perm) view.strides.push_back(in_strides[p]);
  copy_view(x, view, out);
}

void gather_axes(const Tensor& x, const std::vector<std::vector<int64_t>>& index, Tensor& out) {
  const int64_t total = out.numel();
  if (total == 0) return;
  const size_t rank = out.shape.size();
  const std::vector<int64_t> strides = contiguous_strides(x.shape);
  // Per axis, the input offset of each output index, so that the inner loop is a lookup.
  std::vector<std::vector<int64_t>> offsets(rank);
  for (size_t d = 0; d < rank; ++d)
    for (int64_t i : index[d]) offsets[d].push_back(i * strides[d]);
  dispatch_size(dtype_size(x.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* s = x.ptr<T>();
    T* o = out.ptr<T>();
    if (rank == 0) {
      o[0] = s[0];
      return;
    }
    const std::vector<int64_t>& last = offsets[rank - 1];
    const int64_t inner = out.shape[rank - 1];
    std::vector<int64_t> idx(rank, 0);
    int64_t base = 0;
    for (size_t d = 0; d + 1 < rank; ++d) base += offsets[d][0];
    for (int64_t i = 0; i < total; i += inner) {
      for (int64_t j = 0; j < inner; ++j) o[i + j] = s[base + last[j]];
      for (size_t d = rank - 1; d-- > 0;) {
        base -= offsets[d][idx[d]];
        if (++idx[d] < out.shape[d]) {
          base += offsets[d][idx[d]];
          break;
        }
        idx[d] = 0;
        base += offsets[d][0];
      }
    }
  });
}

void fill_bytes(Tensor& t, const void* element) {
  dispatch_size(dtype_size(t.dtype), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T value;
    std::memcpy(&value, element, sizeof(T));
    T* o = t.ptr<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) o[i] = value;
  });
}

void fill_value(Tensor& t, double value) {
  dispatch_all(t.dtype, "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = t.dtype == DType::Bool ? T(value != 0) : static_cast<T>(static_cast<compute_t<T>>(value));
    fill_bytes(t, &v);
  });
}

std::vector<int64_t> read_ints(const Tensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  dispatch_all(t.dtype, "integer parameter", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.ptr<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(static_cast<compute_t<T>>(p[i]));
  });
  return out;
}

double read_double(const Tensor& t, int64_t i) {
  double out = 0;
  dispatch_all(t.dtype, "numeric parameter", [&](auto tag) {
    using T = typename decltype(tag)::type;
    out = static_cast<double>(static_cast<compute_t<T>>(t.ptr<T>()[i]));
  });
  return out;
}

}  // namespace coremlrt::ops
