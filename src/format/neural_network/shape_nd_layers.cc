// The rank-N data-movement layers of the exact-rank layout (NeuralNetwork.proto): copy,
// reshapeStatic/Like/Dynamic, flattenTo2D, squeeze, expandDims, transpose, concatND, stack, splitND,
// sliceStatic/Dynamic/BySize, slidingWindows, tile, getShape and constantPad. Each maps onto the op
// of the same meaning; shapes read from blobs are cast from fp32 (shape_values.h).
#include <algorithm>

#include "format/neural_network/shape_values.h"
#include "nn_shape_nd.pb.h"

namespace coremlrt::format::neural_network {
namespace {

void copy(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  layer.set_output(0, layer.input(0));
}

// targetShape may hold one -1, inferred from the input's size.
void reshape_static(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ReshapeStaticLayerParams>();
  const Value& x = ranked_input(layer, 0, 0);
  std::vector<int64_t> dims(params.targetshape().begin(), params.targetshape().end());
  require(!dims.empty(), "targetShape is empty");
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    require(dims[i] > 0 || (dims[i] == -1 && inferred < 0), "targetShape entry ", dims[i], " is not supported");
    if (dims[i] == -1) inferred = static_cast<int64_t>(i);
    else known *= dims[i];
  }
  std::vector<int64_t> out = dims;
  if (const int64_t total = product(x.type.dims); total >= 0) {
    require(inferred >= 0 ? total % known == 0 : total == known, "input ", x.type.str(), " cannot take targetShape");
    if (inferred >= 0) out[inferred] = total / known;
  }
  layer.set_output(0, layer.emit1("reshape", {{"x", {x}}, {"shape", {int_vector(dims)}}}, tensor_type(x.type.dtype, out)));
}

void reshape_like(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(2, 2, 1);
  layer.parse_params<nn::ReshapeLikeLayerParams>();
  const Value& x = ranked_input(layer, 0, 0);
  const Value& like = ranked_input(layer, 1, 0);
  const Value shape = layer.emit1("shape", {{"x", {like}}}, tensor_type(DType::Int32, {like.type.rank}));
  layer.set_output(0, layer.emit1("reshape", {{"x", {x}}, {"shape", {shape}}}, tensor_type(x.type.dtype, like.type.dims)));
}

void reshape_dynamic(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(2, 2, 1);
  layer.parse_params<nn::ReshapeDynamicLayerParams>();
  const Value& x = ranked_input(layer, 0, 0);
  const ShapeInput shape = shape_input(layer, 1);
  layer.set_output(0, layer.emit1("reshape", {{"x", {x}}, {"shape", {shape.sizes}}}, tensor_type(x.type.dtype, shape.dims)));
}

// targetShape has one entry per axis of the input: 0 keeps that axis's size, -1 (at most one)
// is inferred from the input's size. reshape reads 0 the same way when its shape has the
// input's rank (docs/design/coreml-format.md, "Tensor transformations"), so targetShape is passed as it is.
void rank_preserving_reshape(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::RankPreservingReshapeLayerParams>();
  const Value& x = ranked_input(layer, 0, 1);
  const std::vector<int64_t> target(params.targetshape().begin(), params.targetshape().end());
  require(static_cast<int64_t>(target.size()) == x.type.rank, "targetShape has ", target.size(),
          " entries for an input of rank ", x.type.rank);
  std::vector<int64_t> dims(target.size());
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    require(target[i] >= 0 || (target[i] == -1 && inferred < 0), "targetShape entry ", target[i], " is not supported");
    dims[i] = target[i] == 0 ? x.type.dims[i] : target[i];
    if (target[i] == -1) inferred = static_cast<int64_t>(i);
    else if (known >= 0) known = dims[i] < 0 ? -1 : known * dims[i];
  }
  if (const int64_t total = product(x.type.dims); total >= 0 && known >= 0) {
    require(inferred >= 0 ? known > 0 && total % known == 0 : total == known, "input ", x.type.str(),
            " cannot take targetShape");
    if (inferred >= 0) dims[inferred] = total / known;
  }
  layer.set_output(0, layer.emit1("reshape", {{"x", {x}}, {"shape", {int_vector(target)}}}, tensor_type(x.type.dtype, dims)));
}

