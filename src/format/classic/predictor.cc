#include "format/classic/predictor.h"

#include <cstring>

#include "coremlrt/error.h"

namespace coremlrt::format::classic {

namespace {

template <class T>
Const constant_tensor(DType dtype, const std::vector<T>& values, std::vector<int64_t> dims) {
  return ir::make_constant(dtype, values, std::move(dims));
}

Const classes_constant(const Labels& labels) {
  const auto n = static_cast<int64_t>(labels.size());
  if (labels.integer) return constant_tensor(DType::Int64, labels.ints, {n});
  auto out = std::make_shared<ir::ConstValue>();
  out->type = tensor_type(DType::String, {n});
  out->tensor = Tensor::empty(DType::String, {n});
  out->strings = labels.strings;
  return out;
}

// The program type of one input feature; every kind the ops read as numbers.
ir::ValueType input_type(const FeatureDescription& feature, const std::string& model_type) {
  switch (feature.kind) {
    case FeatureKind::Double: return tensor_type(DType::Float64, {});
    case FeatureKind::Int64: return tensor_type(DType::Int64, {});
    case FeatureKind::MultiArray: {
      COREMLRT_CHECK(feature.dtype == DType::Float32 || feature.dtype == DType::Float64 || feature.dtype == DType::Int32,
                     model_type, ": input '", feature.name, "' is a ", dtype_name(feature.dtype),
                     " multi-array; expected double, float32 or int32");
      std::vector<int64_t> dims(feature.shape.begin(), feature.shape.end());
      for (size_t i = 0; i < dims.size(); ++i) {
        if (i < feature.shape_range.size() && feature.shape_range[i].first != feature.shape_range[i].second) dims[i] = -1;
        for (const Shape& shape : feature.enumerated_shapes)
          if (shape.size() != dims.size() || shape[i] != feature.shape[i]) dims[i] = -1;
      }
      if (dims.empty()) dims.push_back(-1);  // no declared shape: any length
      return tensor_type(feature.dtype, std::move(dims));
    }
    case FeatureKind::Dictionary:
      // Carried densely: a one-hot encoder's sparse output inside a pipeline, or a
      // dictVectorizer's input laid out over its keys (ops/feature_engineering.cc).
      // format/spec_reader.cc lets no other model take a dictionary input.
      return tensor_type(DType::Float64, {-1});
    case FeatureKind::Sequence:
      // Carried as int64 codes [m] into the vocabulary of the op that reads it
      // (ops/recommender.cc); format/spec_reader.cc lets only itemSimilarityRecommender take one.
      return tensor_type(DType::Int64, {-1});
    case FeatureKind::String:
      // Carried as its int64 code in the vocabulary of the op that reads it
      // (ops/feature_engineering.cc); format/spec_reader.cc lets only the models with such an
      // op (categoricalMapping, oneHotEncoder over strings) take a string input.
      return tensor_type(DType::Int64, {});
    default:
      fail(model_type, ": input '", feature.name, "' is a ", feature_kind_name(feature.kind),
           " feature; this model type takes multi-array, double or int64 inputs");
  }
}

}  // namespace

Const f64_tensor(std::vector<double> values, std::vector<int64_t> dims) {
  return constant_tensor(DType::Float64, values, std::move(dims));
}
Const f32_tensor(std::vector<float> values, std::vector<int64_t> dims) {
  return constant_tensor(DType::Float32, values, std::move(dims));
}
Const i32_tensor(std::vector<int32_t> values, std::vector<int64_t> dims) {
  return constant_tensor(DType::Int32, values, std::move(dims));
}
Const i32_scalar(int32_t value) { return i32_tensor({value}, {}); }
Const string_scalar(const std::string& value) {
  auto out = std::make_shared<ir::ConstValue>();
  out->type = tensor_type(DType::String, {});
  out->tensor = Tensor::empty(DType::String, {});
  out->strings = {value};
  return out;
}

Const i64_tensor(std::vector<int64_t> values, std::vector<int64_t> dims) {
  return constant_tensor(DType::Int64, values, std::move(dims));
}
Const string_vector(std::vector<std::string> values) {
  const auto n = static_cast<int64_t>(values.size());
  auto out = std::make_shared<ir::ConstValue>();
  out->type = tensor_type(DType::String, {n});
  out->tensor = Tensor::empty(DType::String, {n});
  out->strings = std::move(values);
  return out;
}

PredictorProgram::PredictorProgram(const FunctionDescription& description, std::string model_type)
    : description_(description), model_type_(std::move(model_type)) {
  function_.name = "main";
  function_.opset = "CoreML5";  // the ops of these models mean the same in every opset
  function_.ios_version = ir::ios_version_of_opset(function_.opset);
  COREMLRT_CHECK(!description.inputs.empty(), model_type_, ": the model description declares no inputs");
  for (const FeatureDescription& feature : description.inputs) {
    ir::ValueType type = input_type(feature, model_type_);
    int64_t count = 1;
    for (int64_t d : type.dims) count = (d < 0 || count < 0) ? -1 : count * d;
    feature_count_ = (count < 0 || feature_count_ < 0) ? -1 : feature_count_ + count;
    function_.inputs.push_back({feature.name, type});
    features_.push_back({feature.name, nullptr});
  }
}

std::string PredictorProgram::fresh(const std::string& stem) {
  for (;;) {
    std::string name = stem + "_" + std::to_string(fresh_++);
    bool taken = false;
    for (const auto& f : description_.inputs) taken = taken || f.name == name;
    for (const auto& f : description_.outputs) taken = taken || f.name == name;
    if (!taken) return name;
  }
}

std::string PredictorProgram::add_model_op(const std::string& op_type,
                                           const std::vector<std::pair<std::string, Const>>& constants,
                                           const ir::ValueType& output, const std::string& output_name) {
  ir::Operation op;
  op.type = op_type;
  op.name = op_type;
  op.inputs["x"] = features_;
  for (const auto& [param, value] : constants) op.inputs[param] = {ir::Binding{"", value}};
  std::string name = output_name.empty() ? fresh(op_type) : output_name;
  op.outputs.push_back({name, output});
  function_.block.operations.push_back(std::move(op));
  return name;
}

const std::string& PredictorProgram::regressor_output_name() const {
  for (const auto& f : description_.outputs)
    if (f.name == description_.predicted_feature_name) return f.name;
  COREMLRT_CHECK(!description_.outputs.empty(), model_type_, ": the model description declares no outputs");
  return description_.outputs.front().name;
}

ir::ValueType PredictorProgram::regressor_output_type(int64_t dims) const {
  const std::string& name = regressor_output_name();
  for (const auto& f : description_.outputs) {
    if (f.name != name) continue;
    if (f.kind == FeatureKind::Double) {
      COREMLRT_CHECK(dims == 1, model_type_, ": output '", name, "' is a double but the model predicts ", dims,
                     " values");
      return tensor_type(DType::Float64, {});
    }
    COREMLRT_CHECK(f.kind == FeatureKind::MultiArray, model_type_, ": output '", name, "' is a ",
                   feature_kind_name(f.kind), " feature; a regressor predicts a double or a multi-array");
    return tensor_type(DType::Float64, {dims});
  }
  fail(model_type_, ": no output '", name, "'");
}

void PredictorProgram::finish_regressor() {
  COREMLRT_CHECK(description_.outputs.size() == 1, model_type_, ": a regressor has one output; the description has ",
                 description_.outputs.size());
  function_.block.outputs.push_back(regressor_output_name());
}

void PredictorProgram::finish_classifier(const std::string& probabilities, const Labels& labels) {
  std::string label_name = description_.predicted_feature_name;
  std::string probabilities_name = description_.predicted_probabilities_name;
  for (const auto& f : description_.outputs) {
    if (label_name.empty() && (f.kind == FeatureKind::Int64 || f.kind == FeatureKind::String)) label_name = f.name;
    if (probabilities_name.empty() && f.kind == FeatureKind::Dictionary) probabilities_name = f.name;
  }
  COREMLRT_CHECK(!label_name.empty(), model_type_, ": the description names no predicted label output");
  bool label_declared = false, probabilities_declared = false;
  for (const auto& f : description_.outputs) {
    if (f.name == label_name) {
      label_declared = true;
      COREMLRT_CHECK(f.kind == (labels.integer ? FeatureKind::Int64 : FeatureKind::String), model_type_, ": output '",
                     f.name, "' is a ", feature_kind_name(f.kind), " feature but the class labels are ",
                     labels.integer ? "int64" : "strings");
    } else if (f.name == probabilities_name) {
      probabilities_declared = true;
      COREMLRT_CHECK(f.kind == FeatureKind::Dictionary, model_type_, ": output '", f.name, "' is a ",
                     feature_kind_name(f.kind), " feature; class probabilities are a dictionary");
    } else {
      fail(model_type_, ": output '", f.name, "' is neither the predicted label nor the class probabilities");
    }
  }
  COREMLRT_CHECK(label_declared, model_type_, ": the description has no output '", label_name, "'");
  if (!probabilities_declared) probabilities_name = fresh("classProbability");
  ir::Operation op;
  op.type = "classify";
  op.name = "classify";
  op.inputs["probabilities"] = {ir::Binding{probabilities, nullptr}};
  op.inputs["classes"] = {ir::Binding{"", classes_constant(labels)}};
  op.outputs.push_back({label_name, tensor_type(labels.integer ? DType::Int64 : DType::String, {})});
  ir::ValueType dictionary;
  dictionary.kind = ir::TypeKind::Dictionary;
  op.outputs.push_back({probabilities_name, dictionary});
  function_.block.operations.push_back(std::move(op));
  for (const auto& f : description_.outputs) function_.block.outputs.push_back(f.name);
}

std::string PredictorProgram::add_op_on(const std::string& op_type, const std::vector<std::string>& inputs,
                                        const std::vector<std::pair<std::string, Const>>& constants,
                                        const ir::ValueType& output, const std::string& output_name) {
  ir::Operation op;
  op.type = op_type;
  op.name = op_type;
  for (const std::string& name : inputs) op.inputs["x"].push_back({name, nullptr});
  for (const auto& [param, value] : constants) op.inputs[param] = {ir::Binding{"", value}};
  op.outputs.push_back({output_name, output});
  function_.block.operations.push_back(std::move(op));
  return output_name;
}

const FeatureDescription& PredictorProgram::single_output() const {
  COREMLRT_CHECK(description_.outputs.size() == 1, model_type_, " has one output; the description declares ",
                 description_.outputs.size());
  return description_.outputs.front();
}

const FeatureDescription& PredictorProgram::input(const std::string& name) const {
  for (const auto& f : description_.inputs)
    if (f.name == name) return f;
  fail(model_type_, ": the description has no input '", name, "'");
}

ir::ValueType PredictorProgram::transformer_output_type(int64_t count) const {
  const FeatureDescription& f = single_output();
  switch (f.kind) {
    case FeatureKind::Double:
    case FeatureKind::Int64:
      COREMLRT_CHECK(count == 1, model_type_, ": output '", f.name, "' is a ", feature_kind_name(f.kind),
                     " feature but the model computes ", count, " values");
      return tensor_type(f.kind == FeatureKind::Double ? DType::Float64 : DType::Int64, {});
    case FeatureKind::MultiArray: {
      COREMLRT_CHECK(f.dtype == DType::Float64 || f.dtype == DType::Float32 || f.dtype == DType::Int32, model_type_,
                     ": output '", f.name, "' is a ", dtype_name(f.dtype), " multi-array; expected double, float32 or "
                     "int32");
      int64_t declared = 1;
      for (int64_t d : f.shape) declared *= d;
      if (!f.shape.empty() && f.shape_range.empty() && f.enumerated_shapes.empty()) {
        COREMLRT_CHECK(declared == count, model_type_, ": output '", f.name, "' is declared with ", declared,
                       " elements but the model computes ", count);
        return tensor_type(f.dtype, std::vector<int64_t>(f.shape.begin(), f.shape.end()));
      }
      return tensor_type(f.dtype, {count});
    }
    case FeatureKind::Dictionary: return tensor_type(DType::Float64, {count});
    default:
      fail(model_type_, ": output '", f.name, "' is a ", feature_kind_name(f.kind),
           " feature; this build computes multi-array, double and int64 features here");
  }
}

std::string PredictorProgram::transformer_output_value() {
  const std::string& name = single_output().name;
  for (const auto& f : description_.inputs)
    if (f.name == name) return fresh(name);
  return name;
}

void PredictorProgram::finish_transformer(const std::string& value) {
  function_.block.outputs.push_back(value);
}

void PredictorProgram::pass_through(const std::string& name) {
  for (const ir::NamedValue& input : function_.inputs) {
    if (input.name != name) continue;
    function_.block.outputs.push_back(name);  // a function's output may be one of its inputs
    return;
  }
  fail(model_type_, ": output '", name, "' is not one of the inputs");
}

void PredictorProgram::add_named_op(const std::string& op_type,
                                    const std::vector<std::pair<std::string, std::string>>& inputs,
                                    const std::vector<std::pair<std::string, Const>>& constants,
                                    const std::vector<ir::NamedValue>& outputs,
                                    const std::vector<std::string>& returned) {
  ir::Operation op;
  op.type = op_type;
  op.name = op_type;
  for (const auto& [param, feature] : inputs) op.inputs[param] = {ir::Binding{feature, nullptr}};
  for (const auto& [param, value] : constants) op.inputs[param] = {ir::Binding{"", value}};
  op.outputs = outputs;
  function_.block.operations.push_back(std::move(op));
  for (const std::string& name : returned) function_.block.outputs.push_back(name);
}

ir::Program PredictorProgram::take() {
  ir::Program out;
  out.functions.emplace(function_.name, std::move(function_));
  return out;
}

}  // namespace coremlrt::format::classic
