#pragma once
// Reading packed constants (src/ir/packed.h): the decoders that turn codes into values, for
// the kernels that read weights packed (linear, matmul, conv, gather through gemm.h's
// MatrixView) and for the planner when a reader needs the dense tensor
// (docs/design/compressed-weights.md).
//
// Every decoder gives exactly the values the constexpr_* kernels of src/ops/constexpr.cc
// compute when they fold the same op at load: the same operations in the same order, each
// rounded to fp16 where those kernels round (tests/cpp/ops/packed_weight_test.cc checks every
// form against a plain element-by-element decoder, and tests/python/ops/test_packed_weights.py
// against the folded constexpr ops).
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coremlrt/tensor.h"
#include "ir/packed.h"

namespace coremlrt::ops {

// Throws Error when the arrays of `t` do not hold what its shapes and map promise (too few
// codes, a mask whose set bits are not `nonzero`, groups that do not divide the shape, a
// palette that does not cover every code...). Run once at load, so decoders never check.
void check_packed(const ir::PackedTensor& t);

// The values of `t` as a new dense tensor of t.dtype and t.value_shape() (the folded constant).
// Integer values (a sub-byte constant) take one byte each, int4 sign-extended.
Tensor decode_dense(const ir::PackedTensor& t);
// The same values written into `out`, which must have t.dtype and t.value_shape() (memory the
// caller chose: a file mapping, src/format/blob_file.h's BlobFile::spill).
void decode_dense_into(const ir::PackedTensor& t, const Tensor& out);

// The same values, decoded element by element with the plain loop (the tests' reference).
Tensor decode_dense_each(const ir::PackedTensor& t);

// A packed tensor of rank >= 2 read as a matrix [rows, cols]: row r is the flattened
// dense[r, ...] (rows = shape[0], cols = the product of the other dims), as linear's weight
// [D_out, D_in], conv's [C_out, C_in/groups * kernel] or an embedding table [V, D] are read.
class PackedMatrix {
 public:
  // Whether `t` can be read by rows; when it cannot, `why_not` (if given) receives why (a block
  // that splits a dim past the second, a vector of nonzero values, an integer dtype).
  static bool readable(const ir::PackedTensor& t, std::string* why_not = nullptr);
  explicit PackedMatrix(std::shared_ptr<const ir::PackedTensor> t);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  DType dtype() const { return t_->dtype; }
  const ir::PackedTensor& tensor() const { return *t_; }

  // Values of rows [r0, r0 + nr) and columns [c0, c0 + nc), stored row-major at dst with
  // leading dimension ld. The half version needs dtype() fp16 (its values are exact then).
  void decode(int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* dst, int64_t ld) const;
  void decode(int64_t r0, int64_t nr, int64_t c0, int64_t nc, half* dst, int64_t ld) const;

  // c[j] += the dot product of row r0 + j (columns [c0, c0 + nc)) with a[0, nc), for j < nr:
  // one row of A times W^T with the codes decoded in registers, no panel written
  // (packed_codes.h, dot_simd). False, with c untouched, when this CPU or this form has no such
  // loop. Sums run in another order than the panel path's: results differ from the folded
  // weight's by float rounding.
  bool dot_rows(int64_t r0, int64_t nr, int64_t c0, int64_t nc, const float* a, float* c) const;
  // Whether dot_rows takes whole rows of `t` on this CPU (for the backends' cost rules).
  static bool decodes_in_registers(const ir::PackedTensor& t);

 private:
  template <class Out>
  void decode_rows(int64_t r0, int64_t nr, int64_t c0, int64_t nc, Out* dst, int64_t ld) const;

  std::shared_ptr<const ir::PackedTensor> t_;
  int64_t rows_ = 0, cols_ = 0;
  int64_t row_block_ = 1;   // rows per group row
  int64_t col_groups_ = 1;  // groups along a row
  int64_t col_block_ = 1;   // columns per group
  std::vector<int64_t> row_codes_;  // sparse: index of each row's first code
  // 4-bit codes: whether every group's table is computed in registers (packed_codes.h,
  // rounded_groups_everywhere), found by the first dot_rows rather than at load, where it would
  // read every scale of a large model.
  mutable std::once_flag groups_checked_once_;
  mutable bool groups_checked_ = false;
};

}  // namespace coremlrt::ops