// [d0 ... d(axis-1) | d(axis) ...] -> [product of the first, product of the rest].
void flatten_to_2d(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const Value& x = ranked_input(layer, 0, 1);
  const int64_t rank = x.type.rank;
  int64_t axis = layer.parse_params<nn::FlattenTo2DLayerParams>().axis();
  require(axis >= -rank && axis <= rank, "axis ", axis, " does not fit an input of rank ", rank);
  if (axis < 0) axis += rank;
  const auto& d = x.type.dims;
  const std::vector<int64_t> outer(d.begin(), d.begin() + axis), inner(d.begin() + axis, d.end());
  const std::vector<int64_t> dims{product(outer), product(inner)};
  layer.set_output(0, layer.emit1("flatten2d", {{"x", {x}}, {"axis", {int_scalar(static_cast<int32_t>(axis))}}},
                                  tensor_type(x.type.dtype, dims)));
}

// Listed axes must have size 1; squeezeAll drops every axis of size 1, which needs the sizes
// at load. Dropping every axis gives [1] (NeuralNetwork.proto: rank 1 stays rank 1).
void squeeze(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::SqueezeLayerParams>();
  const Value& x = ranked_input(layer, 0, 1);
  const int64_t rank = x.type.rank;
  std::vector<bool> drop(rank, false);
  std::vector<int64_t> axes;
  if (params.squeezeall()) {
    require(x.type.is_static(), "squeezeAll needs the input's sizes at load; it is ", x.type.str());
    for (int64_t i = 0; i < rank; ++i)
      if (x.type.dims[i] == 1) drop[i] = true, axes.push_back(i);
  } else {
    require(params.axes_size() > 0, "lists no axes");
    for (int64_t a : params.axes()) {
      const int64_t p = positive_axis(a, rank);
      require(x.type.dims[p] <= 1 && x.type.dims[p] != 0, "axis ", a, " of ", x.type.str(), " does not have size 1");
      require(!drop[p], "lists axis ", a, " twice");
      drop[p] = true;
      axes.push_back(p);
    }
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < rank; ++i)
    if (!drop[i]) dims.push_back(x.type.dims[i]);
  if (axes.empty()) {
    layer.set_output(0, x);
    return;
  }
  // Squeezing every axis leaves [1]: blobs keep rank 1 or more.
  if (dims.empty()) {
    layer.set_output(0, reshape_to(layer, x, {1}));
    return;
  }
  layer.set_output(0, layer.emit1("squeeze", {{"x", {x}}, {"axes", {int_vector(axes)}}}, tensor_type(x.type.dtype, dims)));
}

// Axes count in the output's rank (negative ones from its end).
void expand_dims(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ExpandDimsLayerParams>();
  const Value& x = ranked_input(layer, 0, 0);
  const int64_t rank = x.type.rank + params.axes_size();
  require(params.axes_size() > 0, "lists no axes");
  std::vector<bool> added(rank, false);
  std::vector<int64_t> axes;
  for (int64_t a : params.axes()) {
    const int64_t p = positive_axis(a, rank);
    require(!added[p], "lists axis ", a, " twice");
    added[p] = true;
    axes.push_back(p);
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0, j = 0; i < rank; ++i) dims.push_back(added[i] ? 1 : x.type.dims[j++]);
  layer.set_output(0, layer.emit1("expand_dims", {{"x", {x}}, {"axes", {int_vector(axes)}}}, tensor_type(x.type.dtype, dims)));
}

void transpose_nd(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::TransposeLayerParams>();
  const Value& x = ranked_input(layer, 0, 1);
  require(params.axes_size() == x.type.rank, "axes has ", params.axes_size(), " entries for an input of rank ", x.type.rank);
  std::vector<bool> seen(x.type.rank, false);
  std::vector<int64_t> perm;
  for (uint64_t a : params.axes()) {
    require(a < seen.size() && !seen[a], "axes is not a permutation of the input's axes");
    seen[a] = true;
    perm.push_back(static_cast<int64_t>(a));
  }
  layer.set_output(0, transpose(layer, x, perm));
}

