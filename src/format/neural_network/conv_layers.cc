// The convolution family: convolution (and deconvolution) as conv / conv_transpose,
// convolution3d, and the padding layer as pad. The layer graph's convolutions read the last
// three (3D: four) axes of a blob as [C, H, W]; spatial_frame.h folds the axes before them
// into the ops' batch axis.
#include <algorithm>

#include "format/neural_network/layer_translator.h"
#include "format/neural_network/spatial_frame.h"
#include "nn_conv.pb.h"

namespace coremlrt::format::neural_network {
namespace {

// One spatial axis of a convolution: its size in and out, and the padding before and after.
struct Axis {
  int64_t in = -1, kernel = 1, stride = 1, dilation = 1, before = 0, after = 0, out = -1;
  int64_t effective_kernel() const { return (kernel - 1) * dilation + 1; }
};

std::vector<int64_t> or_default(const google::protobuf::RepeatedField<uint64_t>& values, int64_t fill, const char* what) {
  if (values.empty()) return {fill, fill};
  require(values.size() == 2, what, " has ", values.size(), " values; expected 2 ([height, width])");
  require(values[0] >= 1 && values[1] >= 1, what, " must be >= 1");
  return {static_cast<int64_t>(values[0]), static_cast<int64_t>(values[1])};
}

// The [height, width] start and end amounts of a BorderAmounts (empty means none).
std::vector<std::pair<int64_t, int64_t>> border(const nn::BorderAmounts& amounts, const char* what) {
  if (amounts.borderamounts_size() == 0) return {{0, 0}, {0, 0}};
  require(amounts.borderamounts_size() == 2, what, " has ", amounts.borderamounts_size(),
          " entries; expected 2 ([height, width])");
  return {{static_cast<int64_t>(amounts.borderamounts(0).startedgesize()), static_cast<int64_t>(amounts.borderamounts(0).endedgesize())},
          {static_cast<int64_t>(amounts.borderamounts(1).startedgesize()), static_cast<int64_t>(amounts.borderamounts(1).endedgesize())}};
}

void convolution(LayerContext& layer) {
  layer.expect_io(1, 2, 1);
  const auto params = layer.parse_params<nn::ConvolutionLayerParams>();
  const bool deconv = params.isdeconvolution();
  const int64_t c_out = static_cast<int64_t>(params.outputchannels());
  const int64_t kernel_channels = static_cast<int64_t>(params.kernelchannels());
  const int64_t groups = params.ngroups() ? static_cast<int64_t>(params.ngroups()) : 1;
  require(c_out > 0 && kernel_channels > 0, "has ", c_out, " output and ", kernel_channels, " kernel channels");
  require(c_out % groups == 0, "outputChannels ", c_out, " is not divisible by nGroups ", groups);
  const auto kernel = or_default(params.kernelsize(), 3, "kernelSize");
  const auto stride = or_default(params.stride(), 1, "stride");
  const auto dilation = or_default(params.dilationfactor(), 1, "dilationFactor");

  SpatialFrame frame(layer, layer.input(0), 2);
  const auto& dims = frame.folded_dims();
  const int64_t c_in = dims[1];
  if (deconv)
    require(c_in < 0 || c_in == kernel_channels, "input has ", c_in, " channels; the deconvolution's kernelChannels is ", kernel_channels);
  else
    require(c_in < 0 || c_in == kernel_channels * groups, "input has ", c_in, " channels; kernelChannels ", kernel_channels,
            " times nGroups ", groups, " is ", kernel_channels * groups);

  Axis axes[2];
  for (int i = 0; i < 2; ++i) axes[i] = Axis{dims[2 + i], kernel[i], stride[i], dilation[i]};
  std::string pad_type = "custom";
  const bool same = params.ConvolutionPaddingType_case() == nn::ConvolutionLayerParams::kSame;
  if (same) {
    const bool top_left = params.same().asymmetrymode() == nn::SamePadding::TOP_LEFT_HEAVY;
    pad_type = "same";
    if (top_left && !deconv) {
      // The op's "same" puts an odd pixel after; place it before with explicit amounts.
      pad_type = "custom";
      for (Axis& a : axes) {
        require(a.in >= 0, "uses TOP_LEFT_HEAVY same padding on an input of unknown size");
        const int64_t out = (a.in + a.stride - 1) / a.stride;
        const int64_t total = std::max<int64_t>(0, (out - 1) * a.stride + a.effective_kernel() - a.in);
        a.after = total / 2;
        a.before = total - a.after;
      }
    } else {
      require(!top_left, "deconvolution with TOP_LEFT_HEAVY same padding is not supported by this build");
    }
  } else {
    const auto amounts = border(params.valid().paddingamounts(), "paddingAmounts");
    for (int i = 0; i < 2; ++i) std::tie(axes[i].before, axes[i].after) = amounts[i];
  }

  std::vector<int64_t> output_shape;
  if (params.outputshape_size() > 0) {
    require(deconv, "sets outputShape, which only a deconvolution takes");
    require(params.outputshape_size() == 2, "outputShape has ", params.outputshape_size(), " values; expected 2 ([H, W])");
    output_shape = {static_cast<int64_t>(params.outputshape(0)), static_cast<int64_t>(params.outputshape(1))};
  }
  for (int i = 0; i < 2; ++i) {
    Axis& a = axes[i];
    if (!output_shape.empty()) {
      a.out = output_shape[i];
    } else if (a.in < 0) {
      a.out = -1;
    } else if (deconv) {
      a.out = pad_type == "same" ? a.in * a.stride : (a.in - 1) * a.stride + a.effective_kernel() - a.before - a.after;
    } else if (pad_type == "same") {
      a.out = (a.in + a.stride - 1) / a.stride;
    } else {
      const int64_t span = a.in + a.before + a.after - a.effective_kernel();
      require(span >= 0, "its kernel (", a.effective_kernel(), " with dilation) is larger than the padded input ", a.in);
      a.out = span / a.stride + 1;
    }
    require(a.out < 0 || a.out > 0, "gives an empty output");
  }

  // Weights: stored as the op takes them (conv [Cout, Cin/groups, kH, kW]; conv_transpose
  // [Cin, Cout/groups, kH, kW]); a second input gives them at run time.
  Value weight;
  if (layer.input_count() == 2) {
    require(!deconv, "a deconvolution with weights given as an input is not supported by this build");
    weight = layer.input(1);
    require(weight.type.rank == 4, "its weight input has rank ", weight.type.rank, "; expected 4 ([Cout, Cin/groups, kH, kW])");
  } else {
    const std::vector<int64_t> shape = deconv ? std::vector<int64_t>{kernel_channels, c_out / groups, kernel[0], kernel[1]}
                                              : std::vector<int64_t>{c_out, kernel_channels, kernel[0], kernel[1]};
    const uint64_t count = static_cast<uint64_t>(shape[0] * shape[1] * shape[2] * shape[3]);
    // read_weights takes per-channel scales along the outermost axis; a deconvolution's
    // output channels are its second axis.
    require(!deconv || params.weights().quantization().linearquantization().scale_size() <= 1,
            "a deconvolution with per-channel quantized weights is not supported by this build");
    weight = float_tensor(read_weights(params.weights(), count, "weights"), shape);
  }
  OpInputs inputs{{"x", {frame.folded()}},
                  {"weight", {weight}},
                  {"strides", {int_vector(stride)}},
                  {"dilations", {int_vector(dilation)}},
                  {"groups", {int_scalar(static_cast<int32_t>(groups))}},
                  {"pad_type", {string_scalar(pad_type)}}};
  if (pad_type == "custom") inputs.push_back({"pad", {int_vector({axes[0].before, axes[0].after, axes[1].before, axes[1].after})}});
  if (params.hasbias()) inputs.push_back({"bias", {float_tensor(read_weights(params.bias(), c_out, "bias values"), {c_out})}});
  if (!output_shape.empty()) inputs.push_back({"output_shape", {int_vector(output_shape)}});
  const Value y = layer.emit1(deconv ? "conv_transpose" : "conv", inputs, frame.folded_type({c_out, axes[0].out, axes[1].out}));
  layer.set_output(0, frame.unfold(y));
}

void convolution3d(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::Convolution3DLayerParams>();
  const int64_t c_out = params.outputchannels(), c_in_param = params.inputchannels();
  const int64_t groups = params.ngroups() ? params.ngroups() : 1;
  require(c_out > 0 && c_in_param > 0, "has ", c_out, " output and ", c_in_param, " input channels");
  require(c_out % groups == 0 && c_in_param % groups == 0, "channels ", c_in_param, " -> ", c_out, " are not divisible by nGroups ", groups);
  const bool deconv = params.isdeconvolution();
  auto positive = [](int32_t v) { return static_cast<int64_t>(v > 0 ? v : 1); };
  const std::vector<int64_t> kernel{positive(params.kerneldepth()), positive(params.kernelheight()), positive(params.kernelwidth())};
  const std::vector<int64_t> stride{positive(params.stridedepth()), positive(params.strideheight()), positive(params.stridewidth())};
  const std::vector<int64_t> dilation{positive(params.dilationdepth()), positive(params.dilationheight()), positive(params.dilationwidth())};
  SpatialFrame frame(layer, layer.input(0), 3);
  const auto& dims = frame.folded_dims();
  require(dims[1] < 0 || dims[1] == c_in_param, "input has ", dims[1], " channels; inputChannels is ", c_in_param);

  std::string pad_type;
  std::vector<int64_t> pad(6, 0);
  switch (params.paddingtype()) {
    case nn::Convolution3DLayerParams::VALID: pad_type = "valid"; break;
    case nn::Convolution3DLayerParams::SAME: pad_type = "same"; break;
    case nn::Convolution3DLayerParams::CUSTOM:
      pad_type = "custom";
      pad = {params.custompaddingfront(), params.custompaddingback(), params.custompaddingtop(),
             params.custompaddingbottom(), params.custompaddingleft(), params.custompaddingright()};
      for (int64_t p : pad) require(p >= 0, "has a negative padding amount");
      break;
    default: refuse("unknown paddingType ", static_cast<int>(params.paddingtype()));
  }
  std::vector<int64_t> output_shape(params.outputshape().begin(), params.outputshape().end());
  if (!output_shape.empty()) {
    require(deconv, "sets outputShape, which only a deconvolution takes");
    if (output_shape.size() == 5) output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
    require(output_shape.size() == 3, "outputShape has ", output_shape.size(), " values; expected 3 ([D, H, W])");
  }
  std::vector<int64_t> out_dims{c_out};
  for (int i = 0; i < 3; ++i) {
    const int64_t in = dims[2 + i], k = (kernel[i] - 1) * dilation[i] + 1, s = stride[i];
    int64_t out = -1;
    if (!output_shape.empty()) out = output_shape[i];
    else if (in < 0) out = -1;
    else if (deconv) out = pad_type == "same" ? in * s : (in - 1) * s + k - pad[2 * i] - pad[2 * i + 1];
    else if (pad_type == "same") out = (in + s - 1) / s;
    else {
      const int64_t span = in + pad[2 * i] + pad[2 * i + 1] - k;
      require(span >= 0, "its kernel is larger than the padded input");
      out = span / s + 1;
    }
    out_dims.push_back(out);
  }
  const std::vector<int64_t> shape = deconv ? std::vector<int64_t>{c_in_param, c_out / groups, kernel[0], kernel[1], kernel[2]}
                                            : std::vector<int64_t>{c_out, c_in_param / groups, kernel[0], kernel[1], kernel[2]};
  uint64_t count = 1;
  for (int64_t d : shape) count *= static_cast<uint64_t>(d);
  OpInputs inputs{{"x", {frame.folded()}},
                  {"weight", {float_tensor(read_weights(params.weights(), count, "weights"), shape)}},
                  {"strides", {int_vector(stride)}},
                  {"dilations", {int_vector(dilation)}},
                  {"groups", {int_scalar(static_cast<int32_t>(groups))}},
                  {"pad_type", {string_scalar(pad_type)}}};
  if (pad_type == "custom") inputs.push_back({"pad", {int_vector(pad)}});
  if (params.hasbias()) inputs.push_back({"bias", {float_tensor(read_weights(params.bias(), c_out, "bias values"), {c_out})}});
  if (!output_shape.empty()) inputs.push_back({"output_shape", {int_vector(output_shape)}});
  const Value y = layer.emit1(deconv ? "conv_transpose" : "conv", inputs, frame.folded_type(out_dims));
  layer.set_output(0, frame.unfold(y));
}

// padding: pads the last two axes (height, width).
void padding(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::PaddingLayerParams>();
  const Value& x = layer.input(0);
  require(x.type.rank >= 2, "input has rank ", x.type.rank, "; padding needs [.., H, W]");
  const auto amounts = border(params.paddingamounts(), "paddingAmounts");
  OpInputs inputs{{"x", {x}},
                  {"pad", {int_vector({amounts[0].first, amounts[0].second, amounts[1].first, amounts[1].second})}}};
  using P = nn::PaddingLayerParams;
  switch (params.PaddingType_case()) {
    case P::kConstant:
      inputs.push_back({"mode", {string_scalar("constant")}});
      inputs.push_back({"constant_val", {float_scalar(params.constant().value())}});
      break;
    case P::kReflection: inputs.push_back({"mode", {string_scalar("reflect")}}); break;
    case P::kReplication: inputs.push_back({"mode", {string_scalar("replicate")}}); break;
    default: refuse("padding has no padding type");
  }
  ir::ValueType y = x.type;
  for (int i = 0; i < 2; ++i) {
    int64_t& d = y.dims[y.dims.size() - 2 + i];
    if (d >= 0) d += amounts[i].first + amounts[i].second;
    if (params.PaddingType_case() == P::kReflection && x.type.dims[y.dims.size() - 2 + i] >= 0)
      require(std::max(amounts[i].first, amounts[i].second) < x.type.dims[y.dims.size() - 2 + i],
              "reflection padding ", std::max(amounts[i].first, amounts[i].second), " is not smaller than the axis size ",
              x.type.dims[y.dims.size() - 2 + i]);
  }
  layer.set_output(0, layer.emit1("pad", inputs, y));
}

}  // namespace

void register_conv_layers(LayerTable& table) {
  table[100] = convolution;
  table[200] = padding;
  table[1471] = convolution3d;
}

}  // namespace coremlrt::format::neural_network
