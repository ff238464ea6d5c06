// featureVectorizer (Model field 602): concatenates the listed input features, each filling
// `inputDimensions` places, into one array, computed by the `feature_vectorizer` op
// (src/ops/feature_engineering.cc). An int64-keyed dictionary input (a one-hot encoder's sparse
// output inside a pipeline) puts the value of key k at place k of its columns.
#include "classic_feature.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

ir::Program read_feature_vectorizer(const std::string& serialized, const FunctionDescription& description) {
  CoreML::Specification::FeatureVectorizer vectorizer;
  COREMLRT_CHECK(vectorizer.ParseFromString(serialized), "featureVectorizer: the message does not parse");
  PredictorProgram program(description, "featureVectorizer");
  COREMLRT_CHECK(vectorizer.inputlist_size() > 0, "featureVectorizer: the input list is empty");
  std::vector<std::string> inputs;
  std::vector<int32_t> dims, sparse;
  int64_t total = 0;
  for (const auto& column : vectorizer.inputlist()) {
    const FeatureDescription& feature = program.input(column.inputcolumn());
    COREMLRT_CHECK(column.inputdimensions() > 0 && column.inputdimensions() < (1u << 30), "featureVectorizer: column '",
                   column.inputcolumn(), "' has ", column.inputdimensions(), " dimensions");
    const auto width = static_cast<int64_t>(column.inputdimensions());
    if (feature.kind == FeatureKind::Double || feature.kind == FeatureKind::Int64)
      COREMLRT_CHECK(width == 1, "featureVectorizer: column '", feature.name, "' is a number but fills ", width,
                     " places");
    if (feature.kind == FeatureKind::MultiArray && !feature.shape.empty() && feature.shape_range.empty() &&
        feature.enumerated_shapes.empty()) {
      int64_t declared = 1;
      for (int64_t d : feature.shape) declared *= d;
      COREMLRT_CHECK(declared == width, "featureVectorizer: column '", feature.name, "' is declared with ", declared,
                     " elements but fills ", width, " places");
    }
    inputs.push_back(feature.name);
    dims.push_back(static_cast<int32_t>(width));
    sparse.push_back(feature.kind == FeatureKind::Dictionary ? 1 : 0);
    total += width;
  }
  const auto columns = static_cast<int64_t>(dims.size());
  std::string value = program.transformer_output_value();
  program.add_op_on("feature_vectorizer", inputs,
                    {{"dims", i32_tensor(std::move(dims), {columns})}, {"sparse", i32_tensor(std::move(sparse), {columns})}},
                    program.transformer_output_type(total), value);
  program.finish_transformer(value);
  return program.take();
}

}  // namespace coremlrt::format::classic