void concat_nd(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, kManyInputs, 1);
  const auto params = layer.parse_params<nn::ConcatNDLayerParams>();
  const Value& first = ranked_input(layer, 0, 1);
  const int64_t axis = positive_axis(params.axis(), first.type.rank);
  std::vector<Value> values;
  std::vector<int64_t> dims = first.type.dims;
  dims[axis] = 0;
  for (int i = 0; i < layer.input_count(); ++i) {
    const Value& v = ranked_input(layer, i, first.type.rank, first.type.rank);
    dims[axis] = dims[axis] < 0 || v.type.dims[axis] < 0 ? -1 : dims[axis] + v.type.dims[axis];
    values.push_back(v);
  }
  layer.set_output(0, layer.emit1("concat", {{"values", values}, {"axis", {int_scalar(static_cast<int32_t>(axis))}},
                                             {"interleave", {bool_scalar(params.interleave())}}},
                                  tensor_type(first.type.dtype, dims)));
}

// Inputs of one shape joined along a new axis of size input_count.
void stack_nd(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, kManyInputs, 1);
  const auto params = layer.parse_params<nn::StackLayerParams>();
  const Value& first = ranked_input(layer, 0, 0);
  const int64_t axis = positive_axis(params.axis(), first.type.rank + 1);
  std::vector<Value> values;
  std::vector<int64_t> dims = first.type.dims;
  for (int i = 0; i < layer.input_count(); ++i) {
    const Value& v = ranked_input(layer, i, first.type.rank, first.type.rank);
    for (size_t d = 0; d < dims.size(); ++d) {
      require(dims[d] < 0 || v.type.dims[d] < 0 || dims[d] == v.type.dims[d], "stacks inputs of different shapes, ",
              first.type.str(), " and ", v.type.str());
      if (dims[d] < 0) dims[d] = v.type.dims[d];
    }
    values.push_back(v);
  }
  dims.insert(dims.begin() + axis, layer.input_count());
  layer.set_output(0, layer.emit1("stack", {{"values", values}, {"axis", {int_scalar(static_cast<int32_t>(axis))}}},
                                  tensor_type(first.type.dtype, dims)));
}

// splitSizes, when given, set the parts; else numSplits (the output count) equal parts.
void split_nd(LayerContext& layer) {
  require_exact_layout(layer);
  const int outputs = layer.output_count();
  layer.expect_io(1, 1, outputs);
  const auto params = layer.parse_params<nn::SplitNDLayerParams>();
  const Value& x = ranked_input(layer, 0, 1);
  const int64_t axis = positive_axis(params.axis(), x.type.rank);
  const int64_t size = x.type.dims[axis];
  std::vector<ir::ValueType> types(outputs, x.type);
  OpInputs inputs{{"x", {x}}, {"axis", {int_scalar(static_cast<int32_t>(axis))}}};
  if (params.splitsizes_size() > 0) {
    require(params.splitsizes_size() == outputs, "splitSizes has ", params.splitsizes_size(), " entries for ", outputs,
            " outputs");
    std::vector<int64_t> sizes;
    int64_t total = 0;
    for (uint64_t s : params.splitsizes()) {
      require(s < (uint64_t{1} << 31), "split size ", s, " is out of range");
      sizes.push_back(static_cast<int64_t>(s));
      total += static_cast<int64_t>(s);
    }
    require(size < 0 || total == size, "splitSizes add up to ", total, " but axis ", axis, " of ", x.type.str(), " has ", size);
    for (int i = 0; i < outputs; ++i) types[i].dims[axis] = sizes[i];
    inputs.push_back({"split_sizes", {int_vector(sizes)}});
  } else {
    require(params.numsplits() == static_cast<uint64_t>(outputs), "numSplits is ", params.numsplits(), " but the layer has ",
            outputs, " outputs");
    if (size >= 0 && size % outputs != 0) {
      // Parts as numpy's array_split makes them: the first size % numSplits parts one longer.
      // coremltools' test_numpy_nn_layers.py test_split_nd expects this of Core ML for sizes
      // numSplits does not divide (and passes on macOS).
      require(size >= outputs, "axis ", axis, " of ", x.type.str(), " has fewer than ", outputs, " entries to split");
      std::vector<int64_t> sizes(outputs, size / outputs);
      for (int64_t i = 0; i < size % outputs; ++i) ++sizes[i];
      for (int i = 0; i < outputs; ++i) types[i].dims[axis] = sizes[i];
      inputs.push_back({"split_sizes", {int_vector(sizes)}});
    } else {
      for (auto& t : types) t.dims[axis] = size < 0 ? -1 : size / outputs;
      inputs.push_back({"num_splits", {int_scalar(outputs)}});
    }
  }
  const std::vector<Value> parts = layer.emit("split", inputs, types);
  for (int i = 0; i < outputs; ++i) layer.set_output(i, parts[i]);
}

