// Matrix products: innerProduct as linear, or as int8_dynamic_linear when int8DynamicQuantize
// is set (src/ops/dynamic_quantization.cc: its input is quantized per tensor, so folding the
// leading axes into rows below changes nothing).
#include <cstdint>

#include "format/neural_network/layer_translator.h"
#include "nn_linear.pb.h"

namespace coremlrt::format::neural_network {
namespace {

// Ranks 4 and 5 fold their last three axes into the channel axis (NeuralNetwork.proto:
// [x1, x2*x3*x4] and [x1*x2, x3*x4*x5]), and the output is [x1, C_out, 1, 1] or
// [x1, x2, C_out, 1, 1]: a reshape around the product op `op_type`.
void inner_product_folded(LayerContext& layer, const std::string& op_type, OpInputs inputs, uint64_t in, uint64_t out) {
  const ir::ValueType& x = layer.input(0).type;
  const size_t lead = static_cast<size_t>(x.rank) - 3;
  int64_t folded = 1;
  for (size_t i = lead; i < x.dims.size(); ++i) folded = x.dims[i] < 0 || folded < 0 ? -1 : folded * x.dims[i];
  require(folded < 0 || static_cast<uint64_t>(folded) == in, "input ", x.str(), " holds ", folded,
          " values per row; expected inputChannels = ", in);
  int unknown_lead = 0;
  for (size_t i = 0; i < lead; ++i) unknown_lead += x.dims[i] < 0;
  // One unknown leading size (a sequence length, say) is restored by the output reshape's -1.
  require(unknown_lead <= 1, "input ", x.str(), " has unknown leading sizes this build cannot restore");
  std::vector<int64_t> rows(x.dims.begin(), x.dims.begin() + lead);
  int64_t row_count = 1;
  for (int64_t d : rows) row_count = d < 0 ? -1 : row_count * d;
  const Value matrix = layer.emit1("reshape", {{"x", {layer.input(0)}}, {"shape", {int_vector({-1, static_cast<int64_t>(in)})}}},
                                   tensor_type(x.dtype, {row_count, static_cast<int64_t>(in)}));
  inputs[0].second = {matrix};
  const Value product = layer.emit1(op_type, inputs, tensor_type(x.dtype, {row_count, static_cast<int64_t>(out)}));
  std::vector<int64_t> dims = rows;
  dims.insert(dims.end(), {static_cast<int64_t>(out), 1, 1});
  std::vector<int64_t> shape = dims;
  for (int64_t& d : shape) d = d < 0 ? -1 : d;
  layer.set_output(0, layer.emit1("reshape", {{"x", {product}}, {"shape", {int_vector(shape)}}}, tensor_type(x.dtype, dims)));
}

void inner_product(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::InnerProductLayerParams>();
  const uint64_t in = params.inputchannels(), out = params.outputchannels();
  require(in > 0 && out > 0 && in <= static_cast<uint64_t>(INT32_MAX) && out <= static_cast<uint64_t>(INT32_MAX), "has ",
          in, " input and ", out, " output channels");
  const int64_t in_dim = static_cast<int64_t>(in), out_dim = static_cast<int64_t>(out);
  std::string op_type = "linear";
  OpInputs inputs{{"x", {layer.input(0)}}};
  if (params.int8dynamicquantize()) {
    op_type = "int8_dynamic_linear";
    const Int8DynamicWeights w =
        read_int8_dynamic_weights(params.weights(), params.hasbias() ? &params.bias() : nullptr, in_dim, out_dim);
    inputs.push_back({"weight", {w.weight}});
    inputs.push_back({"weight_scale", {w.weight_scale}});
    if (w.bias) inputs.push_back({"bias", {*w.bias}});
  } else {
    inputs.push_back({"weight", {float_tensor(read_weights(params.weights(), in * out, "weights"), {out_dim, in_dim})}});
    if (params.hasbias())
      inputs.push_back({"bias", {float_tensor(read_weights(params.bias(), out, "bias values"), {out_dim})}});
  }
  const ir::ValueType& x = layer.input(0).type;
  if (x.rank == 4 || x.rank == 5) return inner_product_folded(layer, op_type, inputs, in, out);
  require(x.rank >= 1 && x.rank <= 3, "input has rank ", x.rank, "; innerProduct takes blobs of rank 1 to 5");
  require(x.dims.back() < 0 || static_cast<uint64_t>(x.dims.back()) == in, "input ", x.str(),
          " does not end in inputChannels = ", in);
  ir::ValueType y = x;
  y.dims.back() = out_dim;
  layer.set_output(0, layer.emit1(op_type, inputs, y));
}

}  // namespace

void register_linear_layers(LayerTable& table) { table[140] = inner_product; }

}  // namespace coremlrt::format::neural_network
