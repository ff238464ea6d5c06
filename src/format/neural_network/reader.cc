// The neuralNetwork reader: declares the model's inputs, runs the translator (translator.h) over
// its layers and ties the model's outputs (and a classifier's labels) to the blobs that make them.
#include "format/neural_network/reader.h"

#include <set>

#include "coremlrt/error.h"
#include "format/neural_network/image_inputs.h"
#include "format/neural_network/translator.h"
#include "nn_classifier.pb.h"

namespace coremlrt::format {

using namespace neural_network;

namespace {

ir::ValueType input_type(const FeatureDescription& feature) {
  if (feature.kind != FeatureKind::MultiArray) refuse("input '", feature.name, "' is a ", feature_kind_name(feature.kind),
                                                  "; this build runs neuralNetwork models on multi-array and image inputs only");
  if (feature.dtype != DType::Float32 && feature.dtype != DType::Float64)
    refuse("input '", feature.name, "' is ", dtype_name(feature.dtype), "; this build runs neuralNetwork models on float32 and double inputs only");
  if (feature.shape.empty()) refuse("input '", feature.name, "' declares no shape");
  std::vector<int64_t> dims(feature.shape.begin(), feature.shape.end());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i < feature.shape_range.size() && feature.shape_range[i].first != feature.shape_range[i].second) dims[i] = -1;
    for (const Shape& shape : feature.enumerated_shapes)
      if (shape.size() != dims.size() || shape[i] != feature.shape[i]) dims[i] = -1;
  }
  return tensor_type(feature.dtype, std::move(dims));
}

// The outputs a classifier's `classify` op defines (its label and probabilities features).
struct ClassifierOutputs {
  std::string label, probabilities;
};

// Reads the classifier's labels and probabilities blob and adds its `classify` op. The label
// and dictionary outputs are the description's predicted feature and probabilities names, or
// else its outputs of kind int64/string and dictionary (as for the classic classifiers,
// src/format/classic/predictor.cc).
ClassifierOutputs classifier_outputs(const std::string& serialized, const nn::NeuralNetwork& network,
                                     const FunctionDescription& description, Translator& translator) {
  nn::NeuralNetworkClassifierHead head;
  require(head.ParseFromString(serialized), "the neuralNetworkClassifier message does not parse");
  std::shared_ptr<ir::ConstValue> classes = std::make_shared<ir::ConstValue>();
  DType label_dtype = DType::String;
  int64_t count = 0;
  if (head.has_int64classlabels()) {
    const auto& labels = head.int64classlabels().vector();
    count = labels.size();
    label_dtype = DType::Int64;
    classes->type = tensor_type(DType::Int64, {count});
    classes->tensor = Tensor::empty(DType::Int64, {count});
    std::copy(labels.begin(), labels.end(), classes->tensor.ptr<int64_t>());
  } else if (head.has_stringclasslabels()) {
    const auto& labels = head.stringclasslabels().vector();
    count = labels.size();
    classes->type = tensor_type(DType::String, {count});
    classes->tensor = Tensor::empty(DType::String, {count});
    classes->strings.assign(labels.begin(), labels.end());
  }
  require(count > 0, "the classifier has no class labels");

  ClassifierOutputs out{description.predicted_feature_name, description.predicted_probabilities_name};
  for (const auto& feature : description.outputs) {
    if (out.label.empty() && (feature.kind == FeatureKind::Int64 || feature.kind == FeatureKind::String))
      out.label = feature.name;
    if (out.probabilities.empty() && feature.kind == FeatureKind::Dictionary) out.probabilities = feature.name;
  }
  require(!out.label.empty(), "the description names no predicted label output");
  bool label_declared = false;
  for (const auto& feature : description.outputs) {
    if (feature.name == out.label) {
      label_declared = true;
      require(feature.kind == (label_dtype == DType::Int64 ? FeatureKind::Int64 : FeatureKind::String), "output '",
              feature.name, "' is a ", feature_kind_name(feature.kind), " feature but the class labels are ",
              label_dtype == DType::Int64 ? "int64" : "strings");
    } else if (feature.name == out.probabilities) {
      require(feature.kind == FeatureKind::Dictionary, "output '", feature.name, "' is a ",
              feature_kind_name(feature.kind), " feature; class probabilities are a dictionary");
    }
  }
  require(label_declared, "the description has no output '", out.label, "'");
  // With no probabilities output declared, the dictionary is still made, under a name of its own.
  if (out.probabilities.empty()) out.probabilities = out.label + "#probabilities";

  // An empty labelProbabilityLayerName means the network's one dangling output blob, as Core
  // ML reads models written before the field existed.
  std::string blob = head.labelprobabilitylayername();
  if (blob.empty()) {
    const std::vector<std::string> unread = translator.unread_blobs(network);
    require(unread.size() == 1, "labelProbabilityLayerName is empty and the network has ", unread.size(),
            " output blobs, so which holds the class probabilities is not known");
    blob = unread.front();
  }
  std::optional<Value> probabilities = translator.blob_value(blob);
  require(probabilities.has_value(), "labelProbabilityLayerName names blob '", blob, "', which no layer produces");
  const ir::ValueType& type = probabilities->type;
  if (type.is_static()) {
    int64_t values = 1;
    for (int64_t d : type.dims) values *= d;
    require(values == count, "the probabilities blob '", blob, "' ", type.str(), " holds ", values, " values for ",
            count, " class labels");
  }
  translator.add_classify(*probabilities, classes, label_dtype, out.label, out.probabilities);
  return out;
}

}  // namespace

