#pragma once
// What a model says about itself: features (inputs, outputs, states) per function and
// metadata. Read from the model's description; mirrors coremltools' view of a model.
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coremlrt/tensor.h"

namespace coremlrt {

enum class FeatureKind { MultiArray, Image, Int64, Double, String, Dictionary, Sequence, State };

const char* feature_kind_name(FeatureKind kind);

struct FeatureDescription {
  std::string name;
  std::string short_description;
  FeatureKind kind = FeatureKind::MultiArray;
  // Element type of a multi-array (or a state's array) or a sequence (int64 or string); a
  // dictionary's key type (int64 or string).
  DType dtype = DType::Float32;
  Shape shape;                   // fixed or default shape; may be empty for outputs
  // Flexible shapes: one (lower, upper) range per dim, upper -1 = unbounded; or a list of
  // allowed shapes. At most one of the two is set. For an image: the flexible sizes of the
  // [1, C, H, W] array it arrives as (its imageSizeRange or enumeratedSizes). For a sequence:
  // the one range of its length, when the model bounds it.
  std::vector<std::pair<int64_t, int64_t>> shape_range;
  std::vector<Shape> enumerated_shapes;
  bool optional = false;
  // Optional multi-array inputs: the value Core ML fills the declared shape with when the
  // input is absent (the description's int/float/doubleDefaultValue).
  std::optional<double> default_value;
  // Images: size and color space ("RGB", "BGR", "GRAYSCALE", "GRAYSCALE_FLOAT16").
  int64_t image_width = 0;
  int64_t image_height = 0;
  std::string color_space;
  // The type in words, for messages and `coremlrt info`: "float32 [1, 3, 224, 224]".
  std::string type_str() const;
};

struct FunctionDescription {
  std::string name;
  std::vector<FeatureDescription> inputs;
  std::vector<FeatureDescription> outputs;
  std::vector<FeatureDescription> states;
  std::string predicted_feature_name;
  std::string predicted_probabilities_name;
};

// The entries a string, dictionary or sequence input is taken over as numbers
// (Model::input_vocabulary): integer keys in decimal, `integer_keys` set.
// The code an optional sequence input left out of a prediction arrives as: an int64 vector
// holding this one value (Model::input_vocabulary).
constexpr int64_t kAbsentSequenceCode = -2;

struct InputVocabulary {
  std::vector<std::string> entries;
  bool integer_keys = false;
  // A dictionary's value at the place of an entry it does not hold: 0 (dictVectorizer), or NaN
  // where the reader tells a key absent from a key whose value is 0 (itemSimilarityRecommender).
  double absent_value = 0.0;
};

struct ModelMetadata {
  std::string short_description;
  std::string version;
  std::string author;
  std::string license;
  std::map<std::string, std::string> user_defined;
};

struct ModelDescription {
  int specification_version = 0;
  std::string model_type;  // "mlProgram", "neuralNetwork", "pipeline", ...
  // The model type's family (src/format/model_kinds.h): "mlProgram", "neuralNetwork" (and its
  // classifier and regressor), "classicPredictor", "featureEngineering", "pipeline",
  // "linkedModel" or "other".
  std::string model_family;
  bool multifunction = false;
  // For a single-function model: one entry named "main" built from the top-level features.
  std::vector<FunctionDescription> functions;
  std::string default_function;
  ModelMetadata metadata;

  const FunctionDescription* find_function(const std::string& name) const;
};

}  // namespace coremlrt