// The output sizes of a strided slice along one axis (Python's rules; -1 when unknown).
int64_t sliced_size(int64_t n, int64_t begin, int64_t end, int64_t stride, bool begin_masked, bool end_masked) {
  if (n < 0) return -1;
  int64_t b, e;
  if (stride > 0) {
    b = begin_masked ? 0 : std::clamp(begin < 0 ? begin + n : begin, int64_t{0}, n);
    e = end_masked ? n : std::clamp(end < 0 ? end + n : end, int64_t{0}, n);
    return e > b ? (e - b + stride - 1) / stride : 0;
  }
  b = begin_masked ? n - 1 : std::clamp(begin < 0 ? begin + n : begin, int64_t{-1}, n - 1);
  e = end_masked ? -1 : std::clamp(end < 0 ? end + n : end, int64_t{-1}, n - 1);
  return b > e ? (b - e - stride - 1) / -stride : 0;
}

// A list longer than the rank whose entries are all equal: coremltools' NeuralNetworkBuilder
// writes five default entries (strides 1, masks false) whatever the rank, and Core ML runs such
// layers; whichever rank entries it reads, they are the same, so the rank-long list is exact.
template <class Field>
bool uniform_and_longer(const Field& field, int64_t rank) {
  if (field.size() <= rank) return false;
  for (int i = 1; i < field.size(); ++i)
    if (field.Get(i) != field.Get(0)) return false;
  return true;
}

template <class Field>
std::vector<bool> flags(const Field& field, int64_t rank, const char* what) {
  if (uniform_and_longer(field, rank)) return std::vector<bool>(rank, field.Get(0));
  require(field.size() == 0 || field.size() == rank, what, " has ", field.size(), " entries for rank ", rank);
  std::vector<bool> out(rank, false);
  for (int i = 0; i < field.size(); ++i) out[i] = field.Get(i);
  return out;
}

template <class Field>
std::vector<int64_t> ints(const Field& field, int64_t rank, int64_t fill, const char* what) {
  if (uniform_and_longer(field, rank)) return std::vector<int64_t>(rank, field.Get(0));
  require(field.size() == 0 || field.size() == rank, what, " has ", field.size(), " entries for rank ", rank);
  std::vector<int64_t> out(rank, fill);
  for (int i = 0; i < field.size(); ++i) out[i] = field.Get(i);
  return out;
}

