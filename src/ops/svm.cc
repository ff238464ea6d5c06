// svm: Core ML's support vector machines (supportVectorRegressor/Classifier), LibSVM's
// prediction (svm_predict_values, svm_predict_probability in LibSVM's svm.cpp, whose
// algorithm this follows) in double precision. src/format/classic/svm_reader.cc makes the
// constants: the kernel (linear u·v, rbf exp(-gamma |u - v|^2), poly (gamma u·v + c)^degree,
// sigmoid tanh(gamma u·v + c)), dense support vectors grouped by class
// (`vectors_per_class`), the dual coefficients [classes - 1, vectors], rho per class pair.
// `mode`:
//   regression     fp64: sum_i coef_i K(sv_i, x) - rho;
//   votes          fp32 [classes]: each class's share of the pairwise votes (the pair (i, j)
//                  votes i when its decision value is > 0, else j); the first maximum is LibSVM's
//                  prediction;
//   probabilities  fp32 [classes]: LibSVM's estimates: each pair's decision value through
//                  Platt's sigmoid (prob_a, prob_b), clipped to [1e-7, 1 - 1e-7] (a NaN to 1e-7), then coupled
//                  by Wu, Lin and Weng's method (multiclass_probability); two classes take the
//                  pair's probability directly.
#include <algorithm>
#include <cmath>

#include "ops/feature_vector.h"
#include "ops/register.h"

