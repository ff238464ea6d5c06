// The resizing family, acting on a blob's last two axes [H, W]: upsample (nearest or
// bilinear), resizeBilinear, cropResize, crop and reorganizeData (space/depth and pixel
// shuffles, through spatial_frame.h).
#include <cmath>

#include "format/neural_network/layer_translator.h"
#include "format/neural_network/spatial_frame.h"
#include "nn_resize.pb.h"

namespace coremlrt::format::neural_network {
namespace {

int64_t dim_from_end(const ir::ValueType& t, int i) { return t.dims[t.dims.size() - i]; }

ir::ValueType with_hw(ir::ValueType t, int64_t h, int64_t w) {
  t.dims[t.dims.size() - 2] = h;
  t.dims[t.dims.size() - 1] = w;
  return t;
}

// The resize_bilinear sampling mode of each of the layer graph's sampling methods (the pairs
// coremltools' converter writes, one for one).
const char* sampling_mode(nn::SamplingMode::Method method) {
  switch (method) {
    case nn::SamplingMode::STRICT_ALIGN_ENDPOINTS_MODE: return "STRICT_ALIGN_CORNERS";
    case nn::SamplingMode::ALIGN_ENDPOINTS_MODE: return "ALIGN_CORNERS";
    case nn::SamplingMode::UPSAMPLE_MODE: return "DEFAULT";
    case nn::SamplingMode::ROI_ALIGN_MODE: return "OFFSET_CORNERS";
    default: refuse("unknown sampling method ", static_cast<int>(method));
  }
}

void upsample(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::UpsampleLayerParams>();
  const Value& x = layer.input(0);
  require(x.type.rank >= 3, "input has rank ", x.type.rank, "; upsample needs [C, H, W] axes");
  using P = nn::UpsampleLayerParams;
  double sh = 1, sw = 1;
  const bool fractional = params.fractionalscalingfactor_size() > 0;
  if (fractional) {
    require(params.scalingfactor_size() == 0, "sets both scalingFactor and fractionalScalingFactor");
    require(params.fractionalscalingfactor_size() == 2, "fractionalScalingFactor must have 2 values");
    require(params.mode() == P::BILINEAR && params.linearupsamplemode() != P::DEFAULT,
            "fractional scaling factors need the bilinear mode with ALIGN_CORNERS_TRUE or ALIGN_CORNERS_FALSE");
    sh = params.fractionalscalingfactor(0);
    sw = params.fractionalscalingfactor(1);
  } else if (params.scalingfactor_size() > 0) {
    require(params.scalingfactor_size() == 2, "scalingFactor must have 2 values");
    sh = static_cast<double>(params.scalingfactor(0));
    sw = static_cast<double>(params.scalingfactor(1));
  }
  require(sh > 0 && sw > 0, "scaling factors must be positive");
  const int64_t h = dim_from_end(x.type, 2), w = dim_from_end(x.type, 1);
  const int64_t oh = h < 0 ? -1 : static_cast<int64_t>(std::floor(h * sh)), ow = w < 0 ? -1 : static_cast<int64_t>(std::floor(w * sw));
  const ir::ValueType y = with_hw(x.type, oh, ow);
  if (params.mode() == P::NN) {
    // Output i reads input floor(i / scale).
    layer.set_output(0, layer.emit1("upsample_nearest_neighbor",
                                    {{"x", {x}}, {"scale_factor_height", {float_scalar(static_cast<float>(sh))}},
                                     {"scale_factor_width", {float_scalar(static_cast<float>(sw))}}},
                                    y));
    return;
  }
  require(params.mode() == P::BILINEAR, "unknown upsample mode ", static_cast<int>(params.mode()));
  // DEFAULT: output i samples input i / scale; ALIGN_CORNERS_TRUE: i (in - 1) / (out - 1);
  // ALIGN_CORNERS_FALSE: (i + 0.5) / scale - 0.5. All three are resize_bilinear modes.
  const char* mode = nullptr;
  switch (params.linearupsamplemode()) {
    case P::DEFAULT: mode = "DEFAULT"; break;
    case P::ALIGN_CORNERS_TRUE: mode = "STRICT_ALIGN_CORNERS"; break;
    case P::ALIGN_CORNERS_FALSE: mode = "UNALIGN_CORNERS"; break;
    default: refuse("unknown linearUpsampleMode ", static_cast<int>(params.linearupsamplemode()));
  }
  if (oh < 0 || ow < 0) {
    // Height or width known only at prediction: upsample_bilinear sizes the output from the
    // input then, floor(size * scale) as above, and samples as resize_bilinear in `mode`
    // (both resize through resize_trailing, src/ops/resize.cc).
    const bool align = params.linearupsamplemode() == P::ALIGN_CORNERS_TRUE;
    layer.set_output(0, layer.emit1("upsample_bilinear",
                                    {{"x", {x}}, {"scale_factor_height", {float_scalar(static_cast<float>(sh))}},
                                     {"scale_factor_width", {float_scalar(static_cast<float>(sw))}},
                                     {"align_corners", {bool_scalar(align)}},
                                     {"half_pixel_centers", {bool_scalar(params.linearupsamplemode() == P::ALIGN_CORNERS_FALSE)}}},
                                    y));
    return;
  }
  require(oh > 0 && ow > 0, "bilinear upsampling to an empty height or width");
  layer.set_output(0, layer.emit1("resize_bilinear",
                                  {{"x", {x}}, {"target_size_height", {int_scalar(static_cast<int32_t>(oh))}},
                                   {"target_size_width", {int_scalar(static_cast<int32_t>(ow))}},
                                   {"sampling_mode", {string_scalar(mode)}}},
                                  y));
}

void resize_bilinear(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ResizeBilinearLayerParams>();
  const Value& x = layer.input(0);
  require(x.type.rank >= 3, "input has rank ", x.type.rank, "; resizeBilinear needs [C, H, W] axes");
  int64_t th = 1, tw = 1;
  if (params.targetsize_size() > 0) {
    require(params.targetsize_size() == 2, "targetSize must have 2 values");
    th = static_cast<int64_t>(params.targetsize(0));
    tw = static_cast<int64_t>(params.targetsize(1));
  }
  require(th > 0 && tw > 0, "targetSize must be positive");
  layer.set_output(0, layer.emit1("resize_bilinear",
                                  {{"x", {x}}, {"target_size_height", {int_scalar(static_cast<int32_t>(th))}},
                                   {"target_size_width", {int_scalar(static_cast<int32_t>(tw))}},
                                   {"sampling_mode", {string_scalar(sampling_mode(params.mode().samplingmethod()))}}},
                                  with_hw(x.type, th, tw)));
}

// cropResize: boxes of input 1 ([N, 1, 4 or 5, 1, 1]) cut from the images of input 0
// ([1, B, C, H, W]) and resized, giving [N, B, C, targetH, targetW].
void crop_resize(LayerContext& layer) {
  layer.expect_io(2, 2, 1);
  const auto params = layer.parse_params<nn::CropResizeLayerParams>();
  const Value& x = layer.input(0);
  const Value& roi = layer.input(1);
  require(x.type.rank == 5 && (x.type.dims[0] == 1 || x.type.dims[0] < 0), "input ", x.type.str(), " is not [1, B, C, H, W]");
  require(roi.type.rank == 5, "box input ", roi.type.str(), " is not [N, 1, 4 or 5, 1, 1]");
  int64_t th = 1, tw = 1;
  if (params.targetsize_size() > 0) {
    require(params.targetsize_size() == 2, "targetSize must have 2 values");
    th = static_cast<int64_t>(params.targetsize(0));
    tw = static_cast<int64_t>(params.targetsize(1));
  }
  const char* box_mode = nullptr;
  switch (params.boxindicesmode().boxmode()) {
    case nn::BoxCoordinatesMode::CORNERS_HEIGHT_FIRST: box_mode = "CORNERS_HEIGHT_FIRST"; break;
    case nn::BoxCoordinatesMode::CORNERS_WIDTH_FIRST: box_mode = "CORNERS_WIDTH_FIRST"; break;
    case nn::BoxCoordinatesMode::CENTER_SIZE_HEIGHT_FIRST: box_mode = "CENTER_SIZE_HEIGHT_FIRST"; break;
    case nn::BoxCoordinatesMode::CENTER_SIZE_WIDTH_FIRST: box_mode = "CENTER_SIZE_WIDTH_FIRST"; break;
    default: refuse("unknown box coordinate mode");
  }
  const auto& d = x.type.dims;
  const Value images = layer.emit1("squeeze", {{"x", {x}}, {"axes", {int_vector({0})}}},
                                   tensor_type(x.type.dtype, {d[1], d[2], d[3], d[4]}));
  layer.set_output(0, layer.emit1("crop_resize",
                                  {{"x", {images}}, {"roi", {roi}},
                                   {"target_height", {int_scalar(static_cast<int32_t>(th))}},
                                   {"target_width", {int_scalar(static_cast<int32_t>(tw))}},
                                   {"normalized_coordinates", {bool_scalar(params.normalizedcoordinates())}},
                                   {"spatial_scale", {float_scalar(params.spatialscale())}},
                                   {"box_coordinate_mode", {string_scalar(box_mode)}},
                                   {"sampling_mode", {string_scalar(sampling_mode(params.mode().samplingmethod()))}}},
                                  tensor_type(x.type.dtype, {roi.type.dims[0], d[1], d[2], th, tw})));
}

// crop: one input loses cropAmounts from its [H, W] edges; with two, input 0 is cut to input
// 1's [H, W] starting at offset [top, left].
void crop(LayerContext& layer) {
  layer.expect_io(1, 2, 1);
  const auto params = layer.parse_params<nn::CropLayerParams>();
  const Value& x = layer.input(0);
  require(x.type.rank >= 3, "input has rank ", x.type.rank, "; crop needs [C, H, W] axes");
  const int64_t h = dim_from_end(x.type, 2), w = dim_from_end(x.type, 1);
  int64_t top = 0, bottom = 0, left = 0, right = 0;
  if (layer.input_count() == 1) {
    const auto& amounts = params.cropamounts();
    require(amounts.borderamounts_size() == 2, "cropAmounts has ", amounts.borderamounts_size(), " entries; expected 2");
    top = amounts.borderamounts(0).startedgesize();
    bottom = amounts.borderamounts(0).endedgesize();
    left = amounts.borderamounts(1).startedgesize();
    right = amounts.borderamounts(1).endedgesize();
  } else {
    const Value& like = layer.input(1);
    require(like.type.rank >= 2, "its second input has rank ", like.type.rank);
    const int64_t th = dim_from_end(like.type, 2), tw = dim_from_end(like.type, 1);
    require(params.offset_size() == 2, "offset has ", params.offset_size(), " values; expected 2 ([top, left])");
    require(h >= 0 && w >= 0 && th >= 0 && tw >= 0, "cropping to the size of another blob needs both sizes known");
    top = params.offset(0);
    left = params.offset(1);
    bottom = h - th - top;
    right = w - tw - left;
  }
  require(top >= 0 && bottom >= 0 && left >= 0 && right >= 0, "crops more than the input holds");
  const int64_t oh = h < 0 ? -1 : h - top - bottom, ow = w < 0 ? -1 : w - left - right;
  require((h < 0 || oh > 0) && (w < 0 || ow > 0), "crops the whole input away");
  layer.set_output(0, layer.emit1("crop",
                                  {{"x", {x}}, {"crop_height", {int_vector({top, bottom})}}, {"crop_width", {int_vector({left, right})}}},
                                  with_hw(x.type, oh, ow)));
}

void reorganize_data(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ReorganizeDataLayerParams>();
  const int64_t block = static_cast<int64_t>(params.blocksize());
  require(block >= 2, "blockSize is ", block, "; it must be at least 2");
  SpatialFrame frame(layer, layer.input(0), 2);
  const auto& d = frame.folded_dims();
  auto mul = [](int64_t v, int64_t f) { return v < 0 ? -1 : v * f; };
  auto div = [&](int64_t v, const char* what) {
    require(v < 0 || v % block == 0, what, " ", v, " is not divisible by blockSize ", block);
    return v < 0 ? -1 : v / block;
  };
  using P = nn::ReorganizeDataLayerParams;
  const char* op = nullptr;
  const char* param = "block_size";
  std::vector<int64_t> out;
  switch (params.mode()) {
    case P::SPACE_TO_DEPTH:
      op = "space_to_depth";
      out = {mul(d[1], block * block), div(d[2], "height"), div(d[3], "width")};
      break;
    case P::DEPTH_TO_SPACE:
    case P::PIXEL_SHUFFLE:
      op = params.mode() == P::DEPTH_TO_SPACE ? "depth_to_space" : "pixel_shuffle";
      if (params.mode() == P::PIXEL_SHUFFLE) param = "upscale_factor";
      require(d[1] < 0 || d[1] % (block * block) == 0, "channels ", d[1], " are not divisible by blockSize^2 ", block * block);
      out = {d[1] < 0 ? -1 : d[1] / (block * block), mul(d[2], block), mul(d[3], block)};
      break;
    default: refuse("unknown reorganization mode ", static_cast<int>(params.mode()));
  }
  const Value y = layer.emit1(op, {{"x", {frame.folded()}}, {param, {int_scalar(static_cast<int32_t>(block))}}}, frame.folded_type(out));
  layer.set_output(0, frame.unfold(y));
}

}  // namespace

void register_resize_layers(LayerTable& table) {
  table[190] = crop;
  table[210] = upsample;
  table[211] = resize_bilinear;
  table[212] = crop_resize;
  table[345] = reorganize_data;
}

}  // namespace coremlrt::format::neural_network
