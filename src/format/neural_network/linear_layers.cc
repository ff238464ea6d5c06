// Matrix products: innerProduct as linear.
#include "format/neural_network/layer_translator.h"
#include "nn_linear.pb.h"

namespace coremlrt::format::neural_network {
namespace {

void inner_product(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::InnerProductLayerParams>();
  require(!params.int8dynamicquantize(), "int8 dynamic quantization is not supported by this build");
  const uint64_t in = params.inputchannels(), out = params.outputchannels();
  require(in > 0 && out > 0, "has ", in, " input and ", out, " output channels");
  OpInputs inputs{{"x", {layer.input(0)}},
                  {"weight", {float_tensor(read_weights(params.weights(), in * out, "weights"),
                                           {static_cast<int64_t>(out), static_cast<int64_t>(in)})}}};
  if (params.hasbias())
    inputs.push_back({"bias", {float_tensor(read_weights(params.bias(), out, "bias values"), {static_cast<int64_t>(out)})}});
  const ir::ValueType& x = layer.input(0).type;
  // Ranks 4 and 5 fold their trailing axes into the channel axis and change the output's
  // layout; only ranks 1-3, where the product is over the last axis, map onto linear.
  require(x.rank >= 1 && x.rank <= 3, "input has rank ", x.rank, "; this build runs innerProduct on rank 1-3 blobs only");
  require(x.dims.back() < 0 || static_cast<uint64_t>(x.dims.back()) == in, "input ", x.str(),
          " does not end in inputChannels = ", in);
  ir::ValueType y = x;
  y.dims.back() = static_cast<int64_t>(out);
  layer.set_output(0, layer.emit1("linear", inputs, y));
}

}  // namespace

void register_linear_layers(LayerTable& table) { table[140] = inner_product; }

}  // namespace coremlrt::format::neural_network