// Shared by sliceStatic and sliceDynamic: slice_by_index with the layer's masks. The strides
// come from the parameters (`strides` set) or from a blob (`strides` null, `stride` its value).
template <class Params>
void emit_slice(LayerContext& layer, const Params& params, const Value& x, const Value& begin, const Value& end,
                const Value& stride, const std::vector<int64_t>* strides, const std::vector<int64_t>* begin_ids,
                const std::vector<int64_t>* end_ids) {
  const int64_t rank = x.type.rank;
  const std::vector<bool> begin_mask = flags(params.beginmasks(), rank, "beginMasks");
  const std::vector<bool> end_mask = flags(params.endmasks(), rank, "endMasks");
  const std::vector<bool> squeeze_mask = flags(params.squeezemasks(), rank, "squeezeMasks");
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < rank; ++i) {
    if (strides) require((*strides)[i] != 0, "stride ", i, " is 0");
    if (squeeze_mask[i]) continue;
    dims.push_back(begin_ids && end_ids && strides ? sliced_size(x.type.dims[i], (*begin_ids)[i], (*end_ids)[i],
                                                                 (*strides)[i], begin_mask[i], end_mask[i])
                                                   : -1);
  }
  const Value sliced = layer.emit1("slice_by_index",
                                   {{"x", {x}}, {"begin", {begin}}, {"end", {end}}, {"stride", {stride}},
                                    {"begin_mask", {bool_vector(begin_mask)}}, {"end_mask", {bool_vector(end_mask)}},
                                    {"squeeze_mask", {bool_vector(squeeze_mask)}}},
                                   tensor_type(x.type.dtype, dims));
  // A squeezed axis takes the one element at its begin, whatever its end says: coremltools writes
  // endIds 0 there (x[i] of a shape in torch's einsum, meshgrid or indexing). The layer graph has
  // no rank-0 blobs, so a slice that squeezes every axis gives that element as [1], as a
  // reduction of every axis does (reduction_layers.cc).
  layer.set_output(0, dims.empty() ? reshape_to(layer, sliced, {1}) : sliced);
}

void slice_static(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::SliceStaticLayerParams>();
  const Value& x = ranked_input(layer, 0, 1);
  const int64_t rank = x.type.rank;
  require(params.beginids_size() == rank && params.endids_size() == rank, "beginIds and endIds need ", rank, " entries");
  const std::vector<int64_t> begin = ints(params.beginids(), rank, 0, "beginIds");
  const std::vector<int64_t> end = ints(params.endids(), rank, 0, "endIds");
  const std::vector<int64_t> strides = ints(params.strides(), rank, 1, "strides");
  emit_slice(layer, params, x, int_vector(begin), int_vector(end), int_vector(strides), &strides, &begin, &end);
}

// Begins from input 1; ends from input 2, else endIds; strides from input 3, else the strides
// parameter (a parameter is ignored when its input is present). slice_by_index needs its
// strides at load, so a strides input must be computed from constants (loadConstantND, say);
// the masks inputs (4 to 6) are refused.
void slice_dynamic(LayerContext& layer) {
  require_exact_layout(layer);
  require(layer.input_count() <= 4, "takes its masks from inputs (", layer.input_count(),
          " inputs); this build reads begins, ends and strides from inputs but masks only from the parameters");
  layer.expect_io(2, 4, 1);
  const auto params = layer.parse_params<nn::SliceDynamicLayerParams>();
  const Value& x = ranked_input(layer, 0, 1);
  const int64_t rank = x.type.rank;
  const Value begin = int_vector_input(layer, 1, rank, "begin");
  Value end;
  if (layer.input_count() >= 3) {
    end = int_vector_input(layer, 2, rank, "end");
  } else {
    require(params.endids_size() == rank, "endIds needs ", rank, " entries");
    end = int_vector(ints(params.endids(), rank, 0, "endIds"));
  }
  if (layer.input_count() == 4) {
    emit_slice(layer, params, x, begin, end, int_vector_input(layer, 3, rank, "strides"), nullptr, nullptr, nullptr);
  } else {
    const std::vector<int64_t> strides = ints(params.strides(), rank, 1, "strides");
    emit_slice(layer, params, x, begin, end, int_vector(strides), &strides, nullptr, nullptr);
  }
}

