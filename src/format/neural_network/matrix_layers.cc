// The matrix family: batchedMatmul (matmul, or linear for a weight matrix), embedding and
// embeddingND (a gather of the weight matrix's columns), oneHot, and the triangular and band
// masks (band_part, with a select where band_part alone cannot express the mask). Indices
// arrive as fp32 blobs and are cast to int32 (truncating, as their values are integers).
#include <limits>

#include "format/neural_network/layer_translator.h"
#include "nn_matrix.pb.h"

namespace coremlrt::format::neural_network {
namespace {

int64_t checked_size(uint64_t value, const char* what) {
  require(value > 0 && value <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max()), what, " is ", value);
  return static_cast<int64_t>(value);
}

Value as_indices(LayerContext& layer, const Value& x) {
  ir::ValueType type = x.type;
  type.dtype = DType::Int32;
  return layer.emit1("cast", {{"x", {x}}, {"dtype", {string_scalar("int32")}}}, type);
}

// The [rows, cols] weight matrix stored row-major, transposed to [cols, rows].
std::vector<float> transposed(const std::vector<float>& w, int64_t rows, int64_t cols) {
  std::vector<float> out(w.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = w[r * cols + c];
  return out;
}

void batched_matmul(LayerContext& layer) {
  layer.expect_io(1, 2, 1);
  const auto params = layer.parse_params<nn::BatchedMatMulLayerParams>();
  require(!params.int8dynamicquantize() || layer.input_count() == 1,
          "int8DynamicQuantize requires one input (NeuralNetwork.proto); this layer has 2");
  if (layer.input_count() == 2) {
    // A vector A is a row [1, K] and a vector B a column [K, 1]; the product keeps those axes.
    auto as_matrix = [&](const Value& v, int64_t axis) {
      if (v.type.rank != 1) return v;
      ir::ValueType t = v.type;
      t.dims.insert(t.dims.begin() + axis, 1);
      t.rank = 2;
      return layer.emit1("expand_dims", {{"x", {v}}, {"axes", {int_vector({axis})}}}, t);
    };
    const Value a = as_matrix(layer.input(0), 0), b = as_matrix(layer.input(1), 1);
    require(a.type.rank >= 2 && b.type.rank >= 2, "inputs have ranks ", a.type.rank, " and ", b.type.rank,
            "; this build multiplies inputs of rank 1 or more");
    // The batch axes broadcast; the product is [.., M, K] x [.., K, N] after the transposes.
    ir::ValueType batch_a = a.type, batch_b = b.type;
    batch_a.dims.resize(batch_a.rank - 2), batch_a.rank -= 2;
    batch_b.dims.resize(batch_b.rank - 2), batch_b.rank -= 2;
    ir::ValueType y = broadcast_type(batch_a, batch_b);
    y.dims.push_back(a.type.dims[a.type.rank - (params.transposea() ? 1 : 2)]);
    y.dims.push_back(b.type.dims[b.type.rank - (params.transposeb() ? 2 : 1)]);
    y.rank += 2;
    layer.set_output(0, layer.emit1("matmul", {{"x", {a}}, {"y", {b}},
                                               {"transpose_x", {bool_scalar(params.transposea())}},
                                               {"transpose_y", {bool_scalar(params.transposeb())}}},
                                    y));
    return;
  }
  const Value& a = layer.input(0);
  require(!params.transposea() && !params.transposeb(), "transposes apply to two inputs; with a weight matrix they are not supported by this build");
  const int64_t in = checked_size(params.weightmatrixfirstdimension(), "weightMatrixFirstDimension");
  const int64_t out = checked_size(params.weightmatrixseconddimension(), "weightMatrixSecondDimension");
  require(a.type.rank >= 1 && (a.type.dims.back() < 0 || a.type.dims.back() == in), "input ", a.type.str(),
          " does not end in weightMatrixFirstDimension = ", in);
  ir::ValueType y = a.type;
  y.dims.back() = out;
  // Stored as W^T, [Cout, Cin]: the layout of linear's weight (and of int8_dynamic_linear's,
  // src/ops/dynamic_quantization.cc, which runs the layer when int8DynamicQuantize is set).
  if (params.int8dynamicquantize()) {
    const Int8DynamicWeights w =
        read_int8_dynamic_weights(params.weights(), params.hasbias() ? &params.bias() : nullptr, in, out);
    OpInputs inputs{{"x", {a}}, {"weight", {w.weight}}, {"weight_scale", {w.weight_scale}}};
    if (w.bias) inputs.push_back({"bias", {*w.bias}});
    layer.set_output(0, layer.emit1("int8_dynamic_linear", inputs, y));
    return;
  }
  OpInputs inputs{{"x", {a}}, {"weight", {float_tensor(read_weights(params.weights(), in * out, "weights"), {out, in})}}};
  if (params.hasbias()) inputs.push_back({"bias", {float_tensor(read_weights(params.bias(), out, "bias values"), {out})}});
  layer.set_output(0, layer.emit1("linear", inputs, y));
}

// Looks up rows of `table` ([vocab, size]) for int32 indices; the result has the indices'
// shape with `size` appended, plus the bias.
Value lookup(LayerContext& layer, const Value& indices, std::vector<float> table, int64_t vocab, int64_t size,
             const nn::WeightParams* bias) {
  ir::ValueType type = indices.type;
  type.dtype = DType::Float32;
  type.dims.push_back(size);
  ++type.rank;
  Value y = layer.emit1("gather", {{"x", {float_tensor(std::move(table), {vocab, size})}}, {"indices", {indices}},
                                   {"axis", {int_scalar(0)}}, {"validate_indices", {bool_scalar(true)}}},
                        type);
  if (bias) y = layer.emit1("add", {{"x", {y}}, {"y", {float_tensor(read_weights(*bias, size, "bias values"), {size})}}}, type);
  return y;
}

// [.., 1, 1, 1] indices -> [.., outputChannels, 1, 1].
void embedding(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::EmbeddingLayerParams>();
  const int64_t vocab = checked_size(params.inputdim(), "inputDim"), size = checked_size(params.outputchannels(), "outputChannels");
  const Value& x = layer.input(0);
  require(x.type.rank >= 3, "input has rank ", x.type.rank, "; embedding reads [.., 1, 1, 1] indices");
  for (int i = 1; i <= 3; ++i)
    require(x.type.dims[x.type.rank - i] == 1, "input ", x.type.str(), " does not end in [1, 1, 1]");
  ir::ValueType lead = x.type;
  lead.dims.resize(lead.rank - 3);
  lead.rank -= 3;
  const Value squeezed = layer.emit1("squeeze", {{"x", {x}}, {"axes", {int_vector({-3, -2, -1})}}}, lead);
  const auto table = transposed(read_weights(params.weights(), vocab * size, "weights"), size, vocab);
  const Value y = lookup(layer, as_indices(layer, squeezed), table, vocab, size, params.hasbias() ? &params.bias() : nullptr);
  ir::ValueType out = y.type;
  out.dims.push_back(1), out.dims.push_back(1);
  out.rank += 2;
  layer.set_output(0, layer.emit1("expand_dims", {{"x", {y}}, {"axes", {int_vector({-2, -1})}}}, out));
}

// [.., 1] indices -> [.., embeddingSize].
void embedding_nd(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::EmbeddingNDLayerParams>();
  const int64_t vocab = checked_size(params.vocabsize(), "vocabSize"), size = checked_size(params.embeddingsize(), "embeddingSize");
  const Value& x = layer.input(0);
  require(x.type.rank >= 1 && x.type.dims.back() == 1, "input ", x.type.str(), " does not end in an axis of size 1");
  ir::ValueType lead = x.type;
  lead.dims.pop_back();
  --lead.rank;
  const Value squeezed = layer.emit1("squeeze", {{"x", {x}}, {"axes", {int_vector({-1})}}}, lead);
  const auto table = transposed(read_weights(params.weights(), vocab * size, "weights"), size, vocab);
  layer.set_output(0, lookup(layer, as_indices(layer, squeezed), table, vocab, size, params.hasbias() ? &params.bias() : nullptr));
}

// The size of the one-hot axis comes from the parameters or, with a second input, from that
// input's value at run time.
void one_hot(LayerContext& layer) {
  layer.expect_io(1, 2, 1);
  const auto params = layer.parse_params<nn::OneHotLayerParams>();
  const bool dynamic = layer.input_count() == 2;
  const int64_t depth = dynamic ? -1 : checked_size(params.onehotvectorsize(), "oneHotVectorSize");
  const Value& x = layer.input(0);
  const int64_t rank = x.type.rank + 1;
  require(params.axis() >= -rank && params.axis() < rank, "axis ", params.axis(), " is out of range for an output of rank ", rank);
  const int64_t axis = params.axis() < 0 ? params.axis() + rank : params.axis();
  ir::ValueType type = x.type;
  type.dims.insert(type.dims.begin() + axis, depth);
  type.rank = rank;
  const Value size = dynamic ? as_indices(layer, layer.input(1)) : int_scalar(static_cast<int32_t>(depth));
  layer.set_output(0, layer.emit1("one_hot", {{"indices", {as_indices(layer, x)}},
                                              {"one_hot_vector_size", {size}},
                                              {"axis", {int_scalar(static_cast<int32_t>(axis))}},
                                              {"on_value", {float_scalar(params.onvalue())}},
                                              {"off_value", {float_scalar(params.offvalue())}}},
                                  type));
}

Value band_part(LayerContext& layer, const Value& x, int64_t lower, int64_t upper) {
  require(lower >= std::numeric_limits<int32_t>::min() && lower <= std::numeric_limits<int32_t>::max() &&
              upper >= std::numeric_limits<int32_t>::min() && upper <= std::numeric_limits<int32_t>::max(),
          "band limits ", lower, " and ", upper, " do not fit 32 bits");
  return layer.emit1("band_part", {{"x", {x}}, {"lower", {int_scalar(static_cast<int32_t>(lower))}},
                                   {"upper", {int_scalar(static_cast<int32_t>(upper))}}},
                     x.type);
}

// x with the elements inside band (lower, upper) set to 0: the band of a tensor of ones
// marks them, and select keeps x elsewhere (exact also for infinities and NaN).
Value zero_band(LayerContext& layer, const Value& x, int64_t lower, int64_t upper) {
  const Value shape = layer.emit1("shape", {{"x", {x}}}, tensor_type(DType::Int32, {x.type.rank}));
  const Value ones = layer.emit1("fill", {{"shape", {shape}}, {"value", {float_scalar(1.0f)}}}, x.type);
  const Value band = band_part(layer, ones, lower, upper);
  ir::ValueType cond = x.type;
  cond.dtype = DType::Bool;
  const Value outside = layer.emit1("equal", {{"x", {band}}, {"y", {float_scalar(0.0f)}}}, cond);
  return layer.emit1("select", {{"cond", {outside}}, {"a", {x}}, {"b", {float_scalar(0.0f)}}}, x.type);
}

// Keeps the elements with column - row <= k (numpy.tril).
void lower_triangular(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const int64_t k = layer.parse_params<nn::LowerTriangularLayerParams>().k();
  const Value& x = layer.input(0);
  require(x.type.rank >= 2, "input has rank ", x.type.rank, "; it needs 2 axes");
  // k >= 0: a band of all rows below and k diagonals above; k < 0: drop column - row >= k + 1.
  layer.set_output(0, k >= 0 ? band_part(layer, x, -1, k) : zero_band(layer, x, -(k + 1), -1));
}

// Keeps the elements with column - row >= k (numpy.triu).
void upper_triangular(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const int64_t k = layer.parse_params<nn::UpperTriangularLayerParams>().k();
  const Value& x = layer.input(0);
  require(x.type.rank >= 2, "input has rank ", x.type.rank, "; it needs 2 axes");
  // k <= 0: a band of -k diagonals below and all above; k > 0: drop column - row <= k - 1.
  layer.set_output(0, k <= 0 ? band_part(layer, x, -k, -1) : zero_band(layer, x, -1, k - 1));
}

// Keeps numLower diagonals below and numUpper above (negative: all of them).
void matrix_band_part(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::MatrixBandPartLayerParams>();
  const Value& x = layer.input(0);
  require(x.type.rank >= 2, "input has rank ", x.type.rank, "; it needs 2 axes");
  layer.set_output(0, band_part(layer, x, params.numlower() < 0 ? -1 : params.numlower(),
                                params.numupper() < 0 ? -1 : params.numupper()));
}

}  // namespace

void register_matrix_layers(LayerTable& table) {
  table[150] = embedding;
  table[1040] = embedding_nd;
  table[1045] = batched_matmul;
  table[1450] = one_hot;
  table[1315] = matrix_band_part;
  table[1320] = lower_triangular;
  table[1325] = upper_triangular;
}

}  // namespace coremlrt::format::neural_network
