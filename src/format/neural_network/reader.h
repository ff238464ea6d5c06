#pragma once
// Translates a neuralNetwork model (Core ML's legacy layer graph) into the same typed
// program the ML-program reader produces, so one planner and one set of kernels run both.
// Only layers whose meaning maps exactly onto existing ops are translated (one file per
// family of layer kinds in this folder, layer_translator.h); every other
// layer is reported by type and name rather than approximated.
#include <string>
#include <vector>

#include "coremlrt/description.h"
#include "ir/program.h"

namespace coremlrt::format {

// One layer as `coremlrt info` shows it.
struct NetworkLayer {
  std::string type;     // the schema's name of the layer kind: "innerProduct", "convolution", ...
  std::string name;
  std::string output;   // its first output blob
  std::string problem;  // why this build cannot run it; empty when it translated
};

struct NeuralNetworkReading {
  std::vector<NetworkLayer> layers;
  std::string problem;  // a model-wide reason it cannot run (input mapping, preprocessing, ...)
  ir::Program program;  // function "main"; filled only when nothing above reports a problem
};

// The model types whose message is a layer graph: neuralNetwork, neuralNetworkRegressor (the
// network's outputs are the prediction) and neuralNetworkClassifier (a probabilities blob
// feeds the `classify` op, src/ops/classify.cc, which gives the label and the dictionary).
enum class NetworkRole { Plain, Regressor, Classifier };

// `serialized` is the model type's message; `function` the model's (single) description.
NeuralNetworkReading read_neural_network(const std::string& serialized, const FunctionDescription& function,
                                         NetworkRole role = NetworkRole::Plain);

// The schema's name for the layer kind stored under this field number ("layer #N" if unknown).
std::string network_layer_type_name(int field_number);

}  // namespace coremlrt::format
