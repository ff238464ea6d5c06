// The element-wise math family: the rank-5 era layers (unary, add, multiply, average, max,
// min, bias, scale, dot), the broadcastable binary layers, comparisons, logical layers and
// the element-wise functions (clip, ceil, ..., erf). Each lowers onto the binary and unary
// ops of src/ops/elementwise_binary.cc and elementwise_unary.cc, which broadcast as numpy
// does; that covers the rank-5 layout's broadcasts too, since a [C] or [1, H, W] operand is a
// [1, 1, C, 1, 1] or [1, 1, 1, H, W] blob there. Comparisons and logical layers produce 1.0
// and 0.0, as every blob of the layer graph is fp32.
#include "format/neural_network/layer_translator.h"
#include "nn_elementwise.pb.h"

namespace coremlrt::format::neural_network {
namespace {

Value binary(LayerContext& layer, const char* op, const Value& x, const Value& y) {
  return layer.emit1(op, {{"x", {x}}, {"y", {y}}}, broadcast_type(x.type, y.type));
}

Value unary(LayerContext& layer, const char* op, const Value& x, OpInputs extra = {}) {
  OpInputs inputs{{"x", {x}}};
  for (auto& entry : extra) inputs.push_back(std::move(entry));
  return layer.emit1(op, inputs, x.type);
}

// Folds the layer's inputs left to right with `op`.
Value fold_inputs(LayerContext& layer, const char* op) {
  Value acc = layer.input(0);
  for (int i = 1; i < layer.input_count(); ++i) acc = binary(layer, op, acc, layer.input(i));
  return acc;
}

// add (230) and multiply (231): one input combines with alpha, several combine together.
template <class Params>
void add_or_multiply(LayerContext& layer, const char* op) {
  layer.expect_io(1, 1 << 20, 1);
  if (layer.input_count() == 1) {
    const auto params = layer.parse_params<Params>();
    layer.set_output(0, binary(layer, op, layer.input(0), float_scalar(params.alpha())));
    return;
  }
  layer.set_output(0, fold_inputs(layer, op));
}

void add(LayerContext& layer) { add_or_multiply<nn::AddLayerParams>(layer, "add"); }
void multiply(LayerContext& layer) { add_or_multiply<nn::MultiplyLayerParams>(layer, "mul"); }

void average(LayerContext& layer) {
  layer.expect_io(1, 1 << 20, 1);
  const Value sum = fold_inputs(layer, "add");
  layer.set_output(0, binary(layer, "real_div", sum, float_scalar(static_cast<float>(layer.input_count()))));
}

void max_layer(LayerContext& layer) {
  layer.expect_io(1, 1 << 20, 1);
  layer.set_output(0, fold_inputs(layer, "maximum"));
}

void min_layer(LayerContext& layer) {
  layer.expect_io(1, 1 << 20, 1);
  layer.set_output(0, fold_inputs(layer, "minimum"));
}

void unary_function(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::UnaryFunctionLayerParams>();
  Value x = layer.input(0);
  // The schema's defaults: scale 0 means 1, epsilon 0 means 1e-6.
  const float scale = params.scale() != 0 ? params.scale() : 1.0f;
  const float epsilon = params.epsilon() != 0 ? params.epsilon() : 1e-6f;
  if (scale != 1.0f) x = binary(layer, "mul", x, float_scalar(scale));
  if (params.shift() != 0.0f) x = binary(layer, "add", x, float_scalar(params.shift()));
  using U = nn::UnaryFunctionLayerParams;
  Value y;
  switch (params.type()) {
    case U::SQRT: y = unary(layer, "sqrt", x); break;
    case U::RSQRT: y = unary(layer, "rsqrt", x, {{"epsilon", {float_scalar(epsilon)}}}); break;
    case U::INVERSE: y = unary(layer, "inverse", x, {{"epsilon", {float_scalar(epsilon)}}}); break;
    case U::POWER: y = binary(layer, "pow", x, float_scalar(params.alpha())); break;
    case U::EXP: y = unary(layer, "exp", x); break;
    case U::LOG: y = unary(layer, "log", x, {{"epsilon", {float_scalar(epsilon)}}}); break;
    case U::ABS: y = unary(layer, "abs", x); break;
    case U::THRESHOLD: y = unary(layer, "threshold", x, {{"alpha", {float_scalar(params.alpha())}}}); break;
    default: refuse("unknown unary function ", static_cast<int>(params.type()));
  }
  layer.set_output(0, y);
}

// A bias or scale operand of shape [1], [C], [1, H, W] or [C, H, W], as a constant that
// broadcasts against the input's last three axes.
Value chw_operand(LayerContext& layer, const google::protobuf::RepeatedField<uint64_t>& shape,
                  const nn::WeightParams& weights, const char* what) {
  std::vector<int64_t> dims(shape.begin(), shape.end());
  uint64_t count = 1;
  for (int64_t d : dims) {
    require(d > 0, what, " shape has a size of ", d);
    count *= static_cast<uint64_t>(d);
  }
  const ir::ValueType& x = layer.input(0).type;
  if (dims.size() == 1 && dims[0] == 1) return float_tensor(read_weights(weights, 1, what), {});
  if (dims.size() == 1) dims = {dims[0], 1, 1};
  require(dims.size() == 3, what, " shape has ", dims.size(), " axes; expected 1 or 3");
  require(x.rank >= 3, "input has rank ", x.rank, "; a ", what, " of shape [C, H, W] needs at least 3 axes");
  for (int i = 0; i < 3; ++i) {
    const int64_t actual = x.dims[x.rank - 3 + i];
    require(dims[i] == 1 || actual < 0 || actual == dims[i], what, " shape does not fit the input ", x.str());
  }
  return float_tensor(read_weights(weights, count, what), dims);
}

void bias(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::BiasLayerParams>();
  const Value b = chw_operand(layer, params.shape(), params.bias(), "bias");
  layer.set_output(0, binary(layer, "add", layer.input(0), b));
}

void scale(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ScaleLayerParams>();
  Value y = binary(layer, "mul", layer.input(0), chw_operand(layer, params.shapescale(), params.scale(), "scale"));
  if (params.hasbias()) y = binary(layer, "add", y, chw_operand(layer, params.shapebias(), params.bias(), "bias"));
  layer.set_output(0, y);
}

// The dot product over the channel axis (-3) of two [.., C, 1, 1] blobs, kept as size 1;
// cosineSimilarity divides it by the product of the two L2 norms.
void dot(LayerContext& layer) {
  layer.expect_io(2, 2, 1);
  const auto params = layer.parse_params<nn::DotProductLayerParams>();
  const Value &a = layer.input(0), &b = layer.input(1);
  require(a.type.rank >= 3 && b.type.rank >= 3, "inputs have ranks ", a.type.rank, " and ", b.type.rank,
          "; dot needs [C, 1, 1] axes");
  auto reduce_c = [&](const char* op, const Value& v) {
    ir::ValueType type = v.type;
    type.dims[type.rank - 3] = 1;
    return layer.emit1(op, {{"x", {v}}, {"axes", {int_vector({-3})}}, {"keep_dims", {bool_scalar(true)}}}, type);
  };
  Value y = reduce_c("reduce_sum", binary(layer, "mul", a, b));
  if (params.cosinesimilarity())
    y = binary(layer, "real_div", y, binary(layer, "mul", reduce_c("reduce_l2_norm", a), reduce_c("reduce_l2_norm", b)));
  layer.set_output(0, y);
}

// The broadcastable binary layers (two inputs, numpy broadcasting).
template <const char* kOp>
void broadcastable(LayerContext& layer) {
  layer.expect_io(2, 2, 1);
  layer.set_output(0, binary(layer, kOp, layer.input(0), layer.input(1)));
}

// max and min broadcastable layers take two or more inputs.
template <const char* kOp>
void broadcastable_variadic(LayerContext& layer) {
  layer.expect_io(2, 1 << 20, 1);
  layer.set_output(0, fold_inputs(layer, kOp));
}

constexpr char kAdd[] = "add", kSub[] = "sub", kMul[] = "mul", kDiv[] = "real_div", kMax[] = "maximum",
               kMin[] = "minimum", kMod[] = "mod", kFloorDiv[] = "floor_div", kPow[] = "pow";

// Comparisons: two inputs, or one input against alpha.
template <class Params, const char* kOp>
void comparison(LayerContext& layer) {
  layer.expect_io(1, 2, 1);
  const Value& x = layer.input(0);
  const Value y = layer.input_count() == 2 ? layer.input(1) : float_scalar(layer.parse_params<Params>().alpha());
  ir::ValueType type = broadcast_type(x.type, y.type);
  type.dtype = DType::Bool;
  layer.set_output(0, as_float_blob(layer, layer.emit1(kOp, {{"x", {x}}, {"y", {y}}}, type)));
}

constexpr char kGreater[] = "greater", kGreaterEqual[] = "greater_equal", kLess[] = "less",
               kLessEqual[] = "less_equal", kEqual[] = "equal", kNotEqual[] = "not_equal";

// A blob as truth values: any value other than 0 is true.
Value truth(LayerContext& layer, const Value& x) {
  ir::ValueType type = x.type;
  type.dtype = DType::Bool;
  return layer.emit1("not_equal", {{"x", {x}}, {"y", {float_scalar(0.0f)}}}, type);
}

template <const char* kOp>
void logical(LayerContext& layer) {
  layer.expect_io(2, 1 << 20, 1);
  Value acc = truth(layer, layer.input(0));
  for (int i = 1; i < layer.input_count(); ++i) acc = binary(layer, kOp, acc, truth(layer, layer.input(i)));
  layer.set_output(0, as_float_blob(layer, acc));
}

constexpr char kAnd[] = "logical_and", kOr[] = "logical_or", kXor[] = "logical_xor";

void logical_not(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const Value t = truth(layer, layer.input(0));
  layer.set_output(0, as_float_blob(layer, unary(layer, "logical_not", t)));
}

void clip(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ClipLayerParams>();
  layer.set_output(0, unary(layer, "clip", layer.input(0),
                            {{"alpha", {float_scalar(params.minval())}}, {"beta", {float_scalar(params.maxval())}}}));
}

// The element-wise functions without parameters, each one unary op of the same meaning.
template <const char* kOp>
void function(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  layer.set_output(0, unary(layer, kOp, layer.input(0)));
}

constexpr char kCeil[] = "ceil", kFloor[] = "floor", kSign[] = "sign", kRound[] = "round", kExp2[] = "exp2",
               kSin[] = "sin", kCos[] = "cos", kTan[] = "tan", kAsin[] = "asin", kAcos[] = "acos", kAtan[] = "atan",
               kSinh[] = "sinh", kCosh[] = "cosh", kTanh[] = "tanh", kAsinh[] = "asinh", kAcosh[] = "acosh",
               kAtanh[] = "atanh", kErf[] = "erf";

}  // namespace

void register_elementwise_layers(LayerTable& table) {
  table[220] = unary_function;
  table[230] = add;
  table[231] = multiply;
  table[240] = average;
  table[245] = scale;
  table[250] = bias;
  table[260] = max_layer;
  table[261] = min_layer;
  table[270] = dot;
  table[660] = clip;
  table[665] = function<kCeil>;
  table[670] = function<kFloor>;
  table[680] = function<kSign>;
  table[685] = function<kRound>;
  table[700] = function<kExp2>;
  table[710] = function<kSin>;
  table[715] = function<kCos>;
  table[720] = function<kTan>;
  table[730] = function<kAsin>;
  table[735] = function<kAcos>;
  table[740] = function<kAtan>;
  table[750] = function<kSinh>;
  table[755] = function<kCosh>;
  table[760] = function<kTanh>;
  table[770] = function<kAsinh>;
  table[775] = function<kAcosh>;
  table[780] = function<kAtanh>;
  table[790] = function<kErf>;
  table[815] = comparison<nn::EqualLayerParams, kEqual>;
  table[820] = comparison<nn::NotEqualLayerParams, kNotEqual>;
  table[825] = comparison<nn::LessThanLayerParams, kLess>;
  table[827] = comparison<nn::LessEqualLayerParams, kLessEqual>;
  table[830] = comparison<nn::GreaterThanLayerParams, kGreater>;
  table[832] = comparison<nn::GreaterEqualLayerParams, kGreaterEqual>;
  table[840] = logical<kOr>;
  table[845] = logical<kXor>;
  table[850] = logical_not;
  table[855] = logical<kAnd>;
  table[865] = broadcastable<kMod>;
  table[870] = broadcastable_variadic<kMin>;
  table[875] = broadcastable_variadic<kMax>;
  table[880] = broadcastable<kAdd>;
  table[885] = broadcastable<kPow>;
  table[890] = broadcastable<kDiv>;
  table[895] = broadcastable<kFloorDiv>;
  table[900] = broadcastable<kMul>;
  table[905] = broadcastable<kSub>;
}

}  // namespace coremlrt::format::neural_network
