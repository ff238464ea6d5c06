// The models whose inputs are strings or dictionaries: dictVectorizer (Model field 603) and
// categoricalMapping (606); oneHotEncoder over strings is in one_hot_encoder_reader.cc.
// The engine's tensors hold no strings, so such an input is carried as numbers laid out over
// the `vocabulary` constant of the op that reads it (ops/feature_engineering.cc says how);
// Model::input_vocabulary() hands that vocabulary to a caller, who encodes its strings and
// dictionaries with it. Each model compares strings only with its own keys, so the encoding
// loses nothing. A string output (categoricalMapping from int64) leaves as a code into the
// op's `output_vocabulary` (Model::output_vocabulary()); a string imputer, whose output may be
// any input string, cannot be carried so and is refused (imputer_reader.cc).
#include <algorithm>

#include "classic_feature.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

namespace spec = CoreML::Specification;

namespace {

const FeatureDescription& single_input(const FunctionDescription& description, const char* model_type) {
  COREMLRT_CHECK(description.inputs.size() == 1, model_type, ": takes one input; the description declares ",
                 description.inputs.size());
  return description.inputs.front();
}

void require_distinct(std::vector<std::string> keys, const char* model_type) {
  std::sort(keys.begin(), keys.end());
  auto twice = std::adjacent_find(keys.begin(), keys.end());
  COREMLRT_CHECK(twice == keys.end(), model_type, ": key '", *twice, "' is listed twice");
}

// int64 -> string: the output is a code into the op's output vocabulary (the mapped strings in
// key order, then the default), decoded by the caller (Model::output_vocabulary()).
ir::Program read_int64_to_string(const spec::CategoricalMapping& mapping, const FunctionDescription& description) {
  const FeatureDescription& input = single_input(description, "categoricalMapping");
  COREMLRT_CHECK(input.kind == FeatureKind::Int64, "categoricalMapping: input '", input.name, "' is a ",
                 feature_kind_name(input.kind), " feature; a map from int64 takes an int64 (a sequence of int64 is "
                 "not supported by this build)");
  COREMLRT_CHECK(mapping.ValueOnUnknown_case() == spec::CategoricalMapping::kStrValue,
                 "categoricalMapping: a map from int64 needs strValue, the string for an unknown key; the model ",
                 mapping.ValueOnUnknown_case() == spec::CategoricalMapping::kInt64Value ? "gives an int64" : "gives none");
  COREMLRT_CHECK(description.outputs.size() == 1 && description.outputs.front().kind == FeatureKind::String,
                 "categoricalMapping: a map from int64 has one string output");
  std::vector<std::pair<int64_t, std::string>> entries(mapping.int64tostringmap().map().begin(),
                                                       mapping.int64tostringmap().map().end());
  std::sort(entries.begin(), entries.end());  // a protobuf map has no order
  std::vector<int64_t> keys;
  std::vector<std::string> strings;
  for (const auto& [key, text] : entries) {
    keys.push_back(key);
    strings.push_back(text);
  }
  strings.push_back(mapping.strvalue());
  PredictorProgram program(description, "categoricalMapping");
  const auto n = static_cast<int64_t>(keys.size());
  std::string value = program.transformer_output_value();
  program.add_model_op("int64_to_string", {{"keys", i64_tensor(keys, {n})}, {"output_vocabulary", string_vector(strings)}},
                       tensor_type(DType::Int64, {}), value);
  program.finish_transformer(value);
  return program.take();
}

}  // namespace

