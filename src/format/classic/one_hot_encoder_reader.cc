// oneHotEncoder (Model field 600): one int64 (or whole double) value becomes 1 at its category's
// place among `int64Categories`, 0 elsewhere, computed by the `one_hot_encoder` op
// (src/ops/feature_engineering.cc). An unknown value fails the prediction, or gives all zeros
// under IgnoreUnknown. The sparse output (an int64-keyed dictionary) is carried densely and
// may only feed another stage of a pipeline. String categories are refused: this build takes
// no string features.
#include "classic_feature.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

namespace spec = CoreML::Specification;

ir::Program read_one_hot_encoder(const std::string& serialized, const FunctionDescription& description) {
  spec::OneHotEncoder encoder;
  COREMLRT_CHECK(encoder.ParseFromString(serialized), "oneHotEncoder: the message does not parse");
  COREMLRT_CHECK(encoder.CategoryType_case() != spec::OneHotEncoder::kStringCategories,
                 "oneHotEncoder: string categories are not supported by this build (string features are not)");
  COREMLRT_CHECK(encoder.CategoryType_case() == spec::OneHotEncoder::kInt64Categories,
                 "oneHotEncoder: the model gives no categories");
  PredictorProgram program(description, "oneHotEncoder");
  COREMLRT_CHECK(description.inputs.size() == 1 && program.feature_count() == 1,
                 "oneHotEncoder: takes one value as its input");
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
  Const ignore = i32_scalar(encoder.handleunknown() == spec::OneHotEncoder::IgnoreUnknown ? 1 : 0);
  std::string value = program.transformer_output_value();
  program.add_model_op("one_hot_encoder", {{"categories", constant}, {"ignore_unknown", ignore}},
                       program.transformer_output_type(count), value);
  program.finish_transformer(value);
  return program.take();
}

}  // namespace coremlrt::format::classic
