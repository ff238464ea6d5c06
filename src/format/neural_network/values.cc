// Inline constants and weight decoding shared by the layer translators (layer_translator.h).
#include <cstring>
#include <limits>

#include "format/neural_network/layer_translator.h"

namespace coremlrt::format::neural_network {

ir::ValueType tensor_type(DType dtype, std::vector<int64_t> dims) {
  ir::ValueType type;
  type.dtype = dtype;
  type.rank = static_cast<int64_t>(dims.size());
  type.dims = std::move(dims);
  return type;
}

namespace {

template <class T>
Value constant_tensor(DType dtype, const std::vector<T>& values, std::vector<int64_t> dims) {
  auto out = std::make_shared<ir::ConstValue>();
  out->type = tensor_type(dtype, dims);
  out->tensor = Tensor::empty(dtype, Shape(dims.begin(), dims.end()));
  if (!values.empty()) std::memcpy(out->tensor.data, values.data(), values.size() * sizeof(T));
  return {"", out, out->type};
}

}  // namespace

Value float_tensor(std::vector<float> values, std::vector<int64_t> dims) {
  return constant_tensor(DType::Float32, values, std::move(dims));
}
Value float_scalar(float value) { return float_tensor({value}, {}); }
Value int_tensor(std::vector<int32_t> values, std::vector<int64_t> dims) {
  return constant_tensor(DType::Int32, values, std::move(dims));
}
Value int_scalar(int32_t value) { return int_tensor({value}, {}); }

Value int_vector(const std::vector<int64_t>& values) {
  std::vector<int32_t> narrow;
  for (int64_t v : values) {
    require(v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(), "the value ", v,
            " does not fit 32 bits");
    narrow.push_back(static_cast<int32_t>(v));
  }
  return int_tensor(std::move(narrow), {static_cast<int64_t>(values.size())});
}

Value bool_scalar(bool value) {
  auto out = std::make_shared<ir::ConstValue>();
  out->type = tensor_type(DType::Bool, {});
  out->tensor = Tensor::empty(DType::Bool, {});
  *out->tensor.ptr<bool>() = value;
  return {"", out, out->type};
}

Value string_scalar(const std::string& value) {
  auto out = std::make_shared<ir::ConstValue>();
  out->type = tensor_type(DType::String, {});
  out->tensor = Tensor::empty(DType::String, {});
  out->strings = {value};
  return {"", out, out->type};
}

std::vector<float> read_weights(const nn::WeightParams& weights, uint64_t count, const char* what) {
  if (!weights.rawvalue().empty() || !weights.int8rawvalue().empty() || !weights.quantization().empty())
    refuse(what, " are stored raw or quantized, which this build does not read");
  if (weights.floatvalue_size() > 0) {
    require(static_cast<uint64_t>(weights.floatvalue_size()) == count, what, " hold ", weights.floatvalue_size(),
            " values; expected ", count);
    return {weights.floatvalue().begin(), weights.floatvalue().end()};
  }
  const std::string& halves = weights.float16value();
  require(halves.size() == count * sizeof(half), what, " hold ", halves.size(), " bytes of fp16; expected ",
          count * sizeof(half));
  std::vector<float> out(count);
  for (uint64_t i = 0; i < count; ++i) {
    half value;
    std::memcpy(&value, halves.data() + i * sizeof(half), sizeof(half));
    out[i] = static_cast<float>(value);
  }
  return out;
}

void LayerContext::expect_io(int min_inputs, int max_inputs, int outputs) const {
  require(input_count() >= min_inputs && input_count() <= max_inputs && output_count() == outputs, "has ",
          input_count(), " inputs and ", output_count(), " outputs; expected ",
          min_inputs == max_inputs ? std::to_string(min_inputs) : std::to_string(min_inputs) + "-" + std::to_string(max_inputs),
          " and ", outputs);
}

}  // namespace coremlrt::format::neural_network
