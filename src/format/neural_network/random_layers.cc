// The random layers (randomNormal/Uniform/Bernoulli in their Like, Static and Dynamic forms,
// and categoricalDistribution) draw from Core ML's own generator, whose algorithm and seeding
// the specification does not define: no other generator reproduces its draws, so these layers
// are refused by name rather than run with different numbers.
#include "format/neural_network/layer_translator.h"

namespace coremlrt::format::neural_network {
namespace {

void random_layer(LayerContext&) {
  refuse("random layers draw from Core ML's own random number generator, whose algorithm and seeding the",
         " specification does not define, so this build cannot reproduce their values");
}

}  // namespace

void register_random_refusals(LayerTable& table) {
  for (int field : {1170, 1175, 1180, 1190, 1195, 1200, 1210, 1215, 1220, 1230}) table[field] = random_layer;
}

}  // namespace coremlrt::format::neural_network
