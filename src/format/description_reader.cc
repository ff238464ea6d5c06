#include "format/description_reader.h"

#include <limits>

#include "coremlrt/error.h"
#include "coremlrt/limits.h"
#include "format/model_kinds.h"

namespace coremlrt::format {

namespace spec = CoreML::Specification;

namespace {

DType array_dtype(spec::ArrayFeatureType::ArrayDataType type) {
  switch (type) {
    case spec::ArrayFeatureType::FLOAT32: return DType::Float32;
    case spec::ArrayFeatureType::DOUBLE: return DType::Float64;
    case spec::ArrayFeatureType::INT32: return DType::Int32;
    case spec::ArrayFeatureType::INT8: return DType::Int8;
    case spec::ArrayFeatureType::FLOAT16: return DType::Float16;
    default: fail("multi-array feature has unknown data type code ", static_cast<int>(type));
  }
}

void read_array(const spec::ArrayFeatureType& array, FeatureDescription& out) {
  out.dtype = array_dtype(array.datatype());
  out.shape.assign(array.shape().begin(), array.shape().end());
  if (array.has_shaperange())
    for (const auto& range : array.shaperange().sizeranges())
      out.shape_range.emplace_back(static_cast<int64_t>(range.lowerbound()), range.upperbound());
  if (array.has_enumeratedshapes())
    for (const auto& shape : array.enumeratedshapes().shapes())
      out.enumerated_shapes.emplace_back(shape.shape().begin(), shape.shape().end());
  switch (array.defaultOptionalValue_case()) {
    case spec::ArrayFeatureType::kIntDefaultValue: out.default_value = array.intdefaultvalue(); break;
    case spec::ArrayFeatureType::kFloatDefaultValue: out.default_value = array.floatdefaultvalue(); break;
    case spec::ArrayFeatureType::kDoubleDefaultValue: out.default_value = array.doubledefaultvalue(); break;
    default: break;
  }
}

// An image's flexible sizes, as the flexibility of the [1, C, H, W] array it arrives as
// (include/coremlrt/description.h). Without a declared width and height the default size is
// the first enumerated size, or the lower bounds of the ranges.
void read_image_size_flexibility(const spec::ImageFeatureType& image, FeatureDescription& out) {
  const int64_t channels = out.color_space == "RGB" || out.color_space == "BGR" ? 3 : 1;
  if (image.has_enumeratedsizes() && image.enumeratedsizes().sizes_size() > 0) {
    for (const auto& size : image.enumeratedsizes().sizes())
      out.enumerated_shapes.push_back(
          {1, channels, static_cast<int64_t>(size.height()), static_cast<int64_t>(size.width())});
    if (out.image_width == 0 && out.image_height == 0) {
      out.image_height = out.enumerated_shapes[0][2];
      out.image_width = out.enumerated_shapes[0][3];
    }
  } else if (image.has_imagesizerange()) {
    const auto& height = image.imagesizerange().heightrange();
    const auto& width = image.imagesizerange().widthrange();
    out.shape_range = {{1, 1},
                       {channels, channels},
                       {static_cast<int64_t>(height.lowerbound()), height.upperbound()},
                       {static_cast<int64_t>(width.lowerbound()), width.upperbound()}};
    if (out.image_width == 0 && out.image_height == 0) {
      out.image_height = static_cast<int64_t>(height.lowerbound());
      out.image_width = static_cast<int64_t>(width.lowerbound());
    }
  }
}

FeatureDescription read_feature(const spec::FeatureDescription& feature) {
  FeatureDescription out;
  out.name = feature.name();
  out.short_description = feature.shortdescription();
  const spec::FeatureType& type = feature.type();
  out.optional = type.isoptional();
  switch (type.Type_case()) {
    case spec::FeatureType::kMultiArrayType:
      out.kind = FeatureKind::MultiArray;
      read_array(type.multiarraytype(), out);
      break;
    case spec::FeatureType::kStateType:
      out.kind = FeatureKind::State;
      read_array(type.statetype().arraytype(), out);
      break;
    case spec::FeatureType::kImageType: {
      out.kind = FeatureKind::Image;
      const auto& image = type.imagetype();
      out.image_width = image.width();
      out.image_height = image.height();
      switch (image.colorspace()) {
        case spec::ImageFeatureType::GRAYSCALE: out.color_space = "GRAYSCALE"; break;
        case spec::ImageFeatureType::RGB: out.color_space = "RGB"; break;
        case spec::ImageFeatureType::BGR: out.color_space = "BGR"; break;
        case spec::ImageFeatureType::GRAYSCALE_FLOAT16: out.color_space = "GRAYSCALE_FLOAT16"; break;
        default: out.color_space = "INVALID"; break;
      }
      read_image_size_flexibility(image, out);
      break;
    }
    case spec::FeatureType::kInt64Type: out.kind = FeatureKind::Int64; out.dtype = DType::Int64; break;
    case spec::FeatureType::kDoubleType: out.kind = FeatureKind::Double; out.dtype = DType::Float64; break;
    case spec::FeatureType::kStringType: out.kind = FeatureKind::String; out.dtype = DType::String; break;
    case spec::FeatureType::kDictionaryType:
      // dtype: the key type (int64 or string).
      out.kind = FeatureKind::Dictionary;
      out.dtype = type.dictionarytype().KeyType_case() == spec::DictionaryFeatureType::kStringKeyType ? DType::String
                                                                                                     : DType::Int64;
      break;
    case spec::FeatureType::kSequenceType: {
      // dtype: the element type; shape_range: the one range of its length, when it has one.
      const spec::SequenceFeatureType& sequence = type.sequencetype();
      out.kind = FeatureKind::Sequence;
      switch (sequence.Type_case()) {
        case spec::SequenceFeatureType::kInt64Type: out.dtype = DType::Int64; break;
        case spec::SequenceFeatureType::kStringType: out.dtype = DType::String; break;
        default: fail("feature '", feature.name(), "' is a sequence with no element type");
      }
      if (sequence.has_sizerange()) {
        const spec::SizeRange& range = sequence.sizerange();
        // A range left at its defaults (0, 0) bounds nothing; a negative upper bound is unbounded.
        const bool unset = range.lowerbound() == 0 && range.upperbound() == 0;
        COREMLRT_CHECK(range.lowerbound() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), "feature '", feature.name(),
                       "': sequence length lower bound ", range.lowerbound(), " is out of range");
        if (!unset) {
          COREMLRT_CHECK(range.upperbound() < 0 || static_cast<uint64_t>(range.upperbound()) >= range.lowerbound(),
                         "feature '", feature.name(), "': sequence length range ", range.lowerbound(), "..",
                         range.upperbound(), " is empty");
          out.shape_range = {{static_cast<int64_t>(range.lowerbound()), range.upperbound() < 0 ? -1 : range.upperbound()}};
        }
      }
      break;
    }
    default: fail("feature '", feature.name(), "' has no type");
  }
  return out;
}

template <class Repeated>
std::vector<FeatureDescription> read_features(const Repeated& features) {
  std::vector<FeatureDescription> out;
  for (const auto& feature : features) out.push_back(read_feature(feature));
  return out;
}

}  // namespace

