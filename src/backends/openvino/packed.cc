// Compressed weights (src/ir/packed.h) in OpenVINO regions (docs/design/compressed-weights.md).
//
// Affine weights (int8, uint8, int4, uint4 codes with a scale and an offset per channel or per
// block: constexpr_affine_dequantize, constexpr_blockwise_shift_scale) are lowered to the
// weight-decompression pattern that OpenVINO's own compressed models use,
//   Constant(codes) -> Convert -> Subtract(offset) -> Multiply(scale) [-> Reshape] [-> Convert],
// which the CPU plugin fuses into its matrix kernels: the codes stay packed in the compiled
// model. Blocks along a dim become a split of that dim ([N, K] with blocks of 32 along K is
// read as [N, K / 32, 32] with scales [N, K / 32, 1]). OpenVINO has no kernels for palettes or
// sparsity: linear and matmul with such weights stay on our kernels, which read them packed.
// A convolution's weight, in any form, is decoded for OpenVINO (region_builder.cc: its lowering
// takes PackedInputs::kDecoded): its convolutions take no compressed weights and repack theirs
// into their own layout in any case. Which ops take which forms is said by each op's lowering
// (OpLowering::packed, lowering.h).
#include <openvino/op/constant.hpp>
#include <openvino/op/convert.hpp>
#include <openvino/op/multiply.hpp>
#include <openvino/op/reshape.hpp>
#include <openvino/op/subtract.hpp>

#include "backends/openvino/lowering.h"
#include "ops/packed_codes.h"
#include "ops/packed_weight.h"

namespace coremlrt::backends::openvino {

namespace {

// The OpenVINO element type of affine codes, when the decompression pattern can read them.
std::optional<ov::element::Type> code_type(const ir::PackedArray& codes) {
  if (codes.bits == 4 && codes.dtype == DType::UInt4) return ov::element::u4;
  if (codes.bits == 4 && codes.dtype == DType::Int4) return ov::element::i4;
  if (codes.bits == 0 && codes.dtype == DType::UInt8) return ov::element::u8;
  if (codes.bits == 0 && codes.dtype == DType::Int8) return ov::element::i8;
  return std::nullopt;
}

bool decompressible(const ir::PackedTensor& p) {
  return (p.map == ir::CodeMap::kAffine || p.map == ir::CodeMap::kShiftScale) && !p.mask.defined() &&
         code_type(p.codes) && p.scale.dtype == p.dtype && fp16_or_fp32(p.dtype);
}

}  // namespace


Verdict packed_support(const OpLowering& lowering, const ir::PackedTensor& packed) {
  if (lowering.packed == PackedInputs::kDecoded) return Verdict::claim();
  if (lowering.packed == PackedInputs::kCompressed && decompressible(packed)) return Verdict::claim();
  return Verdict::refuse("is a weight stored as " + packed.form() +
                         ", which OpenVINO has no kernel for here: our kernels read it packed");
}

bool packed_decompresses(const ir::PackedTensor& packed) { return decompressible(packed); }

Value packed_constant(const ir::PackedTensor& p, ov::element::Type compute, std::vector<Tensor>& kept) {
  COREMLRT_CHECK(decompressible(p), "internal: a ", p.form(), " weight has no decompression pattern");
  const ov::element::Type type = *element_type(p.dtype);
  // Split every dim whose blocks are neither whole nor single elements.
  ov::Shape split, scale_shape;
  bool reshaped = false;
  for (size_t d = 0; d < p.shape.size(); ++d) {
    const auto size = static_cast<size_t>(p.shape[d]), groups = static_cast<size_t>(p.groups[d]);
    if (groups == 1 || groups == size) {
      split.push_back(size);
      scale_shape.push_back(groups);
    } else {
      split.insert(split.end(), {groups, size / groups});
      scale_shape.insert(scale_shape.end(), {groups, 1});
      reshaped = true;
    }
  }
  kept.push_back(p.codes.data);
  Value codes = std::make_shared<ov::op::v0::Constant>(ov::Tensor(*code_type(p.codes), split, p.codes.data.data));
  Value weight = std::make_shared<ov::op::v0::Convert>(codes, type);
  if (p.offset.defined()) {
    // Offsets are few (one per group): their values, in the scale's type.
    std::vector<double> offsets(static_cast<size_t>(p.offset.count));
    for (size_t g = 0; g < offsets.size(); ++g) offsets[g] = ops::packed::array_element(p.offset, static_cast<int64_t>(g));
    weight = std::make_shared<ov::op::v1::Subtract>(weight, std::make_shared<ov::op::v0::Constant>(type, scale_shape, offsets));
  }
  kept.push_back(p.scale);
  weight = std::make_shared<ov::op::v1::Multiply>(
      weight, std::make_shared<ov::op::v0::Constant>(ov::Tensor(type, scale_shape, p.scale.data)));
  if (reshaped) weight = std::make_shared<ov::op::v1::Reshape>(weight, Lowerer::i64s(p.shape), false);
  if (type != compute) weight = std::make_shared<ov::op::v0::Convert>(weight, compute);
  return weight;
}

}  // namespace coremlrt::backends::openvino
