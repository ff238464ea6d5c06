#pragma once
// Dtype-agnostic data movement shared by the shape, slice, gather and resize kernels.
// Pure data movement never looks at values, so it is dispatched on element size only.
#include <cstdint>
#include <vector>

#include "ops/kernel.h"

namespace coremlrt::ops {

// Where the elements of an n-d index space live in a flat buffer, in elements: index
// (i_0, ..., i_{n-1}) is at offset + sum(i_d * strides[d]). Strides may be 0 or negative.
struct StridedView {
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

// The row-major view of a contiguous tensor of `shape`.
StridedView contiguous_view(const Shape& shape, int64_t offset = 0);

// For every index of `shape`, copies one element of `elem_size` bytes from src[from] to dst[to].
void copy_strided(size_t elem_size, const Shape& shape, const void* src, const StridedView& from, void* dst,
                  const StridedView& to);

// out (contiguous, shape `out_shape`) = x viewed through `view`.
void copy_view(const Tensor& x, const StridedView& view, Tensor& out);

// out = x with its dims reordered: out.shape[i] = x.shape[perm[i]], where x is read as a
// contiguous tensor of `x_shape` (which may differ from x.shape when the element count matches).
void permute_copy(const Tensor& x, const Shape& x_shape, const std::vector<int64_t>& perm, Tensor& out);

// out[o_0, ..., o_{n-1}] = x[index[0][o_0], ..., index[n-1][o_{n-1}]]: a gather with one
// index table per axis (tiling, edge padding, nearest-neighbour resizing).
void gather_axes(const Tensor& x, const std::vector<std::vector<int64_t>>& index, Tensor& out);

// Fills every element of t with the bytes of one element.
void fill_bytes(Tensor& t, const void* element);

// Fills t (any plain dtype) with `value` converted to its dtype.
void fill_value(Tensor& t, double value);

// Values of an integer (or whole-valued float) tensor, read at run time.
std::vector<int64_t> read_ints(const Tensor& t);

// Element `i` of a numeric tensor as double.
double read_double(const Tensor& t, int64_t i);

}  // namespace coremlrt::ops
