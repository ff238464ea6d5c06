// oneHotEncoder (Model field 600): one int64 (or whole double) value becomes 1 at its category's
// place among `int64Categories`, 0 elsewhere, computed by the `one_hot_encoder` op
// (src/ops/feature_engineering.cc). An unknown value fails the prediction, or gives all zeros
// under IgnoreUnknown. The sparse output (an int64-keyed dictionary) is carried densely and
// may only feed another stage of a pipeline. Over string categories the input is a string
// feature, carried as its code in the categories (the `string_one_hot_encoder` op's vocabulary).
#include "classic_feature.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

namespace spec = CoreML::Specification;

ir::Program read_one_hot_encoder(const std::string& serialized, const FunctionDescription& description) {
  spec::OneHotEncoder encoder;
  COREMLRT_CHECK(encoder.ParseFromString(serialized), "oneHotEncoder: the message does not parse");
  const bool strings = encoder.CategoryType_case() == spec::OneHotEncoder::kStringCategories;
  COREMLRT_CHECK(strings || encoder.CategoryType_case() == spec::OneHotEncoder::kInt64Categories,
                 "oneHotEncoder: the model gives no categories");
  PredictorProgram program(description, "oneHotEncoder");
  COREMLRT_CHECK(description.inputs.size() == 1 && program.feature_count() == 1,
                 "oneHotEncoder: takes one value as its input");
  const FeatureKind input_kind = description.inputs.front().kind;
  COREMLRT_CHECK(strings == (input_kind == FeatureKind::String), "oneHotEncoder: its categories are ",
                 strings ? "strings" : "int64", " but input '", description.inputs.front().name, "' is a ",
                 feature_kind_name(input_kind), " feature");
  Const ignore = i32_scalar(encoder.handleunknown() == spec::OneHotEncoder::IgnoreUnknown ? 1 : 0);
  if (strings) {
    const auto& categories = encoder.stringcategories().vector();
    const auto count = static_cast<int64_t>(categories.size());
    COREMLRT_CHECK(count > 0, "oneHotEncoder: the category list is empty");
    const std::vector<std::string> vocabulary(categories.begin(), categories.end());
    for (size_t i = 0; i < vocabulary.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        COREMLRT_CHECK(vocabulary[i] != vocabulary[j], "oneHotEncoder: category '", vocabulary[i], "' is listed twice");
    const FeatureDescription& output = program.single_output();
    COREMLRT_CHECK(!encoder.outputsparse() && output.kind == FeatureKind::MultiArray, "oneHotEncoder: output '",
                   output.name, "' is ", encoder.outputsparse() ? "sparse (a dictionary)" : "not a multi-array",
                   "; over string categories this build computes a dense multi-array output");
    std::string value = program.transformer_output_value();
    program.add_model_op("string_one_hot_encoder", {{"vocabulary", string_vector(vocabulary)}, {"ignore_unknown", ignore}},
                         program.transformer_output_type(count), value);
    program.finish_transformer(value);
    return program.take();
  }
  const auto& categories = encoder.int64categories().vector();
  const auto count = static_cast<int64_t>(categories.size());
  COREMLRT_CHECK(count > 0, "oneHotEncoder: the category list is empty");
  auto constant = std::make_shared<ir::ConstValue>();
  constant->type = tensor_type(DType::Int64, {count});
  constant->tensor = Tensor::empty(DType::Int64, {count});
  std::copy(categories.begin(), categories.end(), constant->tensor.ptr<int64_t>());
  const FeatureDescription& output = program.single_output();
  COREMLRT_CHECK(encoder.outputsparse() == (output.kind == FeatureKind::Dictionary), "oneHotEncoder: outputSparse is ",
                 encoder.outputsparse() ? "set" : "unset", " but output '", output.name, "' is a ",
                 feature_kind_name(output.kind), " feature");
  std::string value = program.transformer_output_value();
  program.add_model_op("one_hot_encoder", {{"categories", constant}, {"ignore_unknown", ignore}},
                       program.transformer_output_type(count), value);
  program.finish_transformer(value);
  return program.take();
}

}  // namespace coremlrt::format::classic