ir::Program read_dict_vectorizer(const std::string& serialized, const FunctionDescription& description) {
  spec::DictVectorizer vectorizer;
  COREMLRT_CHECK(vectorizer.ParseFromString(serialized), "dictVectorizer: the message does not parse");
  const FeatureDescription& input = single_input(description, "dictVectorizer");
  COREMLRT_CHECK(input.kind == FeatureKind::Dictionary, "dictVectorizer: input '", input.name, "' is a ",
                 feature_kind_name(input.kind), " feature; it takes a dictionary");
  // Integer keys are written in decimal; the flag keeps 7 and "7" apart for the caller.
  std::vector<std::string> keys;
  bool integer_keys = false;
  if (vectorizer.Map_case() == spec::DictVectorizer::kStringToIndex) {
    keys.assign(vectorizer.stringtoindex().vector().begin(), vectorizer.stringtoindex().vector().end());
  } else {
    COREMLRT_CHECK(vectorizer.Map_case() == spec::DictVectorizer::kInt64ToIndex, "dictVectorizer: the model gives no keys");
    integer_keys = true;
    for (int64_t key : vectorizer.int64toindex().vector()) keys.push_back(std::to_string(key));
  }
  COREMLRT_CHECK(!keys.empty(), "dictVectorizer: the key list is empty");
  require_distinct(keys, "dictVectorizer");
  PredictorProgram program(description, "dictVectorizer");
  const auto count = static_cast<int64_t>(keys.size());
  const FeatureDescription& output = program.single_output();
  // A dictionary output (coremltools' pipelines use one, read by a featureVectorizer) is the
  // int64-keyed sparse form of the same vector, carried densely like a one-hot encoder's.
  COREMLRT_CHECK(output.kind == FeatureKind::MultiArray || output.kind == FeatureKind::Dictionary,
                 "dictVectorizer: output '", output.name, "' is a ", feature_kind_name(output.kind),
                 " feature; it computes a multi-array or an int64-keyed dictionary");
  std::string value = program.transformer_output_value();
  program.add_model_op("dict_vectorizer", {{"vocabulary", string_vector(keys)}, {"integer_keys", i32_scalar(integer_keys)}},
                       program.transformer_output_type(count), value);
  program.finish_transformer(value);
  return program.take();
}

ir::Program read_categorical_mapping(const std::string& serialized, const FunctionDescription& description) {
  spec::CategoricalMapping mapping;
  COREMLRT_CHECK(mapping.ParseFromString(serialized), "categoricalMapping: the message does not parse");
  if (mapping.MappingType_case() == spec::CategoricalMapping::kInt64ToStringMap)
    return read_int64_to_string(mapping, description);
  COREMLRT_CHECK(mapping.MappingType_case() == spec::CategoricalMapping::kStringToInt64Map,
                 "categoricalMapping: the model gives no map");
  const FeatureDescription& input = single_input(description, "categoricalMapping");
  COREMLRT_CHECK(input.kind == FeatureKind::String, "categoricalMapping: input '", input.name, "' is a ",
                 feature_kind_name(input.kind), " feature; a map from strings takes a string (a sequence of strings "
                 "is not supported by this build)");
  COREMLRT_CHECK(mapping.ValueOnUnknown_case() == spec::CategoricalMapping::kInt64Value,
                 "categoricalMapping: a map from strings needs int64Value, the value for an unknown string; the model ",
                 mapping.ValueOnUnknown_case() == spec::CategoricalMapping::kStrValue ? "gives a string" : "gives none");
  // A protobuf map has no order; sorted keys make the vocabulary the same at every load.
  std::vector<std::pair<std::string, int64_t>> entries(mapping.stringtoint64map().map().begin(),
                                                       mapping.stringtoint64map().map().end());
  std::sort(entries.begin(), entries.end());
  std::vector<std::string> keys;
  std::vector<int64_t> values;
  for (const auto& [key, v] : entries) {
    keys.push_back(key);
    values.push_back(v);
  }
  PredictorProgram program(description, "categoricalMapping");
  const FeatureDescription& output = program.single_output();
  COREMLRT_CHECK(output.kind == FeatureKind::Int64, "categoricalMapping: output '", output.name, "' is a ",
                 feature_kind_name(output.kind), " feature; a map from strings gives an int64");
  const auto n = static_cast<int64_t>(keys.size());
  std::string value = program.transformer_output_value();
  program.add_model_op("string_to_int64",
                       {{"vocabulary", string_vector(keys)},
                        {"values", i64_tensor(values, {n})},
                        {"default", i64_tensor({mapping.int64value()}, {1})}},
                       program.transformer_output_type(1), value);
  program.finish_transformer(value);
  return program.take();
}

}  // namespace coremlrt::format::classic
