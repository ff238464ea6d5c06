// Layer kinds this build refuses with a reason of their own (refusal_table() in
// layer_table.cc): control flow over nested networks (branch, loop, loopBreak, loopContinue)
// and custom layers, named by their class.
#include "format/neural_network/layer_translator.h"
#include "nn_recurrent.pb.h"

namespace coremlrt::format::neural_network {
namespace {

void branch(LayerContext&) {
  refuse("branch layers (a choice between two nested networks that write the enclosing network's blobs)",
         " are not supported by this build");
}

void loop(LayerContext&) {
  refuse("loop layers (a nested network run repeatedly over the enclosing network's blobs) are not supported",
         " by this build");
}

void loop_break(LayerContext&) { refuse("loopBreak layers belong to loop bodies, which this build does not run"); }

void loop_continue(LayerContext&) {
  refuse("loopContinue layers belong to loop bodies, which this build does not run");
}

// A custom layer's computation is code the app that ships the model supplies (an Objective-C
// or Swift class of that name); the model file holds only its name and parameters.
void custom(LayerContext& layer) {
  const auto params = layer.parse_params<nn::CustomLayerParams>();
  refuse("custom layer of class '", params.classname(), "': its computation is code an app supplies with the",
         " model, which this build does not have");
}

}  // namespace

void register_control_flow_refusals(LayerTable& table) {
  table[500] = custom;
  table[605] = branch;
  table[615] = loop;
  table[620] = loop_break;
  table[625] = loop_continue;
}

}  // namespace coremlrt::format::neural_network
