#pragma once
// Image inputs of a neuralNetwork. The caller feeds an image as the [1, C, H, W] array the
// ML-program path takes (python/coremlrt/model.py: pixel values 0..255, channels in the
// image's color order; fp16 for GRAYSCALE_FLOAT16). The network's `preprocessing` list
// (proto/nn_preprocessing.proto) is applied to that array before any layer reads it, as ops
// at the start of the program.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "coremlrt/description.h"
#include "format/neural_network/layer_translator.h"
#include "nn_preprocessing.pb.h"

namespace coremlrt::format::neural_network {

// The program input of an image feature: [1, C, H, W], fp32 (fp16 for GRAYSCALE_FLOAT16).
// Refuses color spaces and sizes it cannot describe.
ir::ValueType image_input_type(const FeatureDescription& feature);

// What one image input's preprocessing computes, in fp32 on the [1, C, H, W] array:
// y = scale * x + bias (bias [1, C, 1, 1]), or y = x - mean (mean [1, C, H, W]).
struct ImagePreprocessing {
  std::optional<float> scale;
  std::optional<Value> bias;
  std::optional<Value> mean;
};

// The preprocessing of each image input, by input name. Refuses entries that name no image
// input, that name one twice, or whose parameters do not fit the image.
std::map<std::string, ImagePreprocessing> read_image_preprocessing(const nn::NeuralNetwork& network,
                                                                   const FunctionDescription& function);

}  // namespace coremlrt::format::neural_network
