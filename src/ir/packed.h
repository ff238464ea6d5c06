#pragma once
// A constant kept in the compressed form its weight file stores: bit-packed integer codes, a
// palette, a sparsity mask, per-block scales, with the rule that turns codes into values.
// Weights stay in this form from the weight file to the kernels that read them
// (docs/design/compressed-weights.md); the decoders are in src/ops/packed_weight.h.
//
// The arrays are views of the memory-mapped weight file wherever the file holds them; a
// PackedTensor owns no copy of a weight.
#include <cstdint>
#include <string>

#include "coremlrt/tensor.h"

namespace coremlrt::ir {

// Elements of one array of a packed tensor: integers bit-packed LSB-first, `bits` each (1, 2, 3,
// 4 or 6; int4 sign-extended), or plain elements of `dtype` (`bits` 0: int8, uint8, fp16, fp32).
struct PackedArray {
  Tensor data;  // bit-packed: uint8 bytes holding `count` codes; plain: the elements
  DType dtype = DType::UInt8;
  int bits = 0;
  int64_t count = 0;

  bool defined() const { return data.defined(); }
  size_t stored_bytes() const { return data.defined() ? data.nbytes() : 0; }
};

// How a code becomes a value. `g` is the group (block) of the value's dense position.
enum class CodeMap : uint8_t {
  kIdentity,    // the code itself: a sub-byte integer constant, or the float values of a sparse tensor
  kLut,         // table[g][code]                                       (constexpr_lut_to_dense)
  kShiftScale,  // scale[g] * (code - offset[g]) in the scale's dtype   (constexpr_blockwise_shift_scale)
  kAffine,      // scale[g] * (code - offset[g]) in fp32, rounded once  (iOS16 constexpr_affine_dequantize)
};

struct PackedTensor {
  DType dtype = DType::Float32;  // of the values
  Shape shape;                   // of the dense tensor
  PackedArray codes;             // one per dense element, or one per set bit of `mask`, row-major
  // Sparsity: one bit per dense element, LSB-first (uint8 bytes); a set bit takes the next code,
  // a clear one is zero. Undefined for a dense tensor.
  Tensor mask;
  int64_t nonzero = 0;  // set bits of `mask`
  // The value is the vector of the nonzero elements in row-major order ([nonzero]), not the
  // dense tensor: the second output of constexpr_lut_to_sparse and
  // constexpr_sparse_blockwise_shift_scale, which constexpr_sparse_to_dense scatters.
  bool nonzero_only = false;
  CodeMap map = CodeMap::kIdentity;
  // Block grid (rank of `shape`): the block along dim d is shape[d] / groups[d] long. Groups are
  // numbered row-major over this grid.
  Shape groups;
  Tensor table;          // kLut: [group count * palettes] values of `dtype`
  int64_t palettes = 0;  // kLut
  Tensor scale;          // kShiftScale, kAffine: one fp16 or fp32 per group
  PackedArray offset;    // kShiftScale, kAffine: one per group; undefined: no offset

  // The value's shape: `shape`, or [nonzero] for a nonzero_only value.
  Shape value_shape() const { return nonzero_only ? Shape{nonzero} : shape; }
  int64_t group_count() const { return shape_numel(groups); }
  // Bytes of every array (codes, mask, table, scales, offsets): what the weight occupies.
  size_t stored_bytes() const;
  // How it is stored, for reports: "int4, scale per block [1, 32], offset", "uint4 palette of 16
  // per group [16, 1]", "50 % sparse fp16", ...
  std::string form() const;
};

}  // namespace coremlrt::ir
