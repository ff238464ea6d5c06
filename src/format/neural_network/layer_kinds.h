#pragma once
// What the neuralNetwork translator (translator.h) reads of a layer before translating it: its
// kind, which the schema keeps as an unparsed oneof member, and the blobs it writes.
#include <set>
#include <string>

#include "format/neural_network/layer_translator.h"

namespace coremlrt::format::neural_network {

// The field number of NeuralNetworkLayer's `copy` (proto/NeuralNetwork.proto).
constexpr int kCopyLayer = 600;

// The layer kind (its oneof member's field number, 100 and up) and the member's bytes.
// NeuralNetworkLayer leaves the member unparsed (proto/NeuralNetwork.proto), so it is read
// from the unknown fields the parse kept.
struct LayerKind {
  int field = 0;
  std::string params;
};
LayerKind layer_kind(const nn::NeuralNetworkLayer& layer);

// The blobs a layer defines: its outputs and, for a control-flow layer, every blob its nested
// networks write (Core ML makes those visible after the layer). collect_written adds them to `out`.
void collect_written(const nn::NeuralNetworkLayer& layer, std::set<std::string>& out);
std::set<std::string> written_by(const nn::NeuralNetworkLayer& layer);

// A branch layer on kLoopExitBlob whose elseBranch is layers [first, end) of `network`: the
// rest of a loop body after a layer that may end the iteration runs only when it did not.
nn::NeuralNetworkLayer rest_of_body(const nn::NeuralNetwork& network, int first, const std::string& after);

// The schema's name of a layer kind ("none" for 0).
std::string kind_name(int field);
// Refuses a layer of a kind this build has no translator for, naming the kinds it has.
[[noreturn]] void refuse_kind(int field);

}  // namespace coremlrt::format::neural_network