namespace coremlrt::ops {

namespace {

enum KernelKind { kLinear, kRbf, kPoly, kSigmoid };
enum OutputMode { kRegression, kVotes, kProbabilities };

double platt(double decision, double a, double b) {
  const double f = decision * a + b;  // written as LibSVM's sigmoid_predict, stable for either sign
  return f >= 0 ? std::exp(-f) / (1.0 + std::exp(-f)) : 1.0 / (1.0 + std::exp(f));
}

// LibSVM's min(max(estimate, 1e-7), 1 - 1e-7), written with its own min and max
// ((x < y) ? x : y, (x > y) ? x : y), not std::min/std::max: the order of the comparisons
// decides what a NaN estimate becomes (one from a NaN decision value, when training left
// infinite coefficients), and under LibSVM's it becomes 1e-7.
double clip_estimate(double estimate) {
  const double low = 1e-7, high = 1 - 1e-7;
  const double raised = estimate > low ? estimate : low;
  return raised < high ? raised : high;
}

// LibSVM's multiclass_probability: r[i][j] is the pairwise estimate P(i | i or j).
std::vector<double> couple(int64_t k, const std::vector<double>& r) {
  std::vector<double> p(k, 1.0 / static_cast<double>(k)), q(k * k, 0.0), qp(k, 0.0);
  const int64_t max_iter = std::max<int64_t>(100, k);
  const double eps = 0.005 / static_cast<double>(k);
  for (int64_t t = 0; t < k; ++t) {
    for (int64_t j = 0; j < t; ++j) {
      q[t * k + t] += r[j * k + t] * r[j * k + t];
      q[t * k + j] = q[j * k + t];
    }
    for (int64_t j = t + 1; j < k; ++j) {
      q[t * k + t] += r[j * k + t] * r[j * k + t];
      q[t * k + j] = -r[j * k + t] * r[t * k + j];
    }
  }
  for (int64_t iter = 0; iter < max_iter; ++iter) {
    double pqp = 0;
    for (int64_t t = 0; t < k; ++t) {
      qp[t] = 0;
      for (int64_t j = 0; j < k; ++j) qp[t] += q[t * k + j] * p[j];
      pqp += p[t] * qp[t];
    }
    double max_error = 0;
    for (int64_t t = 0; t < k; ++t) max_error = std::max(max_error, std::fabs(qp[t] - pqp));
    if (max_error < eps) break;
    for (int64_t t = 0; t < k; ++t) {
      const double diff = (-qp[t] + pqp) / q[t * k + t];
      p[t] += diff;
      pqp = (pqp + diff * (diff * q[t * k + t] + 2 * qp[t])) / (1 + diff) / (1 + diff);
      for (int64_t j = 0; j < k; ++j) {
        qp[j] = (qp[j] + diff * q[t * k + j]) / (1 + diff);
        p[j] /= (1 + diff);
      }
    }
  }
  return p;
}

std::unique_ptr<Kernel> make_svm(KernelBuilder& b) {
  const std::string kernel_name = b.const_string("kernel");
  KernelKind kind = kLinear;
  if (kernel_name == "rbf") kind = kRbf;
  else if (kernel_name == "poly") kind = kPoly;
  else if (kernel_name == "sigmoid") kind = kSigmoid;
  else b.check(kernel_name == "linear", "unknown kernel '", kernel_name, "'");
  const double gamma = b.const_float("gamma", 0.0), c = b.const_float("c", 0.0);
  const int64_t degree = b.const_int("degree", 0);
  const Tensor vectors = constant_tensor(b, "support_vectors", DType::Float64, 2);
  const Tensor coefficients = constant_tensor(b, "coefficients", DType::Float64, 2);
  const Tensor rho = constant_tensor(b, "rho", DType::Float64, 1);
  const Tensor per_class = constant_tensor(b, "vectors_per_class", DType::Int32, 1);
  const int64_t count = vectors.shape[0], width = vectors.shape[1], classes = per_class.numel();
  const std::string mode_name = b.const_string("mode");
  OutputMode mode = kRegression;
  if (mode_name == "votes") mode = kVotes;
  else if (mode_name == "probabilities") mode = kProbabilities;
  else b.check(mode_name == "regression", "unknown mode '", mode_name, "'");
  const Shape shape = declared_output_shape(b, 0);
  std::vector<int64_t> start{0};
  for (int64_t i = 0; i < classes; ++i) {
    b.check(per_class.ptr<int32_t>()[i] >= 0, "negative support vector count");
    start.push_back(start.back() + per_class.ptr<int32_t>()[i]);
  }
  b.check(start.back() == count, "support vector counts add up to ", start.back(), " for ", count, " vectors");
  const int64_t pairs = mode == kRegression ? 1 : classes * (classes - 1) / 2;
  if (mode == kRegression) {
    b.check(classes == 1 && coefficients.shape[0] == 1, "a regression has one row of coefficients");
    b.check(b.output_type(0).dtype == DType::Float64 && shape_numel(shape) == 1, "a regression outputs one fp64 value, "
            "declared ", b.output_type(0).str());
  } else {
    b.check(classes >= 2 && coefficients.shape[0] == classes - 1, "a classifier of ", classes,
            " classes has classes - 1 rows of coefficients, got ", coefficients.shape[0]);
    b.check(b.output_type(0).dtype == DType::Float32 && shape.size() == 1 && shape[0] == classes,
            "class scores are an fp32 vector of ", classes, ", declared ", b.output_type(0).str());
  }
  b.check(coefficients.shape[1] == count && rho.numel() == pairs, "coefficients or rho do not match the vectors");
  Tensor prob_a, prob_b;
  if (mode == kProbabilities) {
    prob_a = constant_tensor(b, "prob_a", DType::Float64, 1);
    prob_b = constant_tensor(b, "prob_b", DType::Float64, 1);
    b.check(prob_a.numel() == pairs && prob_b.numel() == pairs, "prob_a and prob_b need one value per class pair");
  }
  FeatureVector features(b, -1);
  return make_kernel([=](KernelContext& ctx) {
    std::vector<double> x = features.read(ctx);
    // Sparse support vectors past the inputs' end were made dense with zeros; match them.
    if (static_cast<int64_t>(x.size()) > width)
      ctx.fail("the input features hold ", x.size(), " values; the support vectors have ", width);
    x.resize(width, 0.0);
    const double* sv = vectors.ptr<double>();
    std::vector<double> k(count);
    for (int64_t i = 0; i < count; ++i) {
      const double* v = sv + i * width;
      double dot = 0;
      if (kind == kRbf) {
        for (int64_t d = 0; d < width; ++d) dot += (x[d] - v[d]) * (x[d] - v[d]);
        k[i] = std::exp(-gamma * dot);
        continue;
      }
      for (int64_t d = 0; d < width; ++d) dot += x[d] * v[d];
      if (kind == kLinear) k[i] = dot;
      else if (kind == kPoly) k[i] = std::pow(gamma * dot + c, static_cast<double>(degree));
      else k[i] = std::tanh(gamma * dot + c);
    }
    const double* coef = coefficients.ptr<double>();
    if (mode == kRegression) {
      double sum = -rho.ptr<double>()[0];
      for (int64_t i = 0; i < count; ++i) sum += coef[i] * k[i];
      ctx.allocate_output(0, DType::Float64, shape).ptr<double>()[0] = sum;
      return;
    }
    std::vector<double> votes(classes, 0.0), pairwise(classes * classes, 0.0);
    int64_t p = 0;
    for (int64_t i = 0; i < classes; ++i)
      for (int64_t j = i + 1; j < classes; ++j, ++p) {
        double sum = -rho.ptr<double>()[p];
        for (int64_t s = start[i]; s < start[i + 1]; ++s) sum += coef[(j - 1) * count + s] * k[s];
        for (int64_t s = start[j]; s < start[j + 1]; ++s) sum += coef[i * count + s] * k[s];
        votes[sum > 0 ? i : j] += 1;
        if (mode == kProbabilities) {
          const double r = clip_estimate(platt(sum, prob_a.ptr<double>()[p], prob_b.ptr<double>()[p]));
          pairwise[i * classes + j] = r;
          pairwise[j * classes + i] = 1 - r;
        }
      }
    float* out = ctx.allocate_output(0, DType::Float32, shape).ptr<float>();
    if (mode == kVotes) {
      for (int64_t i = 0; i < classes; ++i) out[i] = static_cast<float>(votes[i] / static_cast<double>(pairs));
      return;
    }
    if (classes == 2) {
      out[0] = static_cast<float>(pairwise[1]);
      out[1] = static_cast<float>(pairwise[2]);
      return;
    }
    const std::vector<double> prob = couple(classes, pairwise);
    for (int64_t i = 0; i < classes; ++i) out[i] = static_cast<float>(prob[i]);
  });
}

}  // namespace

void register_svm_kernels(KernelRegistry& registry) {
  registry.add("svm", DTypeSet{DType::Float16, DType::Float32, DType::Float64, DType::Int32, DType::Int64}, make_svm);
}

}  // namespace coremlrt::ops