// x[..., begin:begin + size, ...] along axis, begin read from input 1 (one entry) at
// prediction: lowered onto slice_by_size with begin 0 and size -1 (to the end) on the other
// axes. A negative begin counts from the end of the axis, as slice_by_size reads it (src/ops/
// slice.cc); a slice running past the end fails at prediction.
void slice_by_size(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(2, 2, 1);
  const auto params = layer.parse_params<nn::SliceBySizeLayerParams>();
  const Value& x = ranked_input(layer, 0, 1);
  const int64_t rank = x.type.rank, axis = positive_axis(params.axis(), rank);
  require(params.size() > 0, "size ", params.size(), " must be positive");
  const int64_t dim = x.type.dims[axis];
  require(dim < 0 || params.size() <= dim, "size ", params.size(), " exceeds axis ", axis, " of ", x.type.str());
  const Value begin_at_axis = int_vector_input(layer, 1, 1, "begin");
  std::vector<Value> begin_parts;
  if (axis > 0) begin_parts.push_back(int_vector(std::vector<int64_t>(axis, 0)));
  begin_parts.push_back(begin_at_axis);
  if (axis + 1 < rank) begin_parts.push_back(int_vector(std::vector<int64_t>(rank - axis - 1, 0)));
  const Value begin = begin_parts.size() == 1
                          ? begin_at_axis
                          : layer.emit1("concat", {{"values", begin_parts}, {"axis", {int_scalar(0)}},
                                                   {"interleave", {bool_scalar(false)}}},
                                        tensor_type(DType::Int32, {rank}));
  std::vector<int64_t> sizes(rank, -1), dims = x.type.dims;
  sizes[axis] = dims[axis] = params.size();
  layer.set_output(0, layer.emit1("slice_by_size", {{"x", {x}}, {"begin", {begin}}, {"size", {int_vector(sizes)}}},
                                  tensor_type(x.type.dtype, dims)));
}

// Windows of windowSize every step along axis: that axis becomes [windows, windowSize].
void sliding_windows(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::SlidingWindowsLayerParams>();
  const Value& x = ranked_input(layer, 0, 1);
  const int64_t axis = positive_axis(params.axis(), x.type.rank);
  const uint64_t size = params.windowsize(), step = params.step();
  require(size > 0 && step > 0 && size < (uint64_t{1} << 31) && step < (uint64_t{1} << 31), "windowSize ", size,
          " and step ", step, " must be positive");
  std::vector<int64_t> dims = x.type.dims;
  const int64_t n = dims[axis];
  require(n < 0 || n >= static_cast<int64_t>(size), "axis ", axis, " of ", x.type.str(), " is shorter than a window");
  dims[axis] = n < 0 ? -1 : (n - static_cast<int64_t>(size)) / static_cast<int64_t>(step) + 1;
  dims.insert(dims.begin() + axis + 1, static_cast<int64_t>(size));
  layer.set_output(0, layer.emit1("sliding_windows",
                                  {{"x", {x}}, {"axis", {int_scalar(static_cast<int32_t>(axis))}},
                                   {"size", {int_scalar(static_cast<int32_t>(size))}},
                                   {"stride", {int_scalar(static_cast<int32_t>(step))}}},
                                  tensor_type(x.type.dtype, dims)));
}

// reps from the parameter or the second input, padded with leading 1s to the input's rank.
void tile(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 2, 1);
  const auto params = layer.parse_params<nn::TileLayerParams>();
  const Value& x = ranked_input(layer, 0, 1);
  if (layer.input_count() == 2) {
    // As with the parameter, a reps vector shorter than the rank is padded with leading 1s
    // (the tile op does it at prediction, src/ops/shape.cc); a longer one would add axes.
    const Value& reps_blob = ranked_input(layer, 1, 1, 1);
    const int64_t count = reps_blob.type.dims[0];
    require(count <= x.type.rank, "its reps input ", reps_blob.type.str(), " has more entries than the input's rank ",
            x.type.rank);
    const Value reps = int_vector_input(layer, 1, -1, "reps");
    layer.set_output(0, layer.emit1("tile", {{"x", {x}}, {"reps", {reps}}},
                                    tensor_type(x.type.dtype, std::vector<int64_t>(x.type.rank, -1))));
    return;
  }
  require(params.reps_size() >= 1 && params.reps_size() <= x.type.rank, "reps has ", params.reps_size(),
          " entries for an input of rank ", x.type.rank);
  std::vector<int64_t> reps(x.type.rank - params.reps_size(), 1), dims = x.type.dims;
  for (uint64_t r : params.reps()) {
    require(r > 0 && r < (uint64_t{1} << 31), "reps entry ", r, " is out of range");
    reps.push_back(static_cast<int64_t>(r));
  }
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] >= 0) dims[i] *= reps[i];
  layer.set_output(0, layer.emit1("tile", {{"x", {x}}, {"reps", {int_vector(reps)}}}, tensor_type(x.type.dtype, dims)));
}

