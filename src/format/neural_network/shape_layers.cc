// The legacy data-movement layers, which address the axes of [Seq, Batch, C, H, W] blobs
// (NeuralNetwork.proto): loadConstant, reshape, flatten, permute, concat, split,
// sequenceRepeat and slice, lowered onto reshape, transpose, concat, split, tile and
// slice_by_index.
#include "format/neural_network/shape_values.h"
#include "nn_shape.pb.h"

namespace coremlrt::format::neural_network {
namespace {

void load_constant(LayerContext& layer) {
  layer.expect_io(0, 0, 1);
  const auto params = layer.parse_params<nn::LoadConstantLayerParams>();
  require(params.shape_size() == 3, "shape has ", params.shape_size(), " entries; expected [C, H, W]");
  std::vector<int64_t> dims{1, 1};
  for (uint64_t d : params.shape()) {
    require(d > 0 && d < (uint64_t{1} << 31), "shape entry ", d, " is out of range");
    dims.push_back(static_cast<int64_t>(d));
  }
  layer.set_output(0, float_tensor(read_weights(params.data(), product(dims), "constant values"), dims));
}

// CHANNEL_FIRST reshapes the row-major [C, H, W] data directly; CHANNEL_LAST reads it in
// [H, W, C] order, reshapes that to [H', W', C'] and moves C' back in front.
void reshape(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ReshapeLayerParams>();
  const Value& x = ranked_input(layer, 0, 5, 5);
  const auto& d = x.type.dims;
  require(x.type.is_static(), "input ", x.type.str(), " has sizes unknown before prediction");
  const int n = params.targetshape_size();
  require(n == 3 || n == 4, "targetShape has ", n, " entries; expected [C, H, W] or [Seq, C, H, W]");
  for (int64_t t : params.targetshape()) require(t > 0, "targetShape entry ", t, " is not positive");
  const auto& t = params.targetshape();
  std::vector<int64_t> out;
  if (n == 3) {
    out = {d[0], d[1], t[0], t[1], t[2]};
  } else {
    // The sequence axis takes part in the reshape, which the schema describes for Batch 1.
    require(d[1] == 1, "input ", x.type.str(), " has Batch ", d[1], "; a 4-entry targetShape needs Batch 1");
    out = {t[0], 1, t[1], t[2], t[3]};
  }
  require(product(out) == product(d), "input ", x.type.str(), " does not hold the ", product(out), " values of ",
          tensor_type(x.type.dtype, out).str());
  switch (params.mode()) {
    case nn::ReshapeLayerParams::CHANNEL_FIRST: layer.set_output(0, reshape_to(layer, x, out)); return;
    case nn::ReshapeLayerParams::CHANNEL_LAST: {
      const Value channels_last = transpose(layer, x, {0, 1, 3, 4, 2});
      const Value reshaped = reshape_to(layer, channels_last, {out[0], out[1], out[3], out[4], out[2]});
      layer.set_output(0, transpose(layer, reshaped, {0, 1, 4, 2, 3}));
      return;
    }
    default: refuse("unknown reshape mode ", static_cast<int>(params.mode()));
  }
}

// [..., C, H, W] -> [..., C*H*W, 1, 1], in C-major (CHANNEL_FIRST) or [H, W, C] order. C*H*W
// may be unknown until prediction (a sequence permuted into W, say) when the leading sizes are
// known: the reshape infers it.
void flatten(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::FlattenLayerParams>();
  Value x = ranked_input(layer, 0, 3);
  const int64_t rank = x.type.rank;
  const std::vector<int64_t> tail(x.type.dims.end() - 3, x.type.dims.end());
  const std::vector<int64_t> lead(x.type.dims.begin(), x.type.dims.end() - 3);
  require(product(tail) >= 0 || product(lead) >= 0, "input ", x.type.str(),
          " has C, H or W and a leading size unknown before prediction");
  if (params.mode() == nn::FlattenLayerParams::CHANNEL_LAST) {
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < rank - 3; ++i) perm.push_back(i);
    perm.insert(perm.end(), {rank - 2, rank - 1, rank - 3});
    x = transpose(layer, x, perm);
  } else {
    require(params.mode() == nn::FlattenLayerParams::CHANNEL_FIRST, "unknown flatten mode ", static_cast<int>(params.mode()));
  }
  std::vector<int64_t> out(x.type.dims.begin(), x.type.dims.end() - 3);
  out.insert(out.end(), {product(tail), 1, 1});
  layer.set_output(0, reshape_to(layer, x, out));
}

// `axis` permutes (Seq, C, H, W), the axes 0, 2, 3, 4 of the blob; Batch (axis 1) stays.
void permute(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::PermuteLayerParams>();
  const Value& x = ranked_input(layer, 0, 5, 5);
  if (params.axis_size() == 0) {
    layer.set_output(0, x);
    return;
  }
  require(params.axis_size() == 4, "axis has ", params.axis_size(), " entries; expected 4");
  std::vector<bool> seen(4, false);
  for (uint64_t a : params.axis()) {
    require(a < 4 && !seen[a], "axis [", params.axis(0), ", ", params.axis(1), ", ", params.axis(2), ", ",
            params.axis(3), "] is not a permutation of 0-3");
    seen[a] = true;
  }
  auto blob_axis = [](uint64_t a) { return a == 0 ? int64_t{0} : static_cast<int64_t>(a) + 1; };
  layer.set_output(0, transpose(layer, x, {blob_axis(params.axis(0)), 1, blob_axis(params.axis(1)),
                                           blob_axis(params.axis(2)), blob_axis(params.axis(3))}));
}

Value concat_along(LayerContext& layer, int64_t axis, int64_t min_rank) {
  std::vector<Value> values;
  const Value& first = ranked_input(layer, 0, min_rank);
  std::vector<int64_t> dims = first.type.dims;
  const int64_t a = positive_axis(axis, first.type.rank);
  dims[a] = 0;
  for (int i = 0; i < layer.input_count(); ++i) {
    const Value& v = ranked_input(layer, i, first.type.rank, first.type.rank);
    dims[a] = dims[a] < 0 || v.type.dims[a] < 0 ? -1 : dims[a] + v.type.dims[a];
    values.push_back(v);
  }
  return layer.emit1("concat", {{"values", values}, {"axis", {int_scalar(static_cast<int32_t>(axis))}},
                                {"interleave", {bool_scalar(false)}}},
                     tensor_type(first.type.dtype, dims));
}

void concat(LayerContext& layer) {
  layer.expect_io(1, kManyInputs, 1);
  const bool sequence = layer.parse_params<nn::ConcatLayerParams>().sequenceconcat();
  layer.set_output(0, concat_along(layer, sequence ? -5 : -3, sequence ? 5 : 3));
}

void split(LayerContext& layer) {
  const int outputs = layer.output_count();
  layer.expect_io(1, 1, outputs);
  const auto params = layer.parse_params<nn::SplitLayerParams>();
  require(outputs > 0 && params.noutputs() == static_cast<uint64_t>(outputs), "nOutputs is ", params.noutputs(),
          " but the layer has ", outputs, " outputs");
  const Value& x = ranked_input(layer, 0, 3);
  std::vector<int64_t> dims = x.type.dims;
  int64_t& c = dims[x.type.rank - 3];
  require(c < 0 || c % outputs == 0, "input ", x.type.str(), " has ", c, " channels, which do not split into ",
          outputs, " equal parts");
  if (c > 0) c /= outputs;
  const std::vector<Value> parts =
      layer.emit("split", {{"x", {x}}, {"axis", {int_scalar(-3)}}, {"num_splits", {int_scalar(outputs)}}},
                 std::vector<ir::ValueType>(outputs, tensor_type(x.type.dtype, dims)));
  for (int i = 0; i < outputs; ++i) layer.set_output(i, parts[i]);
}

void sequence_repeat(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const uint64_t n = layer.parse_params<nn::SequenceRepeatLayerParams>().nrepetitions();
  require(n > 0 && n < (uint64_t{1} << 31), "nRepetitions is ", n);
  const Value& x = ranked_input(layer, 0, 5);
  std::vector<int64_t> reps(x.type.rank, 1), dims = x.type.dims;
  int64_t& seq = dims[x.type.rank - 5];
  reps[x.type.rank - 5] = static_cast<int64_t>(n);
  if (seq >= 0) seq *= static_cast<int64_t>(n);
  layer.set_output(0, layer.emit1("tile", {{"x", {x}}, {"reps", {int_vector(reps)}}}, tensor_type(x.type.dtype, dims)));
}

// Python's x[start:end:stride] along one of the last three axes (negative indices count from
// the end, and the range is clipped to the axis): slice_by_index with that axis unmasked.
void slice(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::SliceLayerParams>();
  int64_t from_end = 0;
  switch (params.axis()) {
    case nn::SliceLayerParams::CHANNEL_AXIS: from_end = 3; break;
    case nn::SliceLayerParams::HEIGHT_AXIS: from_end = 2; break;
    case nn::SliceLayerParams::WIDTH_AXIS: from_end = 1; break;
    default: refuse("unknown slice axis ", static_cast<int>(params.axis()));
  }
  const Value& x = ranked_input(layer, 0, from_end);
  require(params.stride() > 0 && params.stride() < (uint64_t{1} << 31), "stride is ", params.stride(),
          "; it must be positive");
  const int64_t rank = x.type.rank, axis = rank - from_end;
  const int64_t start = params.startindex(), end = params.endindex(), stride = static_cast<int64_t>(params.stride());
  std::vector<int64_t> begin(rank, 0), stop(rank, 0), strides(rank, 1);
  std::vector<bool> begin_mask(rank, true), end_mask(rank, true);
  begin[axis] = start;
  stop[axis] = end;
  strides[axis] = stride;
  begin_mask[axis] = end_mask[axis] = false;
  std::vector<int64_t> dims = x.type.dims;
  if (const int64_t n = dims[axis]; n >= 0) {
    const int64_t b = std::clamp(start < 0 ? start + n : start, int64_t{0}, n);
    const int64_t e = std::clamp(end < 0 ? end + n : end, int64_t{0}, n);
    dims[axis] = e > b ? (e - b + stride - 1) / stride : 0;
  }
  layer.set_output(0, layer.emit1("slice_by_index",
                                  {{"x", {x}}, {"begin", {int_vector(begin)}}, {"end", {int_vector(stop)}},
                                   {"stride", {int_vector(strides)}}, {"begin_mask", {bool_vector(begin_mask)}},
                                   {"end_mask", {bool_vector(end_mask)}}},
                                  tensor_type(x.type.dtype, dims)));
}

}  // namespace

void register_shape_layers(LayerTable& table) {
  table[290] = load_constant;
  table[300] = reshape;
  table[301] = flatten;
  table[310] = permute;
  table[320] = concat;
  table[330] = split;
  table[340] = sequence_repeat;
  table[350] = slice;
}

}  // namespace coremlrt::format::neural_network
