// Packed forms of the constexpr_* ops (constexpr_packed.h). The semantics are those of the
// folding kernels in constexpr.cc (docs/design/coreml-format.md, "Weight decompression
// (constexpr_*)"); the decoders that apply them are in packed_weight.cc.
#include "ops/constexpr_packed.h"

#include <cstring>

#include "ops/packed_weight.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

// The dtype of unsigned codes `bits` wide.
DType unsigned_codes(int bits) {
  switch (bits) {
    case 1: return DType::UInt1;
    case 2: return DType::UInt2;
    case 3: return DType::UInt3;
    case 4: return DType::UInt4;
    case 6: return DType::UInt6;
    default: return DType::UInt8;
  }
}

bool is_code_dtype(DType d) {
  switch (d) {
    case DType::Int4:
    case DType::UInt1:
    case DType::UInt2:
    case DType::UInt3:
    case DType::UInt4:
    case DType::UInt6:
    case DType::Int8:
    case DType::UInt8: return true;
    default: return false;
  }
}

// The elements of a constant as codes: the stored bits of a packed sub-byte constant, or the
// tensor's own elements (an immediate sub-byte value holds one per byte). nullopt when the
// constant is itself a decoded weight, not plain codes.
std::optional<ir::PackedArray> codes_of(const ir::ConstValue* v) {
  if (!v || v->type.kind != ir::TypeKind::Tensor) return std::nullopt;
  if (v->packed) {
    const ir::PackedTensor& p = *v->packed;
    if (p.map != ir::CodeMap::kIdentity || p.mask.defined()) return std::nullopt;
    return p.codes;
  }
  if (!v->tensor.defined()) return std::nullopt;
  const Tensor flat = v->tensor.reshaped({v->tensor.numel()});
  return ir::PackedArray{flat, v->tensor.dtype, 0, flat.numel()};
}

// iOS18 shift-scale: `scale` (and `offset`, of the same block grid) per block of `t`'s codes.
// False when the offset is not plain codes or does not match the scale's grid.
bool set_shift_scale(ir::PackedTensor& t, const ir::ConstValue& scale, const ir::ConstValue* offset) {
  t.map = ir::CodeMap::kShiftScale;
  t.groups = scale.tensor.shape;
  t.scale = scale.tensor.reshaped({scale.tensor.numel()});
  if (!offset) return true;
  std::optional<ir::PackedArray> offsets = codes_of(offset);
  if (!offsets || offset->tensor.shape != scale.tensor.shape) return false;
  t.offset = *offsets;
  return true;
}

// A mask constant as bits, LSB-first: the stored bits of a packed uint1 constant, or a new
// (small) tensor for one byte per element.
std::optional<Tensor> mask_bits(const ir::ConstValue* v) {
  if (!v || v->type.kind != ir::TypeKind::Tensor) return std::nullopt;
  if (v->packed) {
    const ir::PackedTensor& p = *v->packed;
    if (p.map != ir::CodeMap::kIdentity || p.mask.defined() || p.codes.bits != 1) return std::nullopt;
    return p.codes.data;
  }
  const Tensor& t = v->tensor;
  if (!t.defined() || (t.dtype != DType::UInt1 && t.dtype != DType::Bool && t.dtype != DType::UInt8)) return std::nullopt;
  Tensor bits = Tensor::empty(DType::UInt8, {(t.numel() + 7) / 8});
  std::memset(bits.data, 0, bits.nbytes());
  for (int64_t i = 0; i < t.numel(); ++i)
    if (t.ptr<uint8_t>()[i]) bits.ptr<uint8_t>()[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
  return bits;
}

bool is_float_tensor(const ir::ConstValue* v) {
  return v && !v->packed && v->tensor.defined() && (v->tensor.dtype == DType::Float16 || v->tensor.dtype == DType::Float32);
}

// The op's output `index` as a packed constant, when `t` is well-formed and has the output's
// declared type.
std::shared_ptr<const ir::ConstValue> packed_output(const KernelBuilder& b, int index,
                                                    std::shared_ptr<ir::PackedTensor> t) {
  const ir::ValueType& declared = b.output_type(index);
  if (declared.kind != ir::TypeKind::Tensor || declared.dtype != t->dtype || !declared.is_static() ||
      Shape(declared.dims.begin(), declared.dims.end()) != t->value_shape())
    return nullptr;
  try {
    check_packed(*t);
  } catch (const Error&) {
    return nullptr;  // the folding kernel's checks name what is wrong
  }
  auto out = std::make_shared<ir::ConstValue>();
  out->type = declared;
  out->tensor.dtype = t->dtype;
  out->tensor.shape = t->value_shape();
  out->packed = std::move(t);
  return out;
}

PackedOutputs single(std::shared_ptr<const ir::ConstValue> value) {
  if (!value) return {};
  return {std::move(value)};
}

// A per-group vector of `groups` entries from a scalar or a vector of that length (copied
// only when a scalar has to be repeated).
std::optional<Tensor> per_group(const Tensor& t, int64_t groups) {
  if (t.numel() == groups) return t.reshaped({groups});
  if (t.numel() != 1) return std::nullopt;
  Tensor out = Tensor::empty(t.dtype, {groups});
  const size_t size = dtype_size(t.dtype);
  for (int64_t g = 0; g < groups; ++g)
    std::memcpy(static_cast<char*>(out.data) + g * size, t.data, size);
  return out;
}

}  // namespace

