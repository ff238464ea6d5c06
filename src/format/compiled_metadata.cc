#include "format/compiled_metadata.h"

#include <nlohmann/json.hpp>

#include "coremlrt/error.h"
#include "format/model_kinds.h"

namespace coremlrt::format {

using json = nlohmann::ordered_json;

namespace {

// Core ML writes booleans and shapes in metadata.json as strings ("0", "[1, 3]").
const char* flag(bool value) { return value ? "1" : "0"; }

const char* kind_text(FeatureKind kind) {
  switch (kind) {
    case FeatureKind::MultiArray: return "MultiArray";
    case FeatureKind::Image: return "Image";
    case FeatureKind::Int64: return "Int64";
    case FeatureKind::Double: return "Double";
    case FeatureKind::String: return "String";
    case FeatureKind::Dictionary: return "Dictionary";
    case FeatureKind::Sequence: return "Sequence";
    case FeatureKind::State: return "State";
  }
  return "Invalid";
}

const char* array_dtype_text(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "Float32";
    case DType::Float16: return "Float16";
    case DType::Float64: return "Double";
    case DType::Int32: return "Int32";
    case DType::Int8: return "Int8";
    case DType::Int64: return "Int64";
    case DType::String: return "String";
    default: return dtype_name(dtype);
  }
}

std::string shape_text(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string formatted_type(const FeatureDescription& f) {
  if (f.kind == FeatureKind::Image)
    return std::string("Image (") + (f.color_space.rfind("GRAYSCALE", 0) == 0 ? "Grayscale " : "Color ") +
           std::to_string(f.image_width) + " × " + std::to_string(f.image_height) + ")";
  if (f.kind != FeatureKind::MultiArray && f.kind != FeatureKind::State) return kind_text(f.kind);
  std::string out = std::string(f.kind == FeatureKind::State ? "State (" : "MultiArray (") + array_dtype_text(f.dtype);
  for (size_t i = 0; i < f.shape.size(); ++i) out += (i ? " × " : " ") + std::to_string(f.shape[i]);
  return out + ")";
}

json feature_json(const FeatureDescription& f) {
  json out;
  out["name"] = f.name;
  out["type"] = kind_text(f.kind);
  out["formattedType"] = formatted_type(f);
  out["shortDescription"] = f.short_description;
  out["isOptional"] = flag(f.optional);
  if (f.kind == FeatureKind::MultiArray || f.kind == FeatureKind::State) {
    out["dataType"] = array_dtype_text(f.dtype);
    out["shape"] = shape_text(f.shape);
    const bool flexible = !f.shape_range.empty() || !f.enumerated_shapes.empty();
    out["hasShapeFlexibility"] = flag(flexible);
    if (!f.shape_range.empty()) {
      std::string ranges = "[";
      for (size_t i = 0; i < f.shape_range.size(); ++i)
        ranges += (i ? ", [" : "[") + std::to_string(f.shape_range[i].first) + ", " +
                  std::to_string(f.shape_range[i].second) + "]";
      out["shapeRange"] = ranges + "]";
    }
    if (!f.enumerated_shapes.empty()) {
      std::string shapes = "[";
      for (size_t i = 0; i < f.enumerated_shapes.size(); ++i) shapes += (i ? ", " : "") + shape_text(f.enumerated_shapes[i]);
      out["enumeratedShapes"] = shapes + "]";
    }
  } else if (f.kind == FeatureKind::Image) {
    out["width"] = std::to_string(f.image_width);
    out["height"] = std::to_string(f.image_height);
    out["colorspace"] = f.color_space;
    out["hasSizeFlexibility"] = "0";
  } else if (f.kind == FeatureKind::Int64 || f.kind == FeatureKind::Double || f.kind == FeatureKind::String) {
    out["dataType"] = kind_text(f.kind);
  }
  return out;
}

json schema(const std::vector<FeatureDescription>& features) {
  json out = json::array();
  for (const auto& f : features) out.push_back(feature_json(f));
  return out;
}

// Reading: strings where Core ML writes strings, but plain JSON numbers and arrays are taken too.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  std::string string(const json& object, const char* key, const std::string& where, const char* fallback = nullptr) {
    if (!object.contains(key)) {
      COREMLRT_CHECK(fallback != nullptr, path_, ": ", where, " has no '", key, "'");
      return fallback;
    }
    const json& value = object[key];
    if (value.is_string()) return value.get<std::string>();
    if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
    fail(path_, ": ", where, " '", key, "' is not a string");
  }

  bool boolean(const json& object, const char* key, const std::string& where) {
    if (!object.contains(key)) return false;
    if (object[key].is_boolean()) return object[key].get<bool>();
    std::string text = string(object, key, where);
    COREMLRT_CHECK(text == "0" || text == "1", path_, ": ", where, " '", key, "' is '", text, "'; expected \"0\" or \"1\"");
    return text == "1";
  }