ModelDescription read_description(const spec::Model& model) {
  ModelDescription out;
  out.specification_version = model.specificationversion();
  out.model_type = model_type_name(static_cast<int>(model.Type_case()));
  out.model_family = model_family_name(out.model_type);
  const spec::ModelDescription& desc = model.description();
  const spec::Metadata& meta = desc.metadata();
  out.metadata.short_description = meta.shortdescription();
  out.metadata.version = meta.versionstring();
  out.metadata.author = meta.author();
  out.metadata.license = meta.license();
  for (const auto& [key, value] : meta.userdefined()) out.metadata.user_defined[key] = value;
  if (desc.functions_size() > 0) {
    out.multifunction = true;
    for (const auto& function : desc.functions()) {
      FunctionDescription f;
      f.name = function.name();
      f.inputs = read_features(function.input());
      f.outputs = read_features(function.output());
      f.states = read_features(function.state());
      f.predicted_feature_name = function.predictedfeaturename();
      f.predicted_probabilities_name = function.predictedprobabilitiesname();
      out.functions.push_back(std::move(f));
    }
    out.default_function = desc.defaultfunctionname();
    if (out.default_function.empty()) out.default_function = out.functions.front().name;
    COREMLRT_CHECK(out.find_function(out.default_function), "model description names default function '",
                   out.default_function, "', which it does not describe");
  } else {
    FunctionDescription f;
    f.name = "main";
    f.inputs = read_features(desc.input());
    f.outputs = read_features(desc.output());
    f.states = read_features(desc.state());
    // Older files may list states among the inputs; keep them with the states.
    for (auto it = f.inputs.begin(); it != f.inputs.end();) {
      if (it->kind == FeatureKind::State) {
        f.states.push_back(*it);
        it = f.inputs.erase(it);
      } else {
        ++it;
      }
    }
    f.predicted_feature_name = desc.predictedfeaturename();
    f.predicted_probabilities_name = desc.predictedprobabilitiesname();
    out.functions.push_back(std::move(f));
    out.default_function = "main";
  }
  return out;
}

}  // namespace coremlrt::format
