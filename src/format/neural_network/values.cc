// Inline constants and weight decoding shared by the layer translators (layer_translator.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "format/neural_network/layer_translator.h"

namespace coremlrt::format::neural_network {

namespace {

template <class T>
Value constant_tensor(DType dtype, const std::vector<T>& values, std::vector<int64_t> dims) {
  auto out = ir::make_constant(dtype, values, std::move(dims));
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

namespace {

// Quantized weights: `count` codes of numberOfBits bits each, packed into rawValue as one
// bit stream, each code most significant bit first and the stream filling each byte from its
// most significant bit (the packing coremltools' quantization_utils writes).
std::vector<float> read_quantized(const nn::WeightParams& weights, uint64_t count, const char* what) {
  const nn::QuantizationParams& q = weights.quantization();
  const uint64_t bits = q.numberofbits();
  require(bits >= 1 && bits <= 8, what, " are quantized to ", bits, " bits; the schema allows 1 to 8");
  const std::string& raw = weights.rawvalue();
  require(static_cast<uint64_t>(raw.size()) == (count * bits + 7) / 8, what, " hold ", raw.size(),
          " bytes of ", bits, "-bit codes; expected ", (count * bits + 7) / 8);
  std::vector<uint32_t> codes(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint32_t code = 0;
    for (uint64_t b = i * bits; b < (i + 1) * bits; ++b)
      code = (code << 1) | ((static_cast<uint8_t>(raw[b / 8]) >> (7 - b % 8)) & 1u);
    codes[i] = code;
  }
  std::vector<float> out(count);
  if (q.has_lookuptablequantization()) {
    const auto& table = q.lookuptablequantization().floatvalue();
    require(static_cast<uint64_t>(table.size()) == (uint64_t{1} << bits), what, " have a lookup table of ",
            table.size(), " entries; ", bits, "-bit codes need ", (uint64_t{1} << bits));
    for (uint64_t i = 0; i < count; ++i) out[i] = table[static_cast<int>(codes[i])];
    return out;
  }
  require(q.has_linearquantization(), what, " are quantized without a linear or lookup-table mapping");
  const auto& scale = q.linearquantization().scale();
  const auto& bias = q.linearquantization().bias();
  const uint64_t channels = static_cast<uint64_t>(scale.size());
  require(channels >= 1 && static_cast<uint64_t>(bias.size()) == channels && count % channels == 0, what,
          " have ", scale.size(), " scales and ", bias.size(), " biases for ", count, " values");
  const uint64_t per_channel = count / channels;
  for (uint64_t i = 0; i < count; ++i) {
    const int c = static_cast<int>(i / per_channel);
    out[i] = scale[c] * static_cast<float>(codes[i]) + bias[c];
  }
  return out;
}

}  // namespace

std::vector<float> read_weights(const nn::WeightParams& weights, uint64_t count, const char* what) {
  if (weights.has_quantization()) return read_quantized(weights, count, what);
  if (!weights.rawvalue().empty() || !weights.int8rawvalue().empty())
    refuse(what, " are stored as raw bytes without quantization parameters, which this build does not read");
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

ir::ValueType broadcast_type(const ir::ValueType& a, const ir::ValueType& b) {
  const int64_t rank = std::max(a.rank, b.rank);
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.rank ? 1 : a.dims[i - (rank - a.rank)];
    const int64_t db = i < rank - b.rank ? 1 : b.dims[i - (rank - b.rank)];
    require(da == db || da == 1 || db == 1 || da < 0 || db < 0, "inputs ", a.str(), " and ", b.str(),
            " do not broadcast");
    dims[i] = da == 1 ? db : db == 1 ? da : da < 0 ? db : da;
  }
  return tensor_type(a.dtype, std::move(dims));
}

Value as_float_blob(LayerContext& layer, const Value& x) {
  ir::ValueType type = x.type;
  type.dtype = DType::Float32;
  return layer.emit1("cast", {{"x", {x}}, {"dtype", {string_scalar("fp32")}}}, type);
}

Int8DynamicWeights read_int8_dynamic_weights(const nn::WeightParams& weights, const nn::WeightParams* bias, int64_t in,
                                             int64_t out) {
  const char* rule = "int8DynamicQuantize requires ";
  require(weights.has_quantization() && weights.quantization().has_linearquantization(), rule,
          "linearly quantized weights; these have ",
          weights.quantization().has_lookuptablequantization() ? "a lookup table"
          : weights.has_quantization()                         ? "no quantization mapping"
                                                               : "no quantization");
  const nn::QuantizationParams& q = weights.quantization();
  require(q.numberofbits() == 8, rule, "numberOfBits == 8; these have ", q.numberofbits());
  const auto& linear = q.linearquantization();
  require(linear.scale_size() == 1, rule, "one linear-quantization scale; these have ", linear.scale_size());
  require(linear.bias_size() == 0, rule, "an empty linear-quantization bias; these have ", linear.bias_size(), " values");
  require(weights.rawvalue().empty() && weights.floatvalue_size() == 0 && weights.float16value().empty(), rule,
          "the weights in int8RawValue only; rawValue, floatValue or float16Value is set");
  const std::string& codes = weights.int8rawvalue();
  require(static_cast<uint64_t>(codes.size()) == static_cast<uint64_t>(in) * static_cast<uint64_t>(out),
          "int8RawValue holds ", codes.size(), " weights; expected ", in, " x ", out);
  const float scale = linear.scale(0);
  require(std::isfinite(scale), rule, "a finite scale; this one is ", scale);
  Int8DynamicWeights result;
  result.weight = constant_tensor(DType::Int8, std::vector<int8_t>(codes.begin(), codes.end()), {out, in});
  result.weight_scale = float_scalar(scale);
  if (bias) result.bias = float_tensor(read_weights(*bias, static_cast<uint64_t>(out), "bias values"), {out});
  return result;
}

void LayerContext::expect_io(int min_inputs, int max_inputs, int outputs) const {
  require(input_count() >= min_inputs && input_count() <= max_inputs && output_count() == outputs, "has ",
          input_count(), " inputs and ", output_count(), " outputs; expected ",
          min_inputs == max_inputs ? std::to_string(min_inputs) : std::to_string(min_inputs) + "-" + std::to_string(max_inputs),
          " and ", outputs);
}

}  // namespace coremlrt::format::neural_network