PackedOutputs pack_affine_dequantize(KernelBuilder& b) {
  const ir::ConstValue* q = b.stored_constant("quantized_data");
  const ir::ConstValue* zp = b.constant("zero_point");
  const ir::ConstValue* scale = b.constant("scale");
  if (!q || q->packed || !zp || !scale || !q->tensor.defined() || q->tensor.rank() < 1 ||
      (q->tensor.dtype != DType::Int8 && q->tensor.dtype != DType::UInt8) || !is_float_tensor(scale) ||
      !zp->tensor.defined() || (zp->tensor.dtype != DType::Int8 && zp->tensor.dtype != DType::UInt8 &&
                                zp->tensor.dtype != DType::Float32))
    return {};
  const Tensor& data = q->tensor;
  const int64_t axis = normalize_axis(b.const_int("axis", 0), data.rank());
  const int64_t dim = data.shape[axis];
  const bool per_channel = scale->tensor.numel() != 1 || zp->tensor.numel() != 1;
  const int64_t groups = per_channel ? dim : 1;
  std::optional<Tensor> scales = per_group(scale->tensor, groups), offsets = per_group(zp->tensor, groups);
  if (!scales || !offsets) return {};
  auto t = std::make_shared<ir::PackedTensor>();
  t->dtype = scale->tensor.dtype;
  t->shape = data.shape;
  t->codes = {data.reshaped({data.numel()}), data.dtype, 0, data.numel()};
  t->map = ir::CodeMap::kAffine;
  t->groups = Shape(data.shape.size(), 1);
  t->groups[axis] = groups;
  t->scale = *scales;
  t->offset = {*offsets, offsets->dtype, 0, groups};
  return single(packed_output(b, 0, t));
}

PackedOutputs pack_blockwise_shift_scale(KernelBuilder& b) {
  std::optional<ir::PackedArray> codes = codes_of(b.stored_constant("data"));
  const ir::ConstValue* scale = b.constant("scale");
  const ir::ConstValue* offset = b.has("offset") ? b.stored_constant("offset") : nullptr;
  if (!codes || !is_float_tensor(scale) || (b.has("offset") && !offset)) return {};
  if (!is_code_dtype(codes->dtype) && codes->dtype != DType::Float16 && codes->dtype != DType::Float32) return {};
  auto t = std::make_shared<ir::PackedTensor>();
  t->dtype = scale->tensor.dtype;
  t->shape = Shape(b.input_type("data").dims.begin(), b.input_type("data").dims.end());
  t->codes = *codes;
  if (!set_shift_scale(*t, *scale, offset)) return {};
  return single(packed_output(b, 0, t));
}

PackedOutputs pack_lut_to_dense(KernelBuilder& b) {
  const ir::ConstValue* lut = b.constant("lut");
  if (!is_float_tensor(lut)) return {};  // integer palettes are folded (their values feed another constexpr op)
  auto t = std::make_shared<ir::PackedTensor>();
  t->dtype = lut->tensor.dtype;
  t->map = ir::CodeMap::kLut;
  if (b.is_constant("shape")) {  // iOS16: a packed uint8 stream of log2(palettes)-bit indices, one flat palette
    const ir::ConstValue* indices = b.constant("indices");
    if (!indices || !indices->tensor.defined() || indices->tensor.dtype != DType::UInt8) return {};
    t->shape = b.const_ints("shape");
    const int64_t palettes = lut->tensor.numel();
    int bits = 0;
    while ((int64_t{1} << bits) < palettes) ++bits;
    if ((int64_t{1} << bits) != palettes || (bits != 1 && bits != 2 && bits != 4 && bits != 6 && bits != 8)) return {};
    t->codes = {indices->tensor.reshaped({indices->tensor.numel()}), unsigned_codes(bits), bits, shape_numel(t->shape)};
    t->groups = Shape(t->shape.size(), 1);
    t->table = lut->tensor.reshaped({palettes});
    t->palettes = palettes;
    return single(packed_output(b, 0, t));
  }
  // iOS18: uintN indices; lut [G_0 .. G_{K-1}, palettes, V]. Vector palettes (V > 1) are folded.
  std::optional<ir::PackedArray> codes = codes_of(b.stored_constant("indices"));
  if (!codes) return {};
  t->shape = Shape(b.input_type("indices").dims.begin(), b.input_type("indices").dims.end());
  const Shape& ls = lut->tensor.shape;
  const size_t rank = t->shape.size();
  if (ls.size() != rank + 2 || ls[rank + 1] != 1) return {};
  t->groups = Shape(ls.begin(), ls.begin() + static_cast<int64_t>(rank));
  t->palettes = ls[rank];
  t->codes = *codes;
  t->table = lut->tensor.reshaped({lut->tensor.numel()});
  return single(packed_output(b, 0, t));
}

