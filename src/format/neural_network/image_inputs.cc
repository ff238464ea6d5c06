// Image inputs of a neuralNetwork and its image preprocessing (image_inputs.h).
#include "format/neural_network/image_inputs.h"

namespace coremlrt::format::neural_network {

namespace {

int64_t channels_of(const FeatureDescription& feature) {
  return feature.color_space == "RGB" || feature.color_space == "BGR" ? 3 : 1;
}

// The input an entry names. An entry without a name is taken to mean the model's only image
// input; with several image inputs it is ambiguous and refused.
const FeatureDescription& named_input(const FunctionDescription& function, const std::string& name) {
  const FeatureDescription* sole_image = nullptr;
  int images = 0;
  for (const FeatureDescription& feature : function.inputs) {
    if (!name.empty() && feature.name == name) return feature;
    if (feature.kind == FeatureKind::Image) {
      sole_image = &feature;
      ++images;
    }
  }
  require(name.empty(), "image preprocessing names the input '", name, "', which the model does not have");
  require(images == 1, "an image preprocessing entry names no input, and the model has ", images,
          " image inputs to choose from");
  return *sole_image;
}

// The biases of NeuralNetworkImageScaler in the order the image's channels arrive.
std::vector<float> channel_biases(const nn::NeuralNetworkImageScaler& scaler, const std::string& color_space) {
  if (color_space == "BGR") return {scaler.bluebias(), scaler.greenbias(), scaler.redbias()};
  if (color_space == "RGB") return {scaler.redbias(), scaler.greenbias(), scaler.bluebias()};
  return {scaler.graybias()};
}

}  // namespace

ir::ValueType image_input_type(const FeatureDescription& feature) {
  require(feature.kind == FeatureKind::Image, "input '", feature.name, "' is not an image");
  const std::string& space = feature.color_space;
  require(space == "RGB" || space == "BGR" || space == "GRAYSCALE" || space == "GRAYSCALE_FLOAT16", "image input '",
          feature.name, "' has the color space ", space, ", which this build cannot take");
  require(feature.image_width > 0 && feature.image_height > 0, "image input '", feature.name, "' declares the size ",
          feature.image_width, "x", feature.image_height);
  std::vector<int64_t> dims{1, channels_of(feature), feature.image_height, feature.image_width};
  // A flexible size leaves H or W unknown (-1); the runtime checks each image against the
  // declared sizes (src/runtime/model.cc).
  for (size_t i = 2; i < 4; ++i) {
    if (i < feature.shape_range.size() && feature.shape_range[i].first != feature.shape_range[i].second) dims[i] = -1;
    for (const Shape& shape : feature.enumerated_shapes)
      if (shape.size() != dims.size() || shape[i] != dims[i]) dims[i] = -1;
  }
  return tensor_type(space == "GRAYSCALE_FLOAT16" ? DType::Float16 : DType::Float32, std::move(dims));
}

std::map<std::string, ImagePreprocessing> read_image_preprocessing(const nn::NeuralNetwork& network,
                                                                   const FunctionDescription& function) {
  std::map<std::string, ImagePreprocessing> out;
  for (const std::string& bytes : network.preprocessing()) {
    nn::NeuralNetworkPreprocessing entry;
    require(entry.ParseFromString(bytes), "an image preprocessing entry does not parse");
    const FeatureDescription* feature = &named_input(function, entry.featurename());
    require(feature->kind == FeatureKind::Image, "image preprocessing names the input '", feature->name,
            "', which is not an image");
    require(!out.count(feature->name), "image preprocessing is given twice for the input '", feature->name, "'");
    const ir::ValueType type = image_input_type(*feature);
    const int64_t c = type.dims[1], h = type.dims[2], w = type.dims[3];
    ImagePreprocessing& pre = out[feature->name];
    switch (entry.preprocessor_case()) {
      case nn::NeuralNetworkPreprocessing::kScaler: {
        // NeuralNetworkImageScaler: Y[c] = channelScale * X[c] + bias[c], as the schema writes it.
        pre.scale = entry.scaler().channelscale();
        pre.bias = float_tensor(channel_biases(entry.scaler(), feature->color_space), {1, c, 1, 1});
        break;
      }
      case nn::NeuralNetworkPreprocessing::kMeanImage: {
        require(h > 0 && w > 0, "the mean image of input '", feature->name,
                "' has one size, and the image's size is flexible");
        const auto& mean = entry.meanimage().meanimage();
        require(static_cast<int64_t>(mean.size()) == c * h * w, "the mean image of input '", feature->name, "' has ",
                mean.size(), " values; the ", c, "x", h, "x", w, " image needs ", c * h * w);
        pre.mean = float_tensor(std::vector<float>(mean.begin(), mean.end()), {1, c, h, w});
        break;
      }
      case nn::NeuralNetworkPreprocessing::PREPROCESSOR_NOT_SET: break;  // passes the image through
    }
  }
  return out;
}

}  // namespace coremlrt::format::neural_network
