#include "format/neural_network_reader.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <cstring>
#include <map>
#include <optional>
#include <sstream>

#include "NeuralNetwork.pb.h"
#include "coremlrt/error.h"

namespace coremlrt::format {

namespace nn = CoreML::Specification::NN;
using google::protobuf::internal::WireFormatLite;

namespace {

// A layer this build cannot run: carries the reason up to the layer loop.
struct LayerRefused {
  std::string reason;
};

template <class... Args>
[[noreturn]] void refuse(const Args&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw LayerRefused{message.str()};
}

constexpr const char* kRunnableLayers = "innerProduct, activation, gelu, softmax and softmaxND";

// The layer kind of a layer whose oneof member is not in our schema subset. Parsing keeps
// unknown fields, so the layer serialized again holds it: the first field numbered like a
// layer kind (they start at 100).
int unparsed_layer_field(const nn::NeuralNetworkLayer& layer) {
  const std::string bytes = layer.SerializeAsString();
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                             static_cast<int>(bytes.size()));
  while (uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    if (field >= 100) return field;
    if (!WireFormatLite::SkipField(&in, tag)) break;
  }
  return 0;
}

std::string layer_type(const nn::NeuralNetworkLayer& layer) {
  if (layer.layer_case() != nn::NeuralNetworkLayer::LAYER_NOT_SET) return network_layer_type_name(layer.layer_case());
  const int field = unparsed_layer_field(layer);
  return field ? network_layer_type_name(field) : "none";
}

ir::ValueType tensor_type(DType dtype, std::vector<int64_t> dims) {
  ir::ValueType type;
  type.dtype = dtype;
  type.rank = static_cast<int64_t>(dims.size());
  type.dims = std::move(dims);
  return type;
}

std::shared_ptr<const ir::ConstValue> float_constant(std::vector<float> values, std::vector<int64_t> dims) {
  auto out = std::make_shared<ir::ConstValue>();
  out->type = tensor_type(DType::Float32, dims);
  out->tensor = Tensor::empty(DType::Float32, Shape(dims.begin(), dims.end()));
  std::memcpy(out->tensor.data, values.data(), values.size() * sizeof(float));
  return out;
}

std::shared_ptr<const ir::ConstValue> float_scalar(float value) { return float_constant({value}, {}); }

std::shared_ptr<const ir::ConstValue> int_scalar(int32_t value) {
  auto out = std::make_shared<ir::ConstValue>();
  out->type = tensor_type(DType::Int32, {});
  out->tensor = Tensor::empty(DType::Int32, {});
  *out->tensor.ptr<int32_t>() = value;
  return out;
}

std::shared_ptr<const ir::ConstValue> string_scalar(const std::string& value) {
  auto out = std::make_shared<ir::ConstValue>();
  out->type = tensor_type(DType::String, {});
  out->tensor = Tensor::empty(DType::String, {});
  out->strings = {value};
  return out;
}

// Weights as fp32 (the precision the layer graph computes in); fp16 storage is widened.
std::vector<float> read_weights(const nn::WeightParams& weights, uint64_t count, const char* what) {
  if (!weights.rawvalue().empty() || !weights.int8rawvalue().empty() || !weights.quantization().empty())
    refuse(what, " are stored raw or quantized, which this build does not read");
  if (weights.floatvalue_size() > 0) {
    if (static_cast<uint64_t>(weights.floatvalue_size()) != count)
      refuse(what, " hold ", weights.floatvalue_size(), " values; expected ", count);
    return {weights.floatvalue().begin(), weights.floatvalue().end()};
  }
  const std::string& halves = weights.float16value();
  if (halves.size() != count * sizeof(half)) refuse(what, " hold ", halves.size(), " bytes of fp16; expected ", count * sizeof(half));
  std::vector<float> out(count);
  for (uint64_t i = 0; i < count; ++i) {
    half value;
    std::memcpy(&value, halves.data() + i * sizeof(half), sizeof(half));
    out[i] = static_cast<float>(value);
  }
  return out;
}

// One element-wise activation as the op of the same meaning and its parameters.
void translate_activation(const nn::ActivationParams& params, ir::Operation& op) {
  auto set = [&](const char* type, std::optional<float> alpha = {}, std::optional<float> beta = {}) {
    op.type = type;
    if (alpha) op.inputs["alpha"].push_back({"", float_scalar(*alpha)});
    if (beta) op.inputs["beta"].push_back({"", float_scalar(*beta)});
  };
  using P = nn::ActivationParams;
  switch (params.NonlinearityType_case()) {
    case P::kReLU: return set("relu");
    case P::kTanh: return set("tanh");
    case P::kSigmoid: return set("sigmoid");
    case P::kSoftsign: return set("softsign");
    case P::kSoftplus: return set("softplus");
    case P::kLeakyReLU: return set("leaky_relu", params.leakyrelu().alpha());
    case P::kThresholdedReLU: return set("thresholded_relu", params.thresholdedrelu().alpha());
    case P::kELU: return set("elu", params.elu().alpha());
    case P::kLinear: return set("linear_activation", params.linear().alpha(), params.linear().beta());
    case P::kScaledTanh: return set("scaled_tanh", params.scaledtanh().alpha(), params.scaledtanh().beta());
    case P::kSigmoidHard: return set("sigmoid_hard", params.sigmoidhard().alpha(), params.sigmoidhard().beta());
    case P::kPReLU:
    case P::kParametricSoftplus:
      refuse("per-channel activations (PReLU, parametricSoftplus) are not supported by this build");
    default: refuse("activation has no nonlinearity this build knows");
  }
}

[[noreturn]] void refuse_kind(const nn::NeuralNetworkLayer& layer) {
  refuse("this build cannot run neuralNetwork layers of type '", layer_type(layer), "' (it runs ", kRunnableLayers, ")");
}

class Translator {
 public:
  Translator(const nn::NeuralNetwork& network, ir::Function& function) : function_(function) {
    for (const auto& layer : network.layers())
      for (const auto& blob : layer.output()) ++definitions_left_[blob];
  }