PackedOutputs pack_sparse_to_dense(KernelBuilder& b) {
  const ir::ConstValue* data = b.stored_constant("nonzero_data");
  auto t = std::make_shared<ir::PackedTensor>();
  std::optional<Tensor> mask;
  if (b.is_constant("shape")) {  // iOS16: the mask is a packed uint8 bit stream
    const ir::ConstValue* stream = b.constant("mask");
    if (!stream || !stream->tensor.defined() || stream->tensor.dtype != DType::UInt8) return {};
    t->shape = b.const_ints("shape");
    mask = stream->tensor.reshaped({stream->tensor.numel()});
  } else {
    mask = mask_bits(b.stored_constant("mask"));
    t->shape = Shape(b.input_type("mask").dims.begin(), b.input_type("mask").dims.end());
  }
  if (!mask || !data) return {};
  t->mask = *mask;
  t->groups = Shape(t->shape.size(), 1);
  if (data->packed) {
    // The nonzero values of constexpr_lut_to_sparse or constexpr_sparse_blockwise_shift_scale,
    // scattered by the same mask: the dense tensor those ops' values were taken from.
    const ir::PackedTensor& values = *data->packed;
    if (!values.nonzero_only || values.shape != t->shape || values.mask.nbytes() != t->mask.nbytes() ||
        std::memcmp(values.mask.data, t->mask.data, t->mask.nbytes()) != 0)
      return {};
    auto dense = std::make_shared<ir::PackedTensor>(values);
    dense->nonzero_only = false;
    return single(packed_output(b, 0, dense));
  }
  if (!is_float_tensor(data) || data->tensor.rank() != 1) return {};
  t->dtype = data->tensor.dtype;
  t->codes = {data->tensor, data->tensor.dtype, 0, data->tensor.numel()};
  t->nonzero = data->tensor.numel();
  return single(packed_output(b, 0, t));
}

PackedOutputs pack_lut_to_sparse(KernelBuilder& b) {
  const ir::ConstValue* mask_value = b.stored_constant("indices_mask");
  const ir::ConstValue* lut = b.constant("lut");
  std::optional<ir::PackedArray> codes = codes_of(b.stored_constant("indices_nonzero_data"));
  std::optional<Tensor> mask = mask_bits(mask_value);
  if (!mask || !codes || !is_float_tensor(lut)) return {};
  auto t = std::make_shared<ir::PackedTensor>();
  t->dtype = lut->tensor.dtype;
  t->shape = Shape(b.input_type("indices_mask").dims.begin(), b.input_type("indices_mask").dims.end());
  const Shape& ls = lut->tensor.shape;
  const size_t rank = t->shape.size();
  if (ls.size() != rank + 2 || ls[rank + 1] != 1) return {};  // vector palettes are folded
  t->codes = *codes;
  t->mask = *mask;
  t->nonzero = codes->count;
  t->nonzero_only = true;
  t->map = ir::CodeMap::kLut;
  t->groups = Shape(ls.begin(), ls.begin() + static_cast<int64_t>(rank));
  t->palettes = ls[rank];
  t->table = lut->tensor.reshaped({lut->tensor.numel()});
  std::shared_ptr<const ir::ConstValue> values = packed_output(b, 1, t);
  if (!values) return {};
  // With one value per index, the output mask is the input mask.
  return {std::make_shared<ir::ConstValue>(*mask_value), values};
}

PackedOutputs pack_sparse_blockwise_shift_scale(KernelBuilder& b) {
  const ir::ConstValue* mask_value = b.stored_constant("data_mask");
  const ir::ConstValue* scale = b.constant("scale");
  const ir::ConstValue* offset = b.has("offset") ? b.stored_constant("offset") : nullptr;
  std::optional<ir::PackedArray> codes = codes_of(b.stored_constant("nonzero_data"));
  std::optional<Tensor> mask = mask_bits(mask_value);
  if (!mask || !codes || !is_float_tensor(scale) || (b.has("offset") && !offset)) return {};
  if (!is_code_dtype(codes->dtype) && codes->dtype != DType::Float16 && codes->dtype != DType::Float32) return {};
  auto t = std::make_shared<ir::PackedTensor>();
  t->dtype = scale->tensor.dtype;
  t->shape = Shape(b.input_type("data_mask").dims.begin(), b.input_type("data_mask").dims.end());
  t->codes = *codes;
  t->mask = *mask;
  t->nonzero = codes->count;
  t->nonzero_only = true;
  if (!set_shift_scale(*t, *scale, offset)) return {};
  std::shared_ptr<const ir::ConstValue> values = packed_output(b, 1, t);
  if (!values) return {};
  return {std::make_shared<ir::ConstValue>(*mask_value), values};
}

}  // namespace coremlrt::ops
