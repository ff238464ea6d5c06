// glmRegressor (Model field 300) and glmClassifier (400): weights [outputs, features] and
// offsets, then a link transform. Computed by the `glm` op (src/ops/glm.cc) in double.
#include "classic_glm.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

namespace spec = CoreML::Specification;

namespace {

// The weight rows as one [rows, width] matrix; every row must be as wide as the input.
template <class Message>
Const weight_matrix(const Message& glm, const PredictorProgram& program, int64_t& rows) {
  rows = glm.weights_size();
  COREMLRT_CHECK(rows > 0, program.model_type(), " has no weights");
  const int64_t width = glm.weights(0).value_size();
  std::vector<double> values;
  for (const auto& row : glm.weights()) {
    COREMLRT_CHECK(row.value_size() == width, program.model_type(), ": weight rows differ in length (", width, " and ",
                   row.value_size(), ")");
    values.insert(values.end(), row.value().begin(), row.value().end());
  }
  COREMLRT_CHECK(program.feature_count() < 0 || program.feature_count() == width, program.model_type(), ": weights have ",
                 width, " columns but the inputs hold ", program.feature_count(), " values");
  COREMLRT_CHECK(glm.offset_size() == rows, program.model_type(), " has ", glm.offset_size(), " offsets for ", rows,
                 " weight rows");
  return f64_tensor(std::move(values), {rows, width});
}

}  // namespace

ir::Program read_glm_regressor(const std::string& serialized, const FunctionDescription& description) {
  spec::GLMRegressor glm;
  COREMLRT_CHECK(glm.ParseFromString(serialized), "glmRegressor: the message does not parse");
  PredictorProgram program(description, "glmRegressor");
  int64_t rows = 0;
  Const weights = weight_matrix(glm, program, rows);
  const char* transform = "none";
  switch (glm.postevaluationtransform()) {
    case spec::GLMRegressor::NoTransform: break;
    case spec::GLMRegressor::Logit: transform = "logit"; break;
    case spec::GLMRegressor::Probit: transform = "probit"; break;
    default: fail("glmRegressor: unknown postEvaluationTransform ", static_cast<int>(glm.postevaluationtransform()));
  }
  program.add_model_op("glm",
                       {{"weights", weights},
                        {"offsets", f64_tensor({glm.offset().begin(), glm.offset().end()}, {rows})},
                        {"transform", string_scalar(transform)},
                        {"encoding", string_scalar("regression")}},
                       program.regressor_output_type(rows), program.regressor_output_name());
  program.finish_regressor();
  return program.take();
}

ir::Program read_glm_classifier(const std::string& serialized, const FunctionDescription& description) {
  spec::GLMClassifier glm;
  COREMLRT_CHECK(glm.ParseFromString(serialized), "glmClassifier: the message does not parse");
  PredictorProgram program(description, "glmClassifier");
  Labels labels = read_labels(glm, "glmClassifier");
  int64_t rows = 0;
  Const weights = weight_matrix(glm, program, rows);
  const auto classes = static_cast<int64_t>(labels.size());
  const char* transform = glm.postevaluationtransform() == spec::GLMClassifier::Probit ? "probit" : "logit";
  COREMLRT_CHECK(glm.postevaluationtransform() == spec::GLMClassifier::Logit ||
                     glm.postevaluationtransform() == spec::GLMClassifier::Probit,
                 "glmClassifier: unknown postEvaluationTransform ", static_cast<int>(glm.postevaluationtransform()));
  const char* encoding = nullptr;
  switch (glm.classencoding()) {
    case spec::GLMClassifier::ReferenceClass:
      // One row scores the second class against the first.
      COREMLRT_CHECK(rows == 1 && classes == 2, "glmClassifier: the reference-class encoding takes one weight row "
                     "and two classes; the model has ", rows, " rows and ", classes, " classes");
      encoding = "reference_class";
      break;
    case spec::GLMClassifier::OneVsRest:
      // One row per class, or a single row for two classes (scoring the second).
      COREMLRT_CHECK(rows == classes || (rows == 1 && classes == 2), "glmClassifier: one-vs-rest encoding has ", rows,
                     " weight rows for ", classes, " classes");
      encoding = "one_vs_rest";
      break;
    default: fail("glmClassifier: unknown classEncoding ", static_cast<int>(glm.classencoding()));
  }
  std::string probabilities =
      program.add_model_op("glm",
                           {{"weights", weights},
                            {"offsets", f64_tensor({glm.offset().begin(), glm.offset().end()}, {rows})},
                            {"transform", string_scalar(transform)},
                            {"encoding", string_scalar(encoding)}},
                           tensor_type(DType::Float64, {classes}));  // classify picks in double
  program.finish_classifier(probabilities, labels);
  return program.take();
}

}  // namespace coremlrt::format::classic
