// The pooling family: pooling (max, average, L2; global or windowed) as max_pool / avg_pool /
// l2_pool or a reduction over the spatial axes, pooling3d and globalPooling3d. Windows slide
// over the blob's last two (3D: three) axes; spatial_frame.h folds the axes before [C, ..].
#include <algorithm>

#include "format/neural_network/layer_translator.h"
#include "format/neural_network/spatial_frame.h"
#include "nn_pooling.pb.h"

namespace coremlrt::format::neural_network {
namespace {

// A global pool: a reduction over the last `spatial` axes, kept as size-1 axes.
void global_pool(LayerContext& layer, const char* reduce_op, int spatial) {
  const Value& x = layer.input(0);
  require(x.type.rank >= spatial + 1, "input has rank ", x.type.rank, "; pooling needs at least ", spatial + 1, " axes");
  ir::ValueType y = x.type;
  std::vector<int64_t> axes;
  for (int i = spatial; i >= 1; --i) {
    axes.push_back(-i);
    y.dims[y.dims.size() - i] = 1;
  }
  layer.set_output(0, layer.emit1(reduce_op, {{"x", {x}}, {"axes", {int_vector(axes)}}, {"keep_dims", {bool_scalar(true)}}}, y));
}

void pooling(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::PoolingLayerParams>();
  using P = nn::PoolingLayerParams;
  const char* op = nullptr;
  const char* reduce_op = nullptr;
  switch (params.type()) {
    case P::MAX: op = "max_pool"; reduce_op = "reduce_max"; break;
    case P::AVERAGE: op = "avg_pool"; reduce_op = "reduce_mean"; break;
    case P::L2: op = "l2_pool"; reduce_op = "reduce_l2_norm"; break;
    default: refuse("unknown pooling type ", static_cast<int>(params.type()));
  }
  if (params.globalpooling()) return global_pool(layer, reduce_op, 2);

  auto pair = [](const google::protobuf::RepeatedField<uint64_t>& v, int64_t fill, const char* what) {
    if (v.empty()) return std::vector<int64_t>{fill, fill};
    require(v.size() == 2 && v[0] >= 1 && v[1] >= 1, what, " must be 2 values >= 1");
    return std::vector<int64_t>{static_cast<int64_t>(v[0]), static_cast<int64_t>(v[1])};
  };
  const auto kernel = pair(params.kernelsize(), 3, "kernelSize");
  const auto stride = pair(params.stride(), 1, "stride");
  SpatialFrame frame(layer, layer.input(0), 2);
  const auto& dims = frame.folded_dims();

  std::string pad_type = "custom";
  std::vector<int64_t> pad(4, 0);
  bool ceil_mode = false;
  switch (params.PoolingPaddingType_case()) {
    case P::kSame:
      if (params.same().asymmetrymode() == nn::SamePadding::TOP_LEFT_HEAVY) {
        // The op's "same" puts an odd pixel after; place it before with explicit amounts.
        for (int i = 0; i < 2; ++i) {
          const int64_t in = dims[2 + i];
          require(in >= 0, "uses TOP_LEFT_HEAVY same padding on an input of unknown size");
          const int64_t out = (in + stride[i] - 1) / stride[i];
          const int64_t total = std::max<int64_t>(0, (out - 1) * stride[i] + kernel[i] - in);
          pad[2 * i + 1] = total / 2;
          pad[2 * i] = total - total / 2;
        }
      } else {
        pad_type = "same";
      }
      break;
    case P::kIncludeLastPixel: {
      const auto& amounts = params.includelastpixel().paddingamounts();
      require(amounts.empty() || amounts.size() == 2, "includeLastPixel has ", amounts.size(), " padding amounts; expected 2");
      if (!amounts.empty()) pad = {static_cast<int64_t>(amounts[0]), static_cast<int64_t>(amounts[0]),
                                   static_cast<int64_t>(amounts[1]), static_cast<int64_t>(amounts[1])};
      ceil_mode = true;
      break;
    }
    case P::kValid:
    default: {
      const auto& amounts = params.valid().paddingamounts();
      if (amounts.borderamounts_size() != 0) {
        require(amounts.borderamounts_size() == 2, "paddingAmounts has ", amounts.borderamounts_size(), " entries; expected 2");
        for (int i = 0; i < 2; ++i) {
          pad[2 * i] = static_cast<int64_t>(amounts.borderamounts(i).startedgesize());
          pad[2 * i + 1] = static_cast<int64_t>(amounts.borderamounts(i).endedgesize());
        }
      }
      break;
    }
  }
  // L2 pooling sums squares, to which zero padding adds nothing: every padding type holds.

  std::vector<int64_t> out{dims[1]};
  for (int i = 0; i < 2; ++i) {
    const int64_t in = dims[2 + i], k = kernel[i], s = stride[i];
    if (in < 0) {
      out.push_back(-1);
    } else if (pad_type == "same") {
      out.push_back((in + s - 1) / s);
    } else {
      const int64_t span = in + pad[2 * i] + pad[2 * i + 1] - k;
      require(span >= 0, "its kernel ", k, " is larger than the padded input ", in + pad[2 * i] + pad[2 * i + 1]);
      int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
      // The last window must start inside the input or its leading padding (as the op does).
      if (ceil_mode && (pad[2 * i] > 0 || pad[2 * i + 1] > 0) && (o - 1) * s >= in + pad[2 * i]) --o;
      out.push_back(o);
    }
  }
  OpInputs inputs{{"x", {frame.folded()}},
                  {"kernel_sizes", {int_vector(kernel)}},
                  {"strides", {int_vector(stride)}},
                  {"pad_type", {string_scalar(pad_type)}},
                  {"ceil_mode", {bool_scalar(ceil_mode)}}};
  if (pad_type == "custom") inputs.push_back({"pad", {int_vector(pad)}});
  if (params.type() == P::AVERAGE)
    inputs.push_back({"exclude_padding_from_average", {bool_scalar(params.avgpoolexcludepadding())}});
  const Value y = layer.emit1(op, inputs, frame.folded_type(out));
  layer.set_output(0, frame.unfold(y));
}

void pooling3d(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::Pooling3DLayerParams>();
  using P = nn::Pooling3DLayerParams;
  const bool average = params.type() == P::AVERAGE;
  require(average || params.type() == P::MAX, "unknown pooling type ", static_cast<int>(params.type()));
  auto positive = [](int32_t v) { return static_cast<int64_t>(v > 0 ? v : 1); };
  const std::vector<int64_t> kernel{positive(params.kerneldepth()), positive(params.kernelheight()), positive(params.kernelwidth())};
  const std::vector<int64_t> stride{positive(params.stridedepth()), positive(params.strideheight()), positive(params.stridewidth())};
  SpatialFrame frame(layer, layer.input(0), 3);
  const auto& dims = frame.folded_dims();
  std::string pad_type;
  std::vector<int64_t> pad(6, 0);
  switch (params.paddingtype()) {
    case P::VALID: pad_type = "valid"; break;
    case P::SAME: pad_type = "same"; break;
    case P::CUSTOM:
      pad_type = "custom";
      pad = {params.custompaddingfront(), params.custompaddingback(), params.custompaddingtop(),
             params.custompaddingbottom(), params.custompaddingleft(), params.custompaddingright()};
      for (int64_t p : pad) require(p >= 0, "has a negative padding amount");
      break;
    default: refuse("unknown paddingType ", static_cast<int>(params.paddingtype()));
  }
  std::vector<int64_t> out{dims[1]};
  for (int i = 0; i < 3; ++i) {
    const int64_t in = dims[2 + i];
    if (in < 0) out.push_back(-1);
    else if (pad_type == "same") out.push_back((in + stride[i] - 1) / stride[i]);
    else {
      const int64_t span = in + pad[2 * i] + pad[2 * i + 1] - kernel[i];
      require(span >= 0, "its kernel is larger than the padded input");
      out.push_back(span / stride[i] + 1);
    }
  }
  OpInputs inputs{{"x", {frame.folded()}},
                  {"kernel_sizes", {int_vector(kernel)}},
                  {"strides", {int_vector(stride)}},
                  {"pad_type", {string_scalar(pad_type)}},
                  {"ceil_mode", {bool_scalar(false)}}};
  if (pad_type == "custom") inputs.push_back({"pad", {int_vector(pad)}});
  if (average) inputs.push_back({"exclude_padding_from_average", {bool_scalar(params.countexcludepadding())}});
  const Value y = layer.emit1(average ? "avg_pool" : "max_pool", inputs, frame.folded_type(out));
  layer.set_output(0, frame.unfold(y));
}

void global_pooling3d(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::GlobalPooling3DLayerParams>();
  using P = nn::GlobalPooling3DLayerParams;
  require(params.type() == P::MAX || params.type() == P::AVERAGE, "unknown pooling type ", static_cast<int>(params.type()));
  global_pool(layer, params.type() == P::MAX ? "reduce_max" : "reduce_mean", 3);
}

}  // namespace

void register_pooling_layers(LayerTable& table) {
  table[120] = pooling;
  table[1465] = pooling3d;
  table[1466] = global_pooling3d;
}

}  // namespace coremlrt::format::neural_network