  // An input without a type cannot run; layers reading it are still judged by their kind.
  void declare_input(const std::string& name, std::optional<ir::ValueType> type) {
    blobs_[name] = type;
    values_[name] = name;
    if (type) function_.inputs.push_back({name, std::move(*type)});
  }

  // Adds the layer's op and returns true, or throws LayerRefused. A layer that reads the
  // output of a refused layer is judged by its kind and parameters alone and returns false.
  bool translate(const nn::NeuralNetworkLayer& layer) {
    try {
      // Our schema subset parses only the kinds translated below; any other kind is unset.
      if (layer.layer_case() == nn::NeuralNetworkLayer::LAYER_NOT_SET) refuse_kind(layer);
      if (layer.input_size() != 1 || layer.output_size() != 1)
        refuse("has ", layer.input_size(), " inputs and ", layer.output_size(), " outputs; expected one of each");
      auto input = blobs_.find(layer.input(0));
      if (input == blobs_.end()) refuse("reads blob '", layer.input(0), "', which no input or earlier layer produces");
      const std::optional<ir::ValueType> x = input->second;
      for (const auto& model_input : function_.inputs)
        if (model_input.name == layer.output(0)) refuse("overwrites the model input '", layer.output(0), "'");
      ir::Operation op;
      op.name = layer.name();
      op.inputs["x"].push_back({values_[layer.input(0)], nullptr});
      ir::ValueType out_type = x ? *x : ir::ValueType{};
      switch (layer.layer_case()) {
        case nn::NeuralNetworkLayer::kInnerProduct: out_type = translate_inner_product(layer.innerproduct(), x, op); break;
        case nn::NeuralNetworkLayer::kActivation: translate_activation(layer.activation(), op); break;
        case nn::NeuralNetworkLayer::kGelu: translate_gelu(layer.gelu(), op); break;
        case nn::NeuralNetworkLayer::kSoftmax: translate_softmax(x, -3, 3, op); break;
        case nn::NeuralNetworkLayer::kSoftmaxND: translate_softmax(x, layer.softmaxnd().axis(), 1, op); break;
        default: refuse_kind(layer);
      }
      if (!x) {
        define(layer.output(0), std::nullopt, std::nullopt);
        return false;
      }
      define(layer.output(0), out_type, std::move(op));
      return true;
    } catch (const LayerRefused&) {
      for (const auto& blob : layer.output()) define(blob, std::nullopt, std::nullopt);
      throw;
    }
  }

  const std::string& value_of(const std::string& blob) { return values_[blob]; }
  bool produced(const std::string& blob) const { return blobs_.count(blob) > 0; }

 private:
  ir::ValueType translate_inner_product(const nn::InnerProductLayerParams& params, const std::optional<ir::ValueType>& x,
                                        ir::Operation& op) {
    if (params.int8dynamicquantize()) refuse("int8 dynamic quantization is not supported by this build");
    const uint64_t in = params.inputchannels(), out = params.outputchannels();
    if (in == 0 || out == 0) refuse("has ", in, " input and ", out, " output channels");
    op.type = "linear";
    op.inputs["weight"].push_back(
        {"", float_constant(read_weights(params.weights(), in * out, "weights"),
                            {static_cast<int64_t>(out), static_cast<int64_t>(in)})});
    if (params.hasbias())
      op.inputs["bias"].push_back({"", float_constant(read_weights(params.bias(), out, "bias values"),
                                                      {static_cast<int64_t>(out)})});
    if (!x) return {};
    // Ranks 4 and 5 fold their trailing axes into the channel axis and change the output's
    // layout; only ranks 1-3, where the product is over the last axis, map onto linear.
    if (x->rank < 1 || x->rank > 3)
      refuse("input has rank ", x->rank, "; this build runs innerProduct on rank 1-3 blobs only");
    if (x->dims.back() >= 0 && static_cast<uint64_t>(x->dims.back()) != in)
      refuse("input ", x->str(), " does not end in inputChannels = ", in);
    ir::ValueType y = *x;
    y.dims.back() = static_cast<int64_t>(out);
    return y;
  }

