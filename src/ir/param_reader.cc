#include "ir/param_reader.h"

#include <limits>
#include <type_traits>

#include "coremlrt/float_formats.h"

namespace coremlrt::ir {

const Tensor* ParamReader::tensor_or_fallback(const std::string& param, bool has_fallback) const {
  const ConstValue* value = known_value(param);
  if (!value) {
    if (has(param))
      param_error("parameter '" + param + "' must be a compile-time constant; it is known only at run time");
    if (!has_fallback) param_error("missing required parameter '" + param + "'");
    return nullptr;
  }
  if (value->type.kind != TypeKind::Tensor) param_error("parameter '" + param + "' must be a tensor");
  // A damaged file can declare elements its constant does not hold (a fuzzed program did).
  if (value->tensor.numel() > 0 && value->tensor.data == nullptr)
    param_error("parameter '" + param + "' declares " + std::to_string(value->tensor.numel()) +
                " elements but holds no data");
  return &value->tensor;
}

template <class T>
std::vector<T> ParamReader::values(const std::string& param, const Tensor& t) const {
  // A float becomes an integer only when finite and in range: converting anything else is
  // undefined behaviour (a fuzzed program had const_int read a float parameter of 1e30).
  auto from_float = [&](double v) -> T {
    if constexpr (std::is_integral_v<T>) {
      if (!(v >= -9.2e18 && v <= 9.2e18))
        param_error("parameter '" + param + "' has value " + std::to_string(v) +
                    ", which is not an integer this op can use");
    }
    return static_cast<T>(v);
  };
  std::vector<T> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype) {
      case DType::Int32: out[i] = static_cast<T>(t.ptr<int32_t>()[i]); break;
      case DType::Int64: out[i] = static_cast<T>(t.ptr<int64_t>()[i]); break;
      case DType::Int16: out[i] = static_cast<T>(t.ptr<int16_t>()[i]); break;
      case DType::UInt16: out[i] = static_cast<T>(t.ptr<uint16_t>()[i]); break;
      case DType::UInt32: out[i] = static_cast<T>(t.ptr<uint32_t>()[i]); break;
      case DType::Int8: out[i] = static_cast<T>(t.ptr<int8_t>()[i]); break;
      case DType::UInt8:
      case DType::Bool: out[i] = static_cast<T>(t.ptr<uint8_t>()[i]); break;
      case DType::Float32: out[i] = from_float(t.ptr<float>()[i]); break;
      case DType::Float16: out[i] = from_float(static_cast<float>(t.ptr<half>()[i])); break;
      case DType::Float64: out[i] = from_float(t.ptr<double>()[i]); break;
      default: param_error("parameter '" + param + "' has dtype " + dtype_name(t.dtype) + ", which is not a number");
    }
  }
  return out;
}

std::vector<int64_t> ParamReader::const_ints(const std::string& param,
                                             std::optional<std::vector<int64_t>> fallback) const {
  const Tensor* t = tensor_or_fallback(param, fallback.has_value());
  return t ? values<int64_t>(param, *t) : *fallback;
}

int64_t ParamReader::const_int(const std::string& param, std::optional<int64_t> fallback) const {
  const Tensor* t = tensor_or_fallback(param, fallback.has_value());
  if (!t) return *fallback;
  if (t->numel() != 1) param_error("parameter '" + param + "' must be a scalar, got shape " + shape_str(t->shape));
  return values<int64_t>(param, *t)[0];
}

double ParamReader::const_float(const std::string& param, std::optional<double> fallback) const {
  const Tensor* t = tensor_or_fallback(param, fallback.has_value());
  if (!t) return *fallback;
  if (t->numel() != 1) param_error("parameter '" + param + "' must be a scalar, got shape " + shape_str(t->shape));
  return values<double>(param, *t)[0];
}

bool ParamReader::const_bool(const std::string& param, std::optional<bool> fallback) const {
  return const_int(param, fallback ? std::optional<int64_t>(*fallback ? 1 : 0) : std::nullopt) != 0;
}

std::vector<bool> ParamReader::const_bools(const std::string& param, std::optional<std::vector<bool>> fallback) const {
  const Tensor* t = tensor_or_fallback(param, fallback.has_value());
  if (!t) return *fallback;
  std::vector<bool> out;
  for (int64_t v : values<int64_t>(param, *t)) out.push_back(v != 0);
  return out;
}

std::string ParamReader::const_string(const std::string& param, std::optional<std::string> fallback) const {
  const ConstValue* value = known_value(param);
  if (!value) {
    if (has(param))
      param_error("parameter '" + param + "' must be a compile-time constant; it is known only at run time");
    if (!fallback) param_error("missing required parameter '" + param + "'");
    return *fallback;
  }
  if (value->strings.size() != 1) param_error("parameter '" + param + "' must be a string");
  return value->strings[0];
}

}  // namespace coremlrt::ir
