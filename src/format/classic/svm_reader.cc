// supportVectorRegressor (Model field 301) and supportVectorClassifier (401), LibSVM's model
// in Core ML's message: the kernel, support vectors (dense, or sparse with 1-based indices,
// made dense here), the dual coefficients, rho, and for classifiers LibSVM's pairwise
// probability model (probA, probB). Computed by the `svm` op (src/ops/svm.cc).
#include <algorithm>

#include "classic_svm.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

namespace spec = CoreML::Specification;

namespace {

using Constants = std::vector<std::pair<std::string, Const>>;

void add_kernel(const spec::Kernel& kernel, const std::string& what, Constants& out) {
  const char* kind = nullptr;
  double gamma = 0, c = 0;
  int32_t degree = 0;
  switch (kernel.kernel_case()) {
    case spec::Kernel::kLinearKernel: kind = "linear"; break;
    case spec::Kernel::kRbfKernel: kind = "rbf"; gamma = kernel.rbfkernel().gamma(); break;
    case spec::Kernel::kPolyKernel:
      kind = "poly";
      gamma = kernel.polykernel().gamma();
      c = kernel.polykernel().c();
      degree = kernel.polykernel().degree();
      COREMLRT_CHECK(degree >= 0, what, ": polynomial kernel of negative degree ", degree);
      break;
    case spec::Kernel::kSigmoidKernel:
      kind = "sigmoid";
      gamma = kernel.sigmoidkernel().gamma();
      c = kernel.sigmoidkernel().c();
      break;
    default: fail(what, " has no kernel");
  }
  out.push_back({"kernel", string_scalar(kind)});
  out.push_back({"gamma", f64_tensor({gamma}, {})});
  out.push_back({"c", f64_tensor({c}, {})});
  out.push_back({"degree", i32_scalar(degree)});
}

// The support vectors as a dense [count, width] matrix.
template <class Message>
int64_t add_support_vectors(const Message& svm, const PredictorProgram& program, Constants& out) {
  const std::string& what = program.model_type();
  std::vector<double> values;
  int64_t count = 0, width = 0;
  if (svm.has_densesupportvectors()) {
    const auto& vectors = svm.densesupportvectors().vectors();
    count = vectors.size();
    width = count ? vectors[0].values_size() : std::max<int64_t>(program.feature_count(), 0);
    for (const auto& v : vectors) {
      COREMLRT_CHECK(v.values_size() == width, what, ": dense support vectors differ in length (", width, " and ",
                     v.values_size(), ")");
      values.insert(values.end(), v.values().begin(), v.values().end());
    }
    COREMLRT_CHECK(program.feature_count() < 0 || program.feature_count() == width, what, ": support vectors have ",
                   width, " values but the inputs hold ", program.feature_count());
  } else if (svm.has_sparsesupportvectors()) {
    const auto& vectors = svm.sparsesupportvectors().vectors();
    count = vectors.size();
    // An index past the inputs' end matches an input value of 0 (LibSVM's sparse form leaves
    // zeros out), so the dense width is whichever is larger.
    width = std::max<int64_t>(program.feature_count(), 0);
    for (const auto& v : vectors)
      for (const auto& node : v.nodes()) {
        COREMLRT_CHECK(node.index() >= 1 && node.index() <= (1 << 24), what, ": sparse support vector index ",
                       node.index(), " (indices start at 1)");
        width = std::max<int64_t>(width, node.index());
      }
    values.assign(count * width, 0.0);
    for (int64_t i = 0; i < count; ++i)
      for (const auto& node : vectors[static_cast<int>(i)].nodes()) values[i * width + node.index() - 1] = node.value();
  } else {
    fail(what, " has no support vectors");
  }
  COREMLRT_CHECK_AS(ErrorKind::ResourceLimit, count * width <= (int64_t{1} << 28), what, ": support vectors too large (", count, " x ", width, ")");
  out.push_back({"support_vectors", f64_tensor(std::move(values), {count, width})});
  return count;
}

}  // namespace