void get_shape(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const Value& x = ranked_input(layer, 0, 0);
  const Value shape = layer.emit1("shape", {{"x", {x}}}, tensor_type(DType::Int32, {x.type.rank}));
  layer.set_output(0, cast_to(layer, shape, DType::Float32));
}

// padAmounts holds (before, after) for every axis. In padToGivenOutputSizeMode the nonzero
// one of each pair is the size the axis is padded to, at its start or its end
// (NeuralNetwork.proto: output size max(input size, amount)), which needs the axis's size at
// load.
void constant_pad(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 2, 1);
  const auto params = layer.parse_params<nn::ConstantPaddingLayerParams>();
  const Value& x = ranked_input(layer, 0, 1);
  if (layer.input_count() == 2) {  // the amounts come from the second input
    require(!params.padtogivenoutputsizemode(), "padToGivenOutputSizeMode with amounts from an input is not supported "
            "by this build");
    const Value amounts = int_vector_input(layer, 1, 2 * x.type.rank, "pad amounts");
    layer.set_output(0, layer.emit1("pad", {{"x", {x}}, {"pad", {amounts}},
                                            {"mode", {string_scalar("constant")}},
                                            {"constant_val", {float_scalar(params.value())}}},
                                    tensor_type(x.type.dtype, std::vector<int64_t>(x.type.rank, -1))));
    return;
  }
  const int64_t rank = x.type.rank, n = params.padamounts_size();
  require(n == 2 * rank, "padAmounts has ", n, " entries; expected 2 per axis (", 2 * rank, ")");
  std::vector<int64_t> pads;
  for (int64_t i = 0; i < n; ++i) {
    require(params.padamounts(i) < (uint64_t{1} << 31), "pad amount ", params.padamounts(i), " is out of range");
    pads.push_back(static_cast<int64_t>(params.padamounts(i)));
  }
  if (params.padtogivenoutputsizemode()) {
    for (int64_t i = 0; i < rank; ++i) {
      int64_t& before = pads[2 * i];
      int64_t& after = pads[2 * i + 1];
      require(before == 0 || after == 0, "padToGivenOutputSizeMode needs one of the amounts of axis ", i, " to be 0");
      if (before == 0 && after == 0) continue;
      const int64_t size = x.type.dims[i];
      require(size >= 0, "axis ", i, " of ", x.type.str(), " has a size unknown at load");
      before = before ? std::max<int64_t>(before - size, 0) : 0;
      after = after ? std::max<int64_t>(after - size, 0) : 0;
    }
  }
  std::vector<int64_t> dims = x.type.dims;
  for (int64_t i = 0; i < rank; ++i)
    if (dims[i] >= 0) dims[i] += pads[2 * i] + pads[2 * i + 1];
  layer.set_output(0, layer.emit1("pad", {{"x", {x}}, {"pad", {int_vector(pads)}}, {"mode", {string_scalar("constant")}},
                                          {"constant_val", {float_scalar(params.value())}}},
                                  tensor_type(x.type.dtype, dims)));
}

}  // namespace

void register_shape_nd_layers(LayerTable& table) {
  table[600] = copy;
  table[920] = tile;
  table[975] = split_nd;
  table[980] = concat_nd;
  table[925] = stack_nd;
  table[985] = transpose_nd;
  table[995] = slice_static;
  table[1000] = slice_dynamic;
  table[1470] = slice_by_size;
  table[1005] = sliding_windows;
  table[1065] = get_shape;
  table[1120] = squeeze;
  table[1125] = expand_dims;
  table[1130] = flatten_to_2d;
  table[1135] = reshape_like;
  table[1140] = reshape_static;
  table[1145] = reshape_dynamic;
  table[1150] = rank_preserving_reshape;
  table[1155] = constant_pad;
}

}  // namespace coremlrt::format::neural_network