  // "[1, 3]" (or a JSON array) -> JSON array.
  json array(const json& object, const char* key, const std::string& where) {
    const json& value = object[key];
    if (value.is_array()) return value;
    std::string text = string(object, key, where);
    try {
      json parsed = json::parse(text);
      COREMLRT_CHECK(parsed.is_array(), path_, ": ", where, " '", key, "' is not a list: ", text);
      return parsed;
    } catch (const json::exception&) {
      fail(path_, ": ", where, " '", key, "' is not a list: ", text);
    }
  }

  Shape shape(const json& list, const std::string& where) {
    Shape out;
    for (const auto& d : list) {
      COREMLRT_CHECK(d.is_number_integer(), path_, ": ", where, " has a dimension that is not an integer");
      out.push_back(d.get<int64_t>());
    }
    return out;
  }

  FeatureDescription feature(const json& f, const std::string& schema_name) {
    COREMLRT_CHECK(f.is_object(), path_, ": an entry of ", schema_name, " is not an object");
    FeatureDescription out;
    out.name = string(f, "name", "an entry of " + schema_name);
    const std::string where = schema_name + " feature '" + out.name + "'";
    out.short_description = string(f, "shortDescription", where, "");
    out.optional = boolean(f, "isOptional", where);
    const std::string type = string(f, "type", where);
    static const FeatureKind kKinds[] = {FeatureKind::MultiArray, FeatureKind::Image,      FeatureKind::Int64,
                                         FeatureKind::Double,     FeatureKind::String,     FeatureKind::Dictionary,
                                         FeatureKind::Sequence,   FeatureKind::State};
    bool known = false;
    for (FeatureKind kind : kKinds)
      if (type == kind_text(kind)) {
        out.kind = kind;
        known = true;
      }
    COREMLRT_CHECK(known, path_, ": ", where, " has type '", type,
                   "'; expected MultiArray, Image, Int64, Double, String, Dictionary, Sequence or State");
    if (out.kind == FeatureKind::MultiArray || out.kind == FeatureKind::State) {
      const std::string dtype = string(f, "dataType", where);
      static const DType kDtypes[] = {DType::Float32, DType::Float16, DType::Float64, DType::Int32, DType::Int8};
      known = false;
      for (DType d : kDtypes)
        if (dtype == array_dtype_text(d)) {
          out.dtype = d;
          known = true;
        }
      COREMLRT_CHECK(known, path_, ": ", where, " has dataType '", dtype,
                     "'; expected Float32, Float16, Double, Int32 or Int8");
      if (f.contains("shape")) out.shape = shape(array(f, "shape", where), where + " shape");
      if (f.contains("shapeRange")) {
        for (const auto& range : array(f, "shapeRange", where)) {
          COREMLRT_CHECK(range.is_array() && range.size() == 2 && range[0].is_number_integer() &&
                             range[1].is_number_integer(),
                         path_, ": ", where, " shapeRange entries must be [lower, upper]");
          out.shape_range.emplace_back(range[0].get<int64_t>(), range[1].get<int64_t>());
        }
      }
      if (f.contains("enumeratedShapes"))
        for (const auto& s : array(f, "enumeratedShapes", where))
          out.enumerated_shapes.push_back(shape(s, where + " enumeratedShapes"));
    } else if (out.kind == FeatureKind::Image) {
      out.image_width = std::stoll(string(f, "width", where));
      out.image_height = std::stoll(string(f, "height", where));
      out.color_space = string(f, "colorspace", where);
    } else if (out.kind == FeatureKind::Int64) {
      out.dtype = DType::Int64;
    } else if (out.kind == FeatureKind::Double) {
      out.dtype = DType::Float64;
    } else if (out.kind == FeatureKind::String) {
      out.dtype = DType::String;
    }
    return out;
  }

  std::vector<FeatureDescription> features(const json& object, const char* key, bool required) {
    std::vector<FeatureDescription> out;
    if (!object.contains(key)) {
      COREMLRT_CHECK(!required, path_, ": has no '", key, "'");
      return out;
    }
    COREMLRT_CHECK(object[key].is_array(), path_, ": '", key, "' is not a list");
    for (const auto& f : object[key]) out.push_back(feature(f, key));
    return out;
  }

  FunctionDescription function(const json& object, const std::string& name) {
    FunctionDescription out;
    out.name = name;
    out.inputs = features(object, "inputSchema", true);
    out.outputs = features(object, "outputSchema", true);
    out.states = features(object, "stateSchema", false);
    out.predicted_feature_name = string(object, "predictedFeatureName", "function '" + name + "'", "");
    out.predicted_probabilities_name = string(object, "predictedProbabilitiesName", "function '" + name + "'", "");
    return out;
  }

