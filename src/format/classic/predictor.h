#pragma once
// Core ML's classic predictors (glmRegressor/Classifier, supportVectorRegressor/Classifier,
// treeEnsembleRegressor/Classifier, kNearestNeighborsClassifier) and feature-engineering
// models (scaler, imputer, normalizer, featureVectorizer, arrayFeatureExtractor,
// oneHotEncoder, identity; ops/feature_engineering.cc), and nonMaximumSuppression
// (nms_reader.cc, ops/detection.cc), translated into the typed program (src/ir/program.h)
// that ML programs use, so one planner and one executor run them.
//
// Each model type has a file of its own here (glm_reader.cc, svm_reader.cc,
// tree_ensemble_reader.cc, knn_reader.cc) that parses its message (proto/classic_*.proto) and
// emits one op of its own kind (src/ops/glm.cc, svm.cc, tree_ensemble.cc,
// nearest_neighbors.cc) whose parameters are constants of the op. These ops read every input
// feature in description order as one vector of doubles, as Core ML does (it evaluates these
// models in double precision), so a multi-array, several double or int64 features, or a mix
// all work. A classifier ends in the `classify` op, exactly as an ML-program classifier does
// (src/ops/classify.cc): the label and the {label: probability} dictionary come from it.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coremlrt/description.h"
#include "coremlrt/error.h"
#include "ir/program.h"

namespace coremlrt::format::classic {

using Const = std::shared_ptr<ir::ConstValue>;

using ir::tensor_type;
Const f64_tensor(std::vector<double> values, std::vector<int64_t> dims);
Const f32_tensor(std::vector<float> values, std::vector<int64_t> dims);
Const i32_tensor(std::vector<int32_t> values, std::vector<int64_t> dims);
Const i32_scalar(int32_t value);
Const string_scalar(const std::string& value);
Const i64_tensor(std::vector<int64_t> values, std::vector<int64_t> dims);
Const string_vector(std::vector<std::string> values);

// Class labels as classify's `classes` constant: strings or int64 values.
struct Labels {
  std::vector<std::string> strings;
  std::vector<int64_t> ints;
  bool integer = false;
  size_t size() const { return integer ? ints.size() : strings.size(); }
};

class PredictorProgram {
 public:
  // `model_type` names the model in errors ("treeEnsembleClassifier").
  PredictorProgram(const FunctionDescription& description, std::string model_type);

  // How many numbers the input features hold together; -1 when a flexible shape leaves it open.
  int64_t feature_count() const { return feature_count_; }
  const std::string& model_type() const { return model_type_; }

  // Adds the model's op: its variadic input `x` is every input feature, `constants` its
  // parameters. Returns the name of its (single) output, of type `output`.
  std::string add_model_op(const std::string& op_type, const std::vector<std::pair<std::string, Const>>& constants,
                           const ir::ValueType& output, const std::string& output_name = "");

  // The output type a regressor's op must produce for the description's prediction:
  // fp64 [] for a double feature, fp64 [dims] for a multi-array of `dims` numbers.
  ir::ValueType regressor_output_type(int64_t dims) const;
  const std::string& regressor_output_name() const;
  // Ends a regressor whose op was added with regressor_output_name() as its output name.
  void finish_regressor();

  // Ends a classifier: classify(`probabilities`, labels) gives the predicted label and the
  // probability dictionary the description names.
  void finish_classifier(const std::string& probabilities, const Labels& labels);

  // Feature-engineering models (scaler, imputer, ...): one op over chosen input features,
  // ending in the description's single output.
  // Adds an op whose variadic `x` is the named input features, in this order.
  std::string add_op_on(const std::string& op_type, const std::vector<std::string>& inputs,
                        const std::vector<std::pair<std::string, Const>>& constants, const ir::ValueType& output,
                        const std::string& output_name);
  const FeatureDescription& single_output() const;
  // The program type of the single output when it holds `count` numbers: fp64 [] for a double,
  // int64 [] for an int64, the array's dtype for a multi-array, and fp64 [count] for an
  // int64-keyed dictionary (carried densely, ops/feature_engineering.cc).
  ir::ValueType transformer_output_type(int64_t count) const;
  // The value name for the single output: the feature's own name, or a fresh one when an input
  // has that name (a pipeline stage may read and write the same feature name).
  std::string transformer_output_value();
  void finish_transformer(const std::string& value);
  // identity: adds an output that is the input feature `name`, passed through.
  void pass_through(const std::string& name);
  // The input feature of this name (fails naming the model when there is none).
  const FeatureDescription& input(const std::string& name) const;