ir::Program read_svm_regressor(const std::string& serialized, const FunctionDescription& description) {
  spec::SupportVectorRegressor svm;
  COREMLRT_CHECK(svm.ParseFromString(serialized), "supportVectorRegressor: the message does not parse");
  PredictorProgram program(description, "supportVectorRegressor");
  Constants constants;
  add_kernel(svm.kernel(), program.model_type(), constants);
  const int64_t count = add_support_vectors(svm, program, constants);
  COREMLRT_CHECK(svm.coefficients().alpha_size() == count, "supportVectorRegressor has ",
                 svm.coefficients().alpha_size(), " coefficients for ", count, " support vectors");
  constants.push_back({"coefficients", f64_tensor({svm.coefficients().alpha().begin(), svm.coefficients().alpha().end()},
                                                  {1, count})});
  constants.push_back({"rho", f64_tensor({svm.rho()}, {1})});
  constants.push_back({"vectors_per_class", i32_tensor({static_cast<int32_t>(count)}, {1})});
  constants.push_back({"mode", string_scalar("regression")});
  program.add_model_op("svm", constants, program.regressor_output_type(1), program.regressor_output_name());
  program.finish_regressor();
  return program.take();
}

ir::Program read_svm_classifier(const std::string& serialized, const FunctionDescription& description) {
  spec::SupportVectorClassifier svm;
  COREMLRT_CHECK(svm.ParseFromString(serialized), "supportVectorClassifier: the message does not parse");
  PredictorProgram program(description, "supportVectorClassifier");
  const std::string& what = program.model_type();
  Labels labels = read_labels(svm, what);
  const auto classes = static_cast<int64_t>(labels.size());
  COREMLRT_CHECK(classes >= 2, what, " has ", classes, " class; it needs at least two");
  Constants constants;
  add_kernel(svm.kernel(), what, constants);
  const int64_t count = add_support_vectors(svm, program, constants);
  COREMLRT_CHECK(svm.numberofsupportvectorsperclass_size() == classes, what, " gives support vector counts for ",
                 svm.numberofsupportvectorsperclass_size(), " classes; it has ", classes);
  int64_t total = 0;
  for (int32_t n : svm.numberofsupportvectorsperclass()) {
    COREMLRT_CHECK(n >= 0, what, ": negative support vector count ", n);
    total += n;
  }
  COREMLRT_CHECK(total == count, what, ": support vector counts add up to ", total, " but it has ", count);
  COREMLRT_CHECK(svm.coefficients_size() == classes - 1, what, " has ", svm.coefficients_size(),
                 " rows of coefficients; LibSVM's form has classes - 1 = ", classes - 1);
  std::vector<double> coefficients;
  for (const auto& row : svm.coefficients()) {
    COREMLRT_CHECK(row.alpha_size() == count, what, ": a coefficient row has ", row.alpha_size(), " values for ",
                   count, " support vectors");
    coefficients.insert(coefficients.end(), row.alpha().begin(), row.alpha().end());
  }
  const int64_t pairs = classes * (classes - 1) / 2;
  COREMLRT_CHECK(svm.rho_size() == pairs, what, " has ", svm.rho_size(), " rho values for ", pairs, " class pairs");
  const bool probabilities = svm.proba_size() > 0;
  if (probabilities)
    COREMLRT_CHECK(svm.proba_size() == pairs && svm.probb_size() == pairs, what, " has ", svm.proba_size(),
                   " probA and ", svm.probb_size(), " probB values for ", pairs, " class pairs");
  constants.push_back({"coefficients", f64_tensor(std::move(coefficients), {classes - 1, count})});
  constants.push_back({"rho", f64_tensor({svm.rho().begin(), svm.rho().end()}, {pairs})});
  constants.push_back({"vectors_per_class", i32_tensor({svm.numberofsupportvectorsperclass().begin(),
                                                        svm.numberofsupportvectorsperclass().end()},
                                                       {classes})});
  if (probabilities) {
    constants.push_back({"prob_a", f64_tensor({svm.proba().begin(), svm.proba().end()}, {pairs})});
    constants.push_back({"prob_b", f64_tensor({svm.probb().begin(), svm.probb().end()}, {pairs})});
  }
  // Without a probability model LibSVM predicts by pairwise votes; the op then gives each
  // class's share of the votes, whose first maximum is LibSVM's prediction.
  constants.push_back({"mode", string_scalar(probabilities ? "probabilities" : "votes")});
  std::string scores = program.add_model_op("svm", constants, tensor_type(DType::Float32, {classes}));
  program.finish_classifier(scores, labels);
  return program.take();
}

}  // namespace coremlrt::format::classic