 private:
  std::string path_;
};

}  // namespace

std::string write_compiled_metadata(const ModelDescription& description, const std::map<std::string, int>& op_histogram) {
  json model;
  model["metadataOutputVersion"] = "3.0";
  model["specificationVersion"] = description.specification_version;
  model["modelType"] = {{"name", "MLModelType_" + description.model_type}};
  model["shortDescription"] = description.metadata.short_description;
  model["author"] = description.metadata.author;
  model["license"] = description.metadata.license;
  model["version"] = description.metadata.version;
  json user = json::object();
  for (const auto& [key, value] : description.metadata.user_defined) user[key] = value;
  model["userDefinedMetadata"] = user;
  if (!op_histogram.empty()) {
    json histogram = json::object();
    for (const auto& [op, count] : op_histogram) histogram[op] = count;
    model["mlProgramOperationTypeHistogram"] = histogram;
  }
  const FunctionDescription* main = description.find_function(description.default_function);
  COREMLRT_CHECK(main != nullptr, "model description has no default function '", description.default_function, "'");
  model["inputSchema"] = schema(main->inputs);
  model["outputSchema"] = schema(main->outputs);
  if (!main->states.empty()) model["stateSchema"] = schema(main->states);
  if (!main->predicted_feature_name.empty()) model["predictedFeatureName"] = main->predicted_feature_name;
  if (!main->predicted_probabilities_name.empty())
    model["predictedProbabilitiesName"] = main->predicted_probabilities_name;
  if (description.multifunction) {
    json functions = json::array();
    for (const auto& f : description.functions) {
      json entry;
      entry["name"] = f.name;
      entry["inputSchema"] = schema(f.inputs);
      entry["outputSchema"] = schema(f.outputs);
      if (!f.states.empty()) entry["stateSchema"] = schema(f.states);
      if (!f.predicted_feature_name.empty()) entry["predictedFeatureName"] = f.predicted_feature_name;
      if (!f.predicted_probabilities_name.empty()) entry["predictedProbabilitiesName"] = f.predicted_probabilities_name;
      functions.push_back(entry);
    }
    model["functions"] = functions;
    model["defaultFunctionName"] = description.default_function;
  }
  model["isUpdatable"] = "0";
  model["method"] = "predict";
  return json::array({model}).dump(2) + "\n";
}

ModelDescription read_compiled_metadata(const std::string& text, const std::string& path) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
  // Core ML writes a list holding one object; a bare object is taken too.
  if (root.is_array()) {
    COREMLRT_CHECK(root.size() == 1, path, ": holds ", root.size(), " entries; expected one model");
    root = root[0];
  }
  COREMLRT_CHECK(root.is_object(), path, ": is not a JSON object");
  Reader reader(path);
  ModelDescription out;
  COREMLRT_CHECK(root.contains("specificationVersion") && root["specificationVersion"].is_number_integer(), path,
                 ": has no integer 'specificationVersion'");
  out.specification_version = root["specificationVersion"].get<int>();
  COREMLRT_CHECK(root.contains("modelType") && root["modelType"].is_object(), path, ": has no 'modelType' object");
  std::string type = reader.string(root["modelType"], "name", "modelType");
  const std::string prefix = "MLModelType_";
  out.model_type = type.rfind(prefix, 0) == 0 ? type.substr(prefix.size()) : type;
  out.model_family = model_family_name(out.model_type);
  out.metadata.short_description = reader.string(root, "shortDescription", "the model", "");
  out.metadata.author = reader.string(root, "author", "the model", "");
  out.metadata.license = reader.string(root, "license", "the model", "");
  out.metadata.version = reader.string(root, "version", "the model", "");
  if (root.contains("userDefinedMetadata")) {
    COREMLRT_CHECK(root["userDefinedMetadata"].is_object(), path, ": 'userDefinedMetadata' is not an object");
    for (const auto& [key, value] : root["userDefinedMetadata"].items())
      out.metadata.user_defined[key] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  if (root.contains("functions") && root["functions"].is_array() && !root["functions"].empty()) {
    out.multifunction = true;
    for (const auto& f : root["functions"]) {
      COREMLRT_CHECK(f.is_object(), path, ": an entry of 'functions' is not an object");
      out.functions.push_back(reader.function(f, reader.string(f, "name", "an entry of 'functions'")));
    }
    out.default_function = reader.string(root, "defaultFunctionName", "the model", "");
    if (out.default_function.empty()) out.default_function = out.functions.front().name;
    COREMLRT_CHECK(out.find_function(out.default_function), path, ": defaultFunctionName '", out.default_function,
                   "' names no function of 'functions'");
  } else {
    out.functions.push_back(reader.function(root, "main"));
    out.default_function = "main";
  }
  return out;
}

}  // namespace coremlrt::format