namespace {

NeuralNetworkReading translate_network(const std::string& serialized, const nn::NeuralNetwork& network,
                                       const FunctionDescription& description, NetworkRole role,
                                       bool sequence_unknown) {
  NeuralNetworkReading out;
  for (const auto& layer : network.layers())
    out.layers.push_back({kind_name(layer_kind(layer).field), layer.name(), layer.output_size() ? layer.output(0) : "", ""});

  ir::Function function;
  function.name = "main";
  function.opset = "CoreML5";  // the translated ops mean the same in every opset; take the first
  function.ios_version = ir::ios_version_of_opset(function.opset);
  bool has_image_inputs = false;
  for (const FeatureDescription& feature : description.inputs) has_image_inputs |= feature.kind == FeatureKind::Image;
  Translator translator(network, has_image_inputs, function, sequence_unknown);
  std::map<std::string, ImagePreprocessing> preprocessing;
  try {
    preprocessing = read_image_preprocessing(network, description);
    if (has_image_inputs && network.imageinputshapemapping() == nn::RANK4_IMAGE_MAPPING &&
        network.arrayinputshapemapping() != nn::EXACT_ARRAY_MAPPING)
      for (const FeatureDescription& feature : description.inputs)
        require(feature.kind != FeatureKind::MultiArray, "multi-array input '", feature.name,
                "' uses the rank-5 array mapping, which RANK4_IMAGE_MAPPING does not allow beside it");
  } catch (const LayerRefused& refused) {
    out.problem = refused.reason;
  }
  for (const FeatureDescription& feature : description.inputs) {
    try {
      if (!out.problem.empty()) {
        translator.declare_input(feature.name, std::nullopt);
      } else if (feature.kind == FeatureKind::Image) {
        auto pre = preprocessing.find(feature.name);
        translator.declare_image_input(feature.name, image_input_type(feature),
                                       pre == preprocessing.end() ? nullptr : &pre->second);
      } else {
        translator.declare_input(feature.name, input_type(feature));
      }
    } catch (const LayerRefused& refused) {
      out.problem = refused.reason;
      translator.declare_input(feature.name, std::nullopt);
    }
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
  std::optional<ClassifierOutputs> classifier;
  if (role == NetworkRole::Classifier) {
    try {
      classifier = classifier_outputs(serialized, network, description, translator);
    } catch (const LayerRefused& refused) {
      out.problem = refused.reason;
      return out;
    }
  }
  for (const FeatureDescription& feature : description.outputs) {
    if (classifier && (feature.name == classifier->label || feature.name == classifier->probabilities)) {
      function.block.outputs.push_back(feature.name);
      continue;
    }
    std::optional<std::string> value;
    try {
      value = feature.kind == FeatureKind::Image ? translator.image_output_value(feature.name, feature)
                                                 : translator.output_value(feature.name, feature);
    } catch (const LayerRefused& refused) {
      out.problem = refused.reason;
      return out;
    }
    if (!value) {
      out.problem = "output '" + feature.name + "' is not produced by any layer";
      return out;
    }
    function.block.outputs.push_back(*value);
  }
  out.program.functions.emplace(function.name, std::move(function));
  return out;
}

}  // namespace

// In the rank-5 layout the first attempt frames each array input as [1, 1, C, H, W]: Seq and
// Batch 1, as the description's [C, H, W] (or [C]) says. Core ML also takes arrays fed as
// [Seq, Batch, C, H, W] (NeuralNetwork.proto, RANK5_ARRAY_MAPPING), and some networks only
// make sense with a longer sequence (an innerProduct sized for Seq x C values after a permute
// and flatten, say), so their layers refuse Seq 1. Such a network is translated again with Seq
// unknown until prediction; it runs when every layer then translates, with Batch 1.
NeuralNetworkReading read_neural_network(const std::string& serialized, const FunctionDescription& description,
                                         NetworkRole role) {
  nn::NeuralNetwork network;
  COREMLRT_CHECK(network.ParseFromString(serialized), "the neuralNetwork message does not parse");
  NeuralNetworkReading first = translate_network(serialized, network, description, role, false);
  const bool rank5 = network.arrayinputshapemapping() != nn::EXACT_ARRAY_MAPPING;
  bool array_inputs = false;
  for (const FeatureDescription& feature : description.inputs) array_inputs |= feature.kind == FeatureKind::MultiArray;
  bool layer_refused = false;
  for (const NetworkLayer& layer : first.layers) layer_refused |= !layer.problem.empty();
  if (!first.program.functions.empty() || !first.problem.empty() || !rank5 || !array_inputs || !layer_refused)
    return first;
  NeuralNetworkReading second = translate_network(serialized, network, description, role, true);
  return second.program.functions.empty() ? first : second;
}

}  // namespace coremlrt::format
