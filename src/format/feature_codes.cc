#include "format/feature_codes.h"

#include <algorithm>

#include "coremlrt/error.h"
#include "ir/class_labels.h"

namespace coremlrt::format {

namespace {

// The labels of the function's classify op: the last op of a classifier, so at the top level of
// its block (format/ writes it under that name for the models it translates: classic/predictor.cc,
// neural_network/reader.cc; ML programs have it as coremltools writes it). Empty when it has none.
// `classes` is bound inline (as coremltools writes it) or to a const op of the block.
std::vector<std::string> class_labels_of(const ir::Function& function, const std::string& where) {
  for (const ir::Operation& op : function.block.operations) {
    if (op.type != "classify") continue;
    auto input = op.inputs.find("classes");
    COREMLRT_CHECK(input != op.inputs.end() && input->second.size() == 1, where, ", ", op.describe(),
                   ": classify needs one 'classes' binding");
    const ir::Binding& binding = input->second[0];
    const ir::ConstValue* classes = binding.value.get();
    for (const ir::Operation& producer : function.block.operations) {
      if (classes) break;
      if (producer.type != "const" || producer.outputs.size() != 1 || producer.outputs[0].name != binding.name) continue;
      auto val = producer.attributes.find("val");
      if (val != producer.attributes.end()) classes = val->second.get();
    }
    COREMLRT_CHECK(classes != nullptr, where, ", ", op.describe(), ": classify's 'classes' must be a constant");
    return ir::read_class_labels(*classes, where + ", " + op.describe()).labels;
  }
  return {};
}

// The vocabulary of every string, dictionary or sequence input: the `vocabulary` constant of
// the one op that reads it (src/ops/feature_engineering.cc, format/classic/text_feature_readers.cc;
// src/ops/recommender.cc, format/classic/recommender_reader.cc), with its `absent_value` (the
// value of a key a dictionary lacks) when the op has one. An input read otherwise, or by several
// ops, has no single encoding and fails the load.
std::map<std::string, InputVocabulary> input_vocabularies_of(const ir::Function& function,
                                                            const FunctionDescription& description,
                                                            const std::string& where) {
  std::map<std::string, InputVocabulary> out;
  for (const FeatureDescription& feature : description.inputs) {
    if (feature.kind != FeatureKind::String && feature.kind != FeatureKind::Dictionary &&
        feature.kind != FeatureKind::Sequence)
      continue;
    int readers = 0;
    const ir::Operation* reader = nullptr;
    for (const ir::Operation& op : function.block.operations)
      for (const auto& [param, bindings] : op.inputs)
        for (const ir::Binding& b : bindings)
          if (b.name == feature.name) ++readers, reader = &op;
    const ir::ConstValue* vocabulary = nullptr;
    const ir::ConstValue* integer_keys = nullptr;
    const ir::ConstValue* absent_value = nullptr;
    if (readers == 1) {
      for (const auto& [param, bindings] : reader->inputs) {
        if (bindings.size() != 1 || !bindings[0].value) continue;
        if (param == "vocabulary") vocabulary = bindings[0].value.get();
        if (param == "integer_keys") integer_keys = bindings[0].value.get();
        if (param == "absent_value") absent_value = bindings[0].value.get();
      }
    }
    COREMLRT_CHECK(vocabulary && vocabulary->type.dtype == DType::String, where, ": input '", feature.name, "' is a ",
                   feature_kind_name(feature.kind), " feature, which this build takes only as the input of one "
                   "dictVectorizer, categoricalMapping, oneHotEncoder or itemSimilarityRecommender");
    InputVocabulary& v = out[feature.name];
    v.entries = vocabulary->strings;
    v.integer_keys = integer_keys && integer_keys->tensor.dtype == DType::Int32 && integer_keys->tensor.ptr<int32_t>()[0];
    if (absent_value && absent_value->tensor.dtype == DType::Float64 && absent_value->tensor.numel() == 1)
      v.absent_value = absent_value->tensor.ptr<double>()[0];
  }
  return out;
}

// The outputs carried as numbers over an `output_vocabulary` constant: every output of such an
// op (src/ops/feature_engineering.cc: a string as its code; src/ops/recommender.cc: a sequence
// of codes and a dictionary laid out over the vocabulary) that the function returns. Such a
// value means nothing to another op (a reader expecting a string takes a code into its own
// vocabulary), so it may only leave the function; an output neither read nor returned (a
// recommender's output the model does not name) is left alone.
std::map<std::string, std::vector<std::string>> output_vocabularies_of(const ir::Function& function,
                                                                       const std::string& where) {
  std::map<std::string, std::vector<std::string>> out;
  for (const ir::Operation& op : function.block.operations) {
    auto it = op.inputs.find("output_vocabulary");
    if (it == op.inputs.end() || it->second.size() != 1 || !it->second[0].value) continue;
    COREMLRT_CHECK(!op.outputs.empty(), where, ", ", op.describe(), ": has no output");
    for (const ir::NamedValue& output : op.outputs) {
      const std::string& name = output.name;
      for (const ir::Operation& reader : function.block.operations)
        for (const auto& [param, bindings] : reader.inputs)
          for (const ir::Binding& b : bindings)
            COREMLRT_CHECK(b.name != name, where, ": '", name, "' is an output of ", op.describe(),
                           " carried as numbers over its own vocabulary (a string output, or a recommender's "
                           "items or scores), read by ", reader.describe(),
                           "; this build passes strings from one model to another only as inputs");
      const auto& outputs = function.block.outputs;
      if (std::find(outputs.begin(), outputs.end(), name) != outputs.end()) out[name] = it->second[0].value->strings;
    }
  }
  return out;
}

}  // namespace

std::map<std::string, FeatureCodes> read_feature_codes(const ir::Program& program,
                                                       const ModelDescription& description) {
  std::map<std::string, FeatureCodes> out;
  for (const auto& [name, function] : program.functions) {
    const FunctionDescription* described = description.find_function(name);
    if (!described) continue;
    FeatureCodes& codes = out[name];
    const std::string where = "function '" + name + "'";
    try {
      codes.class_labels = class_labels_of(function, where);
      codes.input_vocabularies = input_vocabularies_of(function, *described, where);
      codes.output_vocabularies = output_vocabularies_of(function, where);
    } catch (const Error& e) {
      codes = FeatureCodes();
      codes.problem = e.what();
    }
  }
  return out;
}

}  // namespace coremlrt::format