  void translate_gelu(const nn::GeluLayerParams& params, ir::Operation& op) {
    op.type = "gelu";
    switch (params.mode()) {
      case nn::GeluLayerParams::EXACT: op.inputs["mode"].push_back({"", string_scalar("EXACT")}); break;
      case nn::GeluLayerParams::TANH_APPROXIMATION: op.inputs["mode"].push_back({"", string_scalar("TANH_APPROXIMATION")}); break;
      case nn::GeluLayerParams::SIGMOID_APPROXIMATION:
        op.inputs["mode"].push_back({"", string_scalar("SIGMOID_APPROXIMATION")});
        break;
      default: refuse("unknown gelu mode ", static_cast<int>(params.mode()));
    }
  }

  void translate_softmax(const std::optional<ir::ValueType>& x, int64_t axis, int64_t min_rank, ir::Operation& op) {
    op.type = "softmax";
    if (!x) return;
    if (x->rank < min_rank || axis < -x->rank || axis >= x->rank)
      refuse("axis ", axis, " does not fit an input of rank ", x->rank);
    op.inputs["axis"].push_back({"", int_scalar(static_cast<int32_t>(axis))});
  }

  // Blobs may be redefined (in-place layers); the last definition keeps the blob's own name,
  // which the model's outputs refer to, and earlier ones get numbered names.
  void define(const std::string& blob, std::optional<ir::ValueType> type, std::optional<ir::Operation> op) {
    const int left = --definitions_left_[blob];
    const std::string value = left == 0 ? blob : blob + "@" + std::to_string(left);
    blobs_[blob] = type;
    values_[blob] = value;
    if (op && type) {
      op->outputs.push_back({value, *type});
      function_.block.operations.push_back(std::move(*op));
    }
  }

  ir::Function& function_;
  std::map<std::string, int> definitions_left_;
  std::map<std::string, std::optional<ir::ValueType>> blobs_;  // nullopt: made by a layer that cannot run
  std::map<std::string, std::string> values_;                  // blob -> name of its current value
};

// The program input type of a float32 multi-array feature; flexible dims are unknown (-1).
ir::ValueType input_type(const FeatureDescription& feature) {
  if (feature.kind != FeatureKind::MultiArray) refuse("input '", feature.name, "' is not a multi-array; this build runs neuralNetwork models on multi-array inputs only");
  if (feature.dtype != DType::Float32) refuse("input '", feature.name, "' is ", dtype_name(feature.dtype), "; this build runs neuralNetwork models on float32 inputs only");
  if (feature.shape.empty()) refuse("input '", feature.name, "' declares no shape");
  std::vector<int64_t> dims(feature.shape.begin(), feature.shape.end());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i < feature.shape_range.size() && feature.shape_range[i].first != feature.shape_range[i].second) dims[i] = -1;
    for (const Shape& shape : feature.enumerated_shapes)
      if (shape.size() != dims.size() || shape[i] != feature.shape[i]) dims[i] = -1;
  }
  return tensor_type(DType::Float32, std::move(dims));
}

}  // namespace

NeuralNetworkReading read_neural_network(const std::string& serialized, const FunctionDescription& description) {
  NeuralNetworkReading out;
  nn::NeuralNetwork network;
  COREMLRT_CHECK(network.ParseFromString(serialized), "the neuralNetwork message does not parse");
  for (const auto& layer : network.layers())
    out.layers.push_back({layer_type(layer), layer.name(), layer.output_size() ? layer.output(0) : "", ""});

  ir::Function function;
  function.name = "main";
  function.opset = "CoreML5";  // the translated ops mean the same in every opset; take the first
  function.ios_version = ir::ios_version_of_opset(function.opset);
  Translator translator(network, function);
  try {
    if (network.arrayinputshapemapping() != nn::EXACT_ARRAY_MAPPING)
      refuse("its arrays use the legacy rank-5 [Seq, Batch, C, H, W] blob layout, which this build does not run");
    if (network.preprocessing_size() > 0) refuse("image preprocessing is not supported by this build");
  } catch (const LayerRefused& refused) {
    out.problem = refused.reason;
  }
  for (const FeatureDescription& feature : description.inputs) {
    std::optional<ir::ValueType> type;
    try {
      if (out.problem.empty()) type = input_type(feature);
    } catch (const LayerRefused& refused) {
      out.problem = refused.reason;
    }
    translator.declare_input(feature.name, type);
  }

  bool translated = out.problem.empty();
  for (int i = 0; i < network.layers_size(); ++i) {
    try {
      translated = translator.translate(network.layers(i)) && translated;
    } catch (const LayerRefused& refused) {
      out.layers[i].problem = refused.reason;
      translated = false;
    }
  }
  if (!translated) return out;
  for (const FeatureDescription& feature : description.outputs) {
    if (!translator.produced(feature.name)) {
      out.problem = "output '" + feature.name + "' is not produced by any layer";
      return out;
    }
    function.block.outputs.push_back(translator.value_of(feature.name));
  }
  out.program.functions.emplace(function.name, std::move(function));
  return out;
}

}  // namespace coremlrt::format
