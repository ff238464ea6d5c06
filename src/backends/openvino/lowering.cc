#include "backends/openvino/lowering.h"

#include <openvino/op/constant.hpp>

#include <cstring>

namespace coremlrt::backends::openvino {

namespace {

// The elements of a constant tensor as doubles (parameters: axes, pads, scalars).
std::vector<double> numbers(const Tensor& t, const std::string& what) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype) {
      case DType::Int32: out[i] = t.ptr<int32_t>()[i]; break;
      case DType::Int64: out[i] = static_cast<double>(t.ptr<int64_t>()[i]); break;
      case DType::Int16: out[i] = t.ptr<int16_t>()[i]; break;
      case DType::UInt16: out[i] = t.ptr<uint16_t>()[i]; break;
      case DType::Int8: out[i] = t.ptr<int8_t>()[i]; break;
      case DType::UInt8:
      case DType::Bool: out[i] = t.ptr<uint8_t>()[i]; break;
      case DType::UInt32: out[i] = t.ptr<uint32_t>()[i]; break;
      case DType::Float32: out[i] = t.ptr<float>()[i]; break;
      case DType::Float16: out[i] = static_cast<float>(t.ptr<half>()[i]); break;
      case DType::Float64: out[i] = t.ptr<double>()[i]; break;
      default: fail(what, " has dtype ", dtype_name(t.dtype), ", which is not a number");
    }
  }
  return out;
}

}  // namespace

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

std::vector<int64_t> OpReader::const_ints(const std::string& param, std::optional<std::vector<int64_t>> fallback) const {
  const ir::ConstValue* value = constant(param);
  if (!value) {
    if (has(param)) fail(op_.describe(), ": parameter '", param, "' is not known at load");
    if (!fallback) fail(op_.describe(), ": missing parameter '", param, "'");
    return *fallback;
  }
  std::vector<int64_t> out;
  for (double v : numbers(value->tensor, op_.describe() + " parameter '" + param + "'"))
    out.push_back(static_cast<int64_t>(v));
  return out;
}

int64_t OpReader::const_int(const std::string& param, std::optional<int64_t> fallback) const {
  std::vector<int64_t> values = const_ints(param, fallback ? std::optional(std::vector<int64_t>{*fallback}) : std::nullopt);
  if (values.size() != 1) fail(op_.describe(), ": parameter '", param, "' must be a scalar");
  return values[0];
}

double OpReader::const_float(const std::string& param, std::optional<double> fallback) const {
  const ir::ConstValue* value = constant(param);
  if (!value) {
    if (has(param)) fail(op_.describe(), ": parameter '", param, "' is not known at load");
    if (!fallback) fail(op_.describe(), ": missing parameter '", param, "'");
    return *fallback;
  }
  std::vector<double> values = numbers(value->tensor, op_.describe() + " parameter '" + param + "'");
  if (values.size() != 1) fail(op_.describe(), ": parameter '", param, "' must be a scalar");
  return values[0];
}

bool OpReader::const_bool(const std::string& param, std::optional<bool> fallback) const {
  return const_int(param, fallback ? std::optional<int64_t>(*fallback) : std::nullopt) != 0;
}

std::vector<bool> OpReader::const_bools(const std::string& param, std::optional<std::vector<bool>> fallback) const {
  if (!constant(param) && !has(param) && fallback) return *fallback;
  std::vector<bool> out;
  for (int64_t v : const_ints(param)) out.push_back(v != 0);
  return out;
}

std::string OpReader::const_string(const std::string& param, std::optional<std::string> fallback) const {
  const ir::ConstValue* value = constant(param);
  if (!value) {
    if (has(param)) fail(op_.describe(), ": parameter '", param, "' is not known at load");
    if (!fallback) fail(op_.describe(), ": missing parameter '", param, "'");
    return *fallback;
  }
  if (value->strings.size() != 1) fail(op_.describe(), ": parameter '", param, "' must be a string");
  return value->strings[0];
}

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

const LoweringTable& lowerings() {
  static const LoweringTable table = [] {
    LoweringTable t;
    add_elementwise_lowerings(t);
    add_linear_conv_lowerings(t);
    add_normalization_lowerings(t);
    add_shape_lowerings(t);
    add_reduction_lowerings(t);
    add_recurrent_lowerings(t);
    return t;
  }();
  return table;
}

}  // namespace coremlrt::backends::openvino
