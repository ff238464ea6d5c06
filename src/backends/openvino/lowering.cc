#include "backends/openvino/lowering.h"

#include <openvino/op/add.hpp>
#include <openvino/op/constant.hpp>
#include <openvino/op/multiply.hpp>
#include <openvino/op/reshape.hpp>

#include <algorithm>

namespace coremlrt::backends::openvino {

std::optional<ov::element::Type> element_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ov::element::f32;
    case DType::Float16: return ov::element::f16;
    case DType::Int32: return ov::element::i32;
    case DType::Int64: return ov::element::i64;
    case DType::Int16: return ov::element::i16;
    case DType::Int8: return ov::element::i8;
    case DType::UInt8: return ov::element::u8;
    case DType::UInt16: return ov::element::u16;
    case DType::UInt32: return ov::element::u32;
    case DType::Bool: return ov::element::boolean;
    default: return std::nullopt;
  }
}

const ir::Binding& OpReader::binding(const std::string& param, size_t index) const {
  auto it = op_.inputs.find(param);
  if (it == op_.inputs.end() || index >= it->second.size())
    fail(op_.describe(), ": has no parameter '", param, "' #", index);
  return it->second[index];
}

bool OpReader::has(const std::string& param) const { return count(param) > 0 || op_.attributes.count(param); }

size_t OpReader::count(const std::string& param) const {
  auto it = op_.inputs.find(param);
  return it == op_.inputs.end() ? 0 : it->second.size();
}

const ir::ValueType& OpReader::type(const std::string& param, size_t index) const {
  return values_.type(binding(param, index));
}

const ir::ConstValue* OpReader::constant(const std::string& param, size_t index) const {
  if (count(param) > index) return values_.constant(binding(param, index));
  auto attr = op_.attributes.find(param);
  return attr != op_.attributes.end() && index == 0 && param != "name" ? attr->second.get() : nullptr;
}

bool OpReader::is_constant(const std::string& param) const {
  for (size_t i = 0; i < count(param); ++i)
    if (!constant(param, i)) return false;
  return has(param);
}

void OpReader::param_error(const std::string& message) const { fail(op_.describe(), ": ", message); }

Value Lowerer::constant_of(ov::element::Type type, const std::vector<int64_t>& shape, const std::vector<double>& data) {
  return std::make_shared<ov::op::v0::Constant>(type, ov::Shape(shape.begin(), shape.end()), data);
}

Value Lowerer::i64s(const std::vector<int64_t>& values) {
  return std::make_shared<ov::op::v0::Constant>(ov::element::i64, ov::Shape{values.size()}, values);
}

Value Lowerer::i64(int64_t value) {
  return std::make_shared<ov::op::v0::Constant>(ov::element::i64, ov::Shape{}, std::vector<int64_t>{value});
}

Value Lowerer::scalar_like(const Value& like, double value) {
  return std::make_shared<ov::op::v0::Constant>(like.get_element_type(), ov::Shape{}, std::vector<double>{value});
}

Value add(const Value& a, const Value& b) { return std::make_shared<ov::op::v1::Add>(a, b); }
Value mul(const Value& a, const Value& b) { return std::make_shared<ov::op::v1::Multiply>(a, b); }

Verdict float_input(const OpReader& op, const char* param) {
  if (fp16_or_fp32(op.type(param).dtype)) return Verdict::claim();
  return Verdict::refuse(std::string(param) + " is not fp16 or fp32");
}

Verdict same_float_dtype(const OpReader& op, std::initializer_list<const char*> params) {
  const DType x = op.type("x").dtype;
  if (!fp16_or_fp32(x)) return Verdict::refuse("x is not fp16 or fp32");
  for (const char* p : params)
    if (op.count(p) && op.type(p).dtype != x)
      return Verdict::refuse(std::string(p) + " and x have different dtypes");
  return Verdict::claim();
}

OpLowering unary_fn(std::function<Value(Lowerer&, const Value&)> fn) {
  return {[](const OpReader& op) { return float_input(op); },
          [fn](Lowerer& op) -> std::vector<Value> { return {fn(op, op.input("x"))}; }};
}

Value reshape_to(const Value& x, const std::vector<int64_t>& dims) {
  return std::make_shared<ov::op::v1::Reshape>(x, Lowerer::i64s(dims), false);
}

Verdict resolve_pads(const OpReader& op, const std::vector<int64_t>& in, Window& w) {
  const size_t n = in.size();
  const std::string pad_type = op.const_string("pad_type", "valid");
  w.pad_begin.assign(n, 0);
  w.pad_end.assign(n, 0);
  if (pad_type == "custom") {
    const std::vector<int64_t> pad = op.const_ints("pad", std::vector<int64_t>(2 * n, 0));
    if (pad.size() != 2 * n) return Verdict::refuse("pad has the wrong length");
    for (size_t i = 0; i < n; ++i) {
      w.pad_begin[i] = pad[2 * i];
      w.pad_end[i] = pad[2 * i + 1];
    }
  } else if (pad_type == "same" || pad_type == "same_lower") {
    for (size_t i = 0; i < n; ++i) {
      if (in[i] < 0) return Verdict::refuse("pad_type " + pad_type + " over spatial dims known only at prediction");
      const int64_t k_eff = (w.kernel[i] - 1) * w.dilations[i] + 1, s = w.strides[i];
      const int64_t out = (in[i] + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (out - 1) * s + k_eff - in[i]);
      w.pad_begin[i] = pad_type == "same" ? total / 2 : total - total / 2;
      w.pad_end[i] = total - w.pad_begin[i];
    }
  } else if (pad_type != "valid") {
    return Verdict::refuse("pad_type " + pad_type);
  }
  return Verdict::claim();
}

const LoweringTable& lowerings() {
  static const LoweringTable table = [] {
    // Elementwise ops, reductions over constant axes and the matrix, convolution and pooling
    // ops read ranks only (a window's "same" padding, which needs the spatial dims, is refused
    // for dims known only at prediction: resolve_pads).
    LoweringTable t;
    add_elementwise_binary_lowerings(t);
    add_elementwise_unary_lowerings(t);
    add_activation_lowerings(t);
    add_reduction_lowerings(t);
    add_linear_lowerings(t);
    add_conv_lowerings(t);
    add_pool_lowerings(t);
    for (auto& [type, lowering] : t) lowering.any_dims = true;
    add_normalization_lowerings(t);
    add_shape_lowerings(t);
    add_slice_lowerings(t);
    add_gather_lowerings(t);
    add_misc_lowerings(t);
    add_recurrent_lowerings(t);
    return t;
  }();
  return table;
}

}  // namespace coremlrt::backends::openvino
