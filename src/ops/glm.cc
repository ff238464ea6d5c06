// glm: Core ML's generalized linear models (glmRegressor, glmClassifier;
// src/format/classic/glm_reader.cc), in double precision as Core ML evaluates them.
//   z = weights · x + offsets, then the link's inverse: none, logit (the logistic function)
//   or probit (the normal CDF).
// `encoding` says what the output is:
//   regression       fp64, z transformed (a scalar or one value per weight row);
//   reference_class  fp64 (or fp32) [2]: one row scores the second class, p, against the first, 1 - p;
//   one_vs_rest      fp64 (or fp32) [classes]: each class's own score, normalised to sum to 1 (as
//                    scikit-learn's one-vs-rest LogisticRegression does); one row for two
//                    classes is read as in reference_class.
#include <cmath>

#include "ops/feature_vector.h"
#include "ops/register.h"

namespace coremlrt::ops {

namespace {

std::unique_ptr<Kernel> make_glm(KernelBuilder& b) {
  const Tensor weights = constant_tensor(b, "weights", DType::Float64, 2);
  const Tensor offsets = constant_tensor(b, "offsets", DType::Float64, 1);
  const int64_t rows = weights.shape[0], width = weights.shape[1];
  b.check(offsets.shape[0] == rows, "has ", offsets.shape[0], " offsets for ", rows, " weight rows");
  const std::string transform = b.const_string("transform");
  b.check(transform == "none" || transform == "logit" || transform == "probit", "unknown transform '", transform, "'");
  const std::string encoding = b.const_string("encoding");
  const Shape shape = declared_output_shape(b, 0);
  const int64_t outputs = shape_numel(shape);
  if (encoding == "regression") {
    b.check(outputs == rows && b.output_type(0).dtype == DType::Float64, "a regression outputs fp64 with one value "
            "per weight row (", rows, "), declared ", b.output_type(0).str());
  } else if (encoding == "reference_class" || encoding == "one_vs_rest") {
    b.check((b.output_type(0).dtype == DType::Float64 || b.output_type(0).dtype == DType::Float32) && shape.size() == 1,
            "class probabilities are an fp64 or fp32 vector, declared ", b.output_type(0).str());
    b.check(outputs == rows || (rows == 1 && outputs == 2), rows, " weight rows cannot score ", outputs, " classes");
    b.check(encoding == "one_vs_rest" || rows == 1, "the reference-class encoding takes one weight row");
  } else {
    b.fail("unknown encoding '", encoding, "'");
  }
  FeatureVector features(b, width);
  const DType probability_dtype = b.output_type(0).dtype;
  const bool logit = transform == "logit", probit = transform == "probit", regression = encoding == "regression";
  return make_kernel([=](KernelContext& ctx) {
    const double* w = weights.ptr<double>();
    const double* offset = offsets.ptr<double>();
    const std::vector<double> x = features.read(ctx);
    std::vector<double> score(rows);
    for (int64_t r = 0; r < rows; ++r) {
      double z = offset[r];
      for (int64_t i = 0; i < width; ++i) z += w[r * width + i] * x[i];
      if (logit) z = 1.0 / (1.0 + std::exp(-z));
      else if (probit) z = 0.5 * std::erfc(-z / std::sqrt(2.0));
      score[r] = z;
    }
    if (regression) {
      double* out = ctx.allocate_output(0, DType::Float64, shape).ptr<double>();
      for (int64_t r = 0; r < rows; ++r) out[r] = score[r];
      return;
    }
    std::vector<double> probabilities(static_cast<size_t>(outputs));
    if (rows == 1 && outputs == 2) {
      probabilities = {1.0 - score[0], score[0]};
    } else {
      double sum = 0;
      for (double s : score) sum += s;
      for (int64_t r = 0; r < rows; ++r) probabilities[r] = sum > 0 ? score[r] / sum : score[r];
    }
    Tensor& out = ctx.allocate_output(0, probability_dtype, shape);
    for (int64_t r = 0; r < outputs; ++r) {
      if (probability_dtype == DType::Float64) out.ptr<double>()[r] = probabilities[r];
      else out.ptr<float>()[r] = static_cast<float>(probabilities[r]);
    }
  });
}

}  // namespace

void register_glm_kernels(KernelRegistry& registry) {
  registry.add("glm", DTypeSet{DType::Float16, DType::Float32, DType::Float64, DType::Int32, DType::Int64}, make_glm);
}

}  // namespace coremlrt::ops
