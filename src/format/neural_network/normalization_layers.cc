// The normalization family: batchnorm (batch_norm, or instance_norm when the statistics
// come from each image), mvn (layer_norm over the spatial, or channel and spatial, axes),
// l2normalize (l2_norm over [C, H, W]), lrn (local_response_norm across channels) and
// layerNormalization (layer_norm over the trailing axes). Per-channel ops see [N, C, H, W]
// through spatial_frame.h.
#include "format/neural_network/layer_translator.h"
#include "format/neural_network/spatial_frame.h"
#include "nn_normalization.pb.h"

namespace coremlrt::format::neural_network {
namespace {

void batchnorm(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::BatchnormLayerParams>();
  const int64_t channels = static_cast<int64_t>(params.channels());
  require(channels > 0, "has ", channels, " channels");
  SpatialFrame frame(layer, layer.input(0), 2);
  const auto& dims = frame.folded_dims();
  require(dims[1] < 0 || dims[1] == channels, "input has ", dims[1], " channels; the layer has ", channels);
  auto vec = [&](const nn::WeightParams& w, const char* what) {
    return float_tensor(read_weights(w, channels, what), {channels});
  };
  OpInputs inputs{{"x", {frame.folded()}}};
  const char* op = "batch_norm";
  if (params.computemeanvar()) {
    // Statistics of each image and channel over its spatial axes.
    require(params.instancenormalization(),
            "computes mean and variance over the batch (computeMeanVar without instanceNormalization), which this build does not support");
    op = "instance_norm";
  } else {
    inputs.push_back({"mean", {vec(params.mean(), "mean values")}});
    inputs.push_back({"variance", {vec(params.variance(), "variance values")}});
  }
  inputs.push_back({"gamma", {vec(params.gamma(), "gamma values")}});
  inputs.push_back({"beta", {vec(params.beta(), "beta values")}});
  inputs.push_back({"epsilon", {float_scalar(params.epsilon())}});
  const Value y = layer.emit1(op, inputs, frame.folded().type);
  layer.set_output(0, frame.unfold(y));
}

// y = x - mean, or (x - mean) / sqrt(variance + epsilon), over the last two axes (per
// channel) or the last three (across channels).
void mvn(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::MeanVarianceNormalizeLayerParams>();
  const Value& x = layer.input(0);
  const int axes_count = params.acrosschannels() ? 3 : 2;
  require(x.type.rank >= axes_count, "input has rank ", x.type.rank, "; mvn needs at least ", axes_count, " axes");
  std::vector<int64_t> axes;
  for (int i = axes_count; i >= 1; --i) axes.push_back(-i);
  if (params.normalizevariance()) {
    const float eps = params.epsilon() != 0 ? params.epsilon() : 1e-6f;  // 0 means the schema's default
    layer.set_output(0, layer.emit1("layer_norm", {{"x", {x}}, {"axes", {int_vector(axes)}}, {"epsilon", {float_scalar(eps)}}}, x.type));
    return;
  }
  ir::ValueType mean_type = x.type;
  for (int64_t a : axes) mean_type.dims[mean_type.dims.size() + a] = 1;
  const Value mean = layer.emit1("reduce_mean", {{"x", {x}}, {"axes", {int_vector(axes)}}, {"keep_dims", {bool_scalar(true)}}}, mean_type);
  layer.set_output(0, layer.emit1("sub", {{"x", {x}}, {"y", {mean}}}, x.type));
}

// y = x / sqrt(sum(x^2) + epsilon) over the last three axes.
void l2normalize(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::L2NormalizeLayerParams>();
  const Value& x = layer.input(0);
  require(x.type.rank >= 3, "input has rank ", x.type.rank, "; l2normalize needs [C, H, W] axes");
  const float eps = params.epsilon() != 0 ? params.epsilon() : 1e-6f;  // 0 means the schema's default
  layer.set_output(0, layer.emit1("l2_norm", {{"x", {x}}, {"epsilon", {float_scalar(eps)}}}, x.type));
}

// y = x / (k + alpha / localSize * sum of x^2 over localSize neighbouring channels)^beta.
void lrn(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::LRNLayerParams>();
  require(params.localsize() >= 1, "localSize is ", params.localsize());
  SpatialFrame frame(layer, layer.input(0), 2);
  const Value y = layer.emit1("local_response_norm",
                              {{"x", {frame.folded()}},
                               {"size", {int_scalar(static_cast<int32_t>(params.localsize()))}},
                               {"alpha", {float_scalar(params.alpha())}},
                               {"beta", {float_scalar(params.beta())}},
                               {"k", {float_scalar(params.k())}}},
                              frame.folded().type);
  layer.set_output(0, frame.unfold(y));
}

void layer_normalization(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::LayerNormalizationLayerParams>();
  const Value& x = layer.input(0);
  const int n = params.normalizedshape_size();
  require(n >= 1 && n <= x.type.rank, "normalizedShape has ", n, " axes for an input of rank ", x.type.rank);
  std::vector<int64_t> axes, shape;
  int64_t count = 1;
  for (int i = 0; i < n; ++i) {
    const int64_t d = params.normalizedshape(i), actual = x.type.dims[x.type.rank - n + i];
    require(d > 0 && (actual < 0 || actual == d), "normalizedShape ", d, " does not match the input's axis of size ", actual);
    axes.push_back(i - n);
    shape.push_back(d);
    count *= d;
  }
  OpInputs inputs{{"x", {x}},
                  {"axes", {int_vector(axes)}},
                  {"gamma", {float_tensor(read_weights(params.gamma(), count, "gamma values"), shape)}},
                  {"beta", {float_tensor(read_weights(params.beta(), count, "beta values"), shape)}},
                  {"epsilon", {float_scalar(params.eps())}}};
  layer.set_output(0, layer.emit1("layer_norm", inputs, x.type));
}

}  // namespace

void register_normalization_layers(LayerTable& table) {
  table[160] = batchnorm;
  table[165] = mvn;
  table[170] = l2normalize;
  table[180] = lrn;
  table[1350] = layer_normalization;
}

}  // namespace coremlrt::format::neural_network
