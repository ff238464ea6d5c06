// The random layers (NeuralNetwork.proto): randomNormal, randomUniform and randomBernoulli,
// each in three forms that differ only in where the output's shape comes from: Static (the
// outputShape parameter), Like (the shape of the input blob) and Dynamic (the values of the
// input blob). Each lowers onto the ML program op of the same distribution (random_normal,
// random_uniform, random_bernoulli; src/ops/random.cc), which keeps the distribution and the
// meaning of the seed (a seed >= 0 gives the same values at every prediction, -1 fresh values
// each time) but not Core ML's values, whose generator the specification does not define.
// categoricalDistribution lowers onto random_categorical for the eps and temperature that
// coremltools' own lowering of random_categorical writes (see categorical_distribution).
#include <cmath>
#include <limits>

#include "format/neural_network/shape_values.h"
#include "nn_random.pb.h"

namespace coremlrt::format::neural_network {
namespace {

// Where the output's shape comes from, and its type as known at load.
struct OutputShape {
  Value shape;                // int32 [rank]
  std::vector<int64_t> dims;  // -1 for a size known only at prediction
};

OutputShape static_shape(const google::protobuf::RepeatedField<uint64_t>& shape) {
  require(shape.size() > 0, "outputShape is empty");
  std::vector<int64_t> dims;
  for (uint64_t d : shape) {
    require(d < (uint64_t{1} << 31), "outputShape entry ", d, " is out of range");
    dims.push_back(static_cast<int64_t>(d));
  }
  return {int_vector(dims), dims};
}

OutputShape like_shape(LayerContext& layer) {
  const Value& x = ranked_input(layer, 0, 1);
  return {layer.emit1("shape", {{"x", {x}}}, tensor_type(DType::Int32, {x.type.rank})), x.type.dims};
}

// The shape blob's fp32 sizes, read as fillDynamic reads them (shape_values.h).
OutputShape dynamic_shape(LayerContext& layer) {
  const ShapeInput shape = shape_input(layer, 0);
  return {shape.sizes, shape.dims};
}

// -1 is the unseeded stream; other seeds must fit the op's int32 seed.
Value seed_value(int64_t seed) {
  require(seed >= -1 && seed <= std::numeric_limits<int32_t>::max(), "seed ", seed,
          " is outside [-1, 2^31 - 1] (-1 draws unseeded values)");
  return int_scalar(static_cast<int32_t>(seed));
}

template <class Params>
void normal(LayerContext& layer, const Params& params, const OutputShape& out) {
  require(std::isfinite(params.mean()) && std::isfinite(params.stddev()) && params.stddev() >= 0, "mean ",
          params.mean(), " and stdDev ", params.stddev(), " do not describe a normal distribution");
  layer.set_output(0, layer.emit1("random_normal",
                                  {{"shape", {out.shape}}, {"mean", {float_scalar(params.mean())}},
                                   {"stddev", {float_scalar(params.stddev())}}, {"seed", {seed_value(params.seed())}}},
                                  tensor_type(DType::Float32, out.dims)));
}

template <class Params>
void uniform(LayerContext& layer, const Params& params, const OutputShape& out) {
  require(std::isfinite(params.minval()) && std::isfinite(params.maxval()) && params.minval() <= params.maxval(),
          "minVal ", params.minval(), " and maxVal ", params.maxval(), " do not describe a finite interval");
  layer.set_output(0, layer.emit1("random_uniform",
                                  {{"shape", {out.shape}}, {"low", {float_scalar(params.minval())}},
                                   {"high", {float_scalar(params.maxval())}}, {"seed", {seed_value(params.seed())}}},
                                  tensor_type(DType::Float32, out.dims)));
}

template <class Params>
void bernoulli(LayerContext& layer, const Params& params, const OutputShape& out) {
  require(params.prob() >= 0 && params.prob() <= 1, "prob ", params.prob(), " is not in [0, 1]");
  layer.set_output(0, layer.emit1("random_bernoulli",
                                  {{"shape", {out.shape}}, {"prob", {float_scalar(params.prob())}},
                                   {"seed", {seed_value(params.seed())}}},
                                  tensor_type(DType::Float32, out.dims)));
}

// One translator per (distribution, shape source) pair.
template <class Params, OutputShape (*Shape)(LayerContext&), void (*Draw)(LayerContext&, const Params&, const OutputShape&)>
void random_layer(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<Params>();
  Draw(layer, params, Shape(layer));
}

template <class Params, void (*Draw)(LayerContext&, const Params&, const OutputShape&)>
void random_static_layer(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(0, 0, 1);
  const auto params = layer.parse_params<Params>();
  Draw(layer, params, static_shape(params.outputshape()));
}

// numSamples class indices drawn along the last axis, whose sizes are logits (isLogits) or
// probabilities: the output is the input's shape with the last axis numSamples long, the
// indices as fp32. The specification does not say how eps and temperature enter the
// distribution; coremltools lowers random_categorical (docs/design/coreml-format.md, "Random ops") to this
// layer with eps = 1e-10 and temperature = 1 (its NeuralNetworkBuilder defaults, which its op mapping
// leaves as they are), so the two are the same distribution for those values, and other
// values are refused rather than guessed at.
constexpr float kLoweredEps = 1e-10f;

void categorical_distribution(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::CategoricalDistributionLayerParams>();
  require(params.temperature() == 1.0f, "temperature ", params.temperature(),
          " is not 1; the specification does not define how temperature scales the distribution");
  require(params.eps() == kLoweredEps, "eps ", params.eps(),
          " is not 1e-10; the specification does not define how eps enters the distribution");
  require(params.numsamples() >= 1 && params.numsamples() < (int64_t{1} << 31), "numSamples ", params.numsamples(),
          " is out of range");
  const Value& x = ranked_input(layer, 0, 1);
  std::vector<int64_t> dims = x.type.dims;
  dims.back() = params.numsamples();
  layer.set_output(0, layer.emit1("random_categorical",
                                  {{"x", {x}}, {"mode", {string_scalar(params.islogits() ? "logits" : "probs")}},
                                   {"size", {int_scalar(static_cast<int32_t>(params.numsamples()))}},
                                   {"seed", {seed_value(params.seed())}}},
                                  tensor_type(DType::Float32, dims)));
}

}  // namespace

void register_random_layers(LayerTable& table) {
  table[1170] = random_layer<nn::RandomNormalLikeLayerParams, like_shape, normal>;
  table[1175] = random_static_layer<nn::RandomNormalStaticLayerParams, normal>;
  table[1180] = random_layer<nn::RandomNormalDynamicLayerParams, dynamic_shape, normal>;
  table[1190] = random_layer<nn::RandomUniformLikeLayerParams, like_shape, uniform>;
  table[1195] = random_static_layer<nn::RandomUniformStaticLayerParams, uniform>;
  table[1200] = random_layer<nn::RandomUniformDynamicLayerParams, dynamic_shape, uniform>;
  table[1210] = random_layer<nn::RandomBernoulliLikeLayerParams, like_shape, bernoulli>;
  table[1215] = random_static_layer<nn::RandomBernoulliStaticLayerParams, bernoulli>;
  table[1220] = random_layer<nn::RandomBernoulliDynamicLayerParams, dynamic_shape, bernoulli>;
  table[1230] = categorical_distribution;
}

}  // namespace coremlrt::format::neural_network