  // An op whose inputs are named parameters, each bound to one input feature (`inputs`:
  // parameter -> feature name), with several outputs; the outputs become the function's
  // outputs in the order `returned` lists them (itemSimilarityRecommender).
  void add_named_op(const std::string& op_type, const std::vector<std::pair<std::string, std::string>>& inputs,
                    const std::vector<std::pair<std::string, Const>>& constants,
                    const std::vector<ir::NamedValue>& outputs, const std::vector<std::string>& returned);
  // A name no feature of the description has, for an op output that leaves no feature.
  std::string unused_name(const std::string& stem) { return fresh(stem); }

  ir::Program take();

 private:
  std::string fresh(const std::string& stem);
  const FunctionDescription& description_;
  std::string model_type_;
  ir::Function function_;
  std::vector<ir::Binding> features_;
  int64_t feature_count_ = 0;
  int fresh_ = 0;
};

// The class labels of a classifier message (fields 100 / 101), for `what` in errors.
template <class Message>
Labels read_labels(const Message& message, const std::string& what) {
  Labels out;
  if (message.has_int64classlabels()) {
    out.integer = true;
    out.ints.assign(message.int64classlabels().vector().begin(), message.int64classlabels().vector().end());
  } else if (message.has_stringclasslabels()) {
    out.strings.assign(message.stringclasslabels().vector().begin(), message.stringclasslabels().vector().end());
  }
  if (out.size() == 0) fail(what, " has no class labels");
  return out;
}

// One translator per model type; `serialized` is the model type's message.
ir::Program read_glm_regressor(const std::string& serialized, const FunctionDescription& description);
ir::Program read_glm_classifier(const std::string& serialized, const FunctionDescription& description);
ir::Program read_svm_regressor(const std::string& serialized, const FunctionDescription& description);
ir::Program read_svm_classifier(const std::string& serialized, const FunctionDescription& description);
ir::Program read_tree_ensemble_regressor(const std::string& serialized, const FunctionDescription& description);
ir::Program read_tree_ensemble_classifier(const std::string& serialized, const FunctionDescription& description);
ir::Program read_knn_classifier(const std::string& serialized, const FunctionDescription& description);
ir::Program read_scaler(const std::string& serialized, const FunctionDescription& description);
ir::Program read_imputer(const std::string& serialized, const FunctionDescription& description);
ir::Program read_normalizer(const std::string& serialized, const FunctionDescription& description);
ir::Program read_feature_vectorizer(const std::string& serialized, const FunctionDescription& description);
ir::Program read_array_feature_extractor(const std::string& serialized, const FunctionDescription& description);
ir::Program read_one_hot_encoder(const std::string& serialized, const FunctionDescription& description);
ir::Program read_identity(const FunctionDescription& description);
ir::Program read_dict_vectorizer(const std::string& serialized, const FunctionDescription& description);
ir::Program read_categorical_mapping(const std::string& serialized, const FunctionDescription& description);
ir::Program read_non_maximum_suppression(const std::string& serialized, const FunctionDescription& description);
ir::Program read_class_confidence_thresholding(const std::string& serialized, const FunctionDescription& description);
ir::Program read_item_similarity_recommender(const std::string& serialized, const FunctionDescription& description);
// An input whose role in a classic model gives it a value when a caller leaves it out: Core ML
// then reads the model's own field, whether or not the description marks the input optional
// (detector exporters declare the threshold inputs required; Vision passes only the image).
struct RoleDefault {
  std::string name;
  FeatureKind kind;  // the feature kind the role takes (Double, Int64 or Sequence)
  // The value an absent input stands for; none for an absent sequence (kAbsentSequenceCode).
  std::optional<double> value;
};
// The threshold inputs a nonMaximumSuppression message names, each with the message's own
// threshold.
std::vector<RoleDefault> non_maximum_suppression_defaults(const std::string& serialized);
// The number-of-recommendations input an itemSimilarityRecommender message names (left out: every
// candidate, docs/design/recommender.md; 2^53 is more items than any model holds) and its
// restriction and exclusion lists (left out: no list). Nothing for a message that does not
// parse: the reader above reports it.
std::vector<RoleDefault> item_similarity_defaults(const std::string& serialized);

}  // namespace coremlrt::format::classic
