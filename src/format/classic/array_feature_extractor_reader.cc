// arrayFeatureExtractor (Model field 609): picks the elements at `extractIndex` from its input
// array (flattened), computed by the `array_feature_extractor` op
// (src/ops/feature_engineering.cc). One index may feed a double or int64 feature; an int64
// output takes only whole values.
#include "classic_feature.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

ir::Program read_array_feature_extractor(const std::string& serialized, const FunctionDescription& description) {
  CoreML::Specification::ArrayFeatureExtractor extractor;
  COREMLRT_CHECK(extractor.ParseFromString(serialized), "arrayFeatureExtractor: the message does not parse");
  PredictorProgram program(description, "arrayFeatureExtractor");
  COREMLRT_CHECK(description.inputs.size() == 1, "arrayFeatureExtractor: takes one input; the description declares ",
                 description.inputs.size());
  COREMLRT_CHECK(extractor.extractindex_size() > 0, "arrayFeatureExtractor: no index to extract");
  std::vector<int64_t> indices;
  for (uint64_t index : extractor.extractindex()) {
    COREMLRT_CHECK(program.feature_count() < 0 || index < static_cast<uint64_t>(program.feature_count()),
                   "arrayFeatureExtractor: index ", index, " is outside the input's ", program.feature_count(),
                   " elements");
    COREMLRT_CHECK(index < (uint64_t{1} << 62), "arrayFeatureExtractor: index ", index, " is out of range");
    indices.push_back(static_cast<int64_t>(index));
  }
  const auto count = static_cast<int64_t>(indices.size());
  auto constant = std::make_shared<ir::ConstValue>();
  constant->type = tensor_type(DType::Int64, {count});
  constant->tensor = Tensor::empty(DType::Int64, {count});
  std::copy(indices.begin(), indices.end(), constant->tensor.ptr<int64_t>());
  std::string value = program.transformer_output_value();
  program.add_model_op("array_feature_extractor", {{"indices", constant}}, program.transformer_output_type(count), value);
  program.finish_transformer(value);
  return program.take();
}

}  // namespace coremlrt::format::classic
