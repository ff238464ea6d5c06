// tree_ensemble: Core ML's decision-tree ensembles (treeEnsembleRegressor/Classifier;
// src/format/classic/tree_ensemble_reader.cc lays the nodes out as the arrays read here).
// Each tree is walked from its root: a branch node compares feature `node_feature` with
// `node_threshold` by its behaviour (<=, <, >=, >, ==, != in the schema's order 0..5) and goes
// to its true or false child; a missing value (NaN) goes where `node_missing_true` says. A
// leaf (behaviour 6) adds its values to prediction dimensions. The sums start from `base`
// (basePredictionValue) and are computed in double, as Core ML does; then `transform`:
//   none; logistic (1 / (1 + e^-s) per dimension); softmax; softmax_zero_reference (softmax
//   over [0, s...], one more value than dimensions).
// In `mode` "regression" the output is the fp64 result. In "classification" it is the fp32
// class probabilities: the result itself, or, for one dimension and two classes, [1 - p, p].
#include <algorithm>
#include <cmath>

#include "ops/feature_vector.h"
#include "ops/register.h"

namespace coremlrt::ops {

namespace {

enum Transform { kNone, kLogistic, kSoftmax, kSoftmaxZeroReference };

void softmax(std::vector<double>& v) {
  const double top = *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (double& x : v) sum += (x = std::exp(x - top));
  for (double& x : v) x /= sum;
}

std::unique_ptr<Kernel> make_tree_ensemble(KernelBuilder& b) {
  const Tensor feature = constant_tensor(b, "node_feature", DType::Int32, 1);
  const Tensor threshold = constant_tensor(b, "node_threshold", DType::Float64, 1);
  const Tensor behaviour = constant_tensor(b, "node_behaviour", DType::Int32, 1);
  const Tensor true_child = constant_tensor(b, "node_true", DType::Int32, 1);
  const Tensor false_child = constant_tensor(b, "node_false", DType::Int32, 1);
  const Tensor missing_true = constant_tensor(b, "node_missing_true", DType::Int32, 1);
  const Tensor leaf_start = constant_tensor(b, "leaf_start", DType::Int32, 1);
  const Tensor leaf_dimension = constant_tensor(b, "leaf_dimension", DType::Int32, 1);
  const Tensor leaf_value = constant_tensor(b, "leaf_value", DType::Float64, 1);
  const Tensor roots = constant_tensor(b, "roots", DType::Int32, 1);
  const Tensor base = constant_tensor(b, "base", DType::Float64, 1);
  const int64_t nodes = feature.numel(), dims = base.numel(), leaves = leaf_value.numel();
  for (const Tensor* t : {&threshold, &behaviour, &true_child, &false_child, &missing_true})
    b.check(t->numel() == nodes, "node arrays differ in length");
  b.check(leaf_start.numel() == nodes + 1 && leaf_dimension.numel() == leaves, "leaf arrays do not match the nodes");
  // Check the layout once so that the walk needs no checks of its own.
  int64_t needed_features = 0;
  for (int64_t i = 0; i < nodes; ++i) {
    const int32_t mode = behaviour.ptr<int32_t>()[i];
    b.check(mode >= 0 && mode <= 6, "node ", i, " has unknown behaviour ", mode);
    const int32_t first = leaf_start.ptr<int32_t>()[i], last = leaf_start.ptr<int32_t>()[i + 1];
    b.check(first >= 0 && first <= last && last <= leaves, "node ", i, " has a bad leaf range");
    if (mode == 6) continue;
    for (const Tensor* child : {&true_child, &false_child}) {
      const int32_t c = child->ptr<int32_t>()[i];
      b.check(c >= 0 && c < nodes, "node ", i, " has child ", c, " of ", nodes);
    }
    b.check(feature.ptr<int32_t>()[i] >= 0, "node ", i, " tests a negative feature index");
    needed_features = std::max<int64_t>(needed_features, int64_t{feature.ptr<int32_t>()[i]} + 1);
  }
  for (int64_t i = 0; i < leaves; ++i)
    b.check(leaf_dimension.ptr<int32_t>()[i] >= 0 && leaf_dimension.ptr<int32_t>()[i] < dims, "a leaf adds to dimension ",
            leaf_dimension.ptr<int32_t>()[i], " of ", dims);
  for (int64_t i = 0; i < roots.numel(); ++i)
    b.check(roots.ptr<int32_t>()[i] >= 0 && roots.ptr<int32_t>()[i] < nodes, "root ", roots.ptr<int32_t>()[i], " of ",
            nodes, " nodes");
  const std::string transform_name = b.const_string("transform");
  Transform transform = kNone;
  if (transform_name == "logistic") transform = kLogistic;
  else if (transform_name == "softmax") transform = kSoftmax;
  else if (transform_name == "softmax_zero_reference") transform = kSoftmaxZeroReference;
  else b.check(transform_name == "none", "unknown transform '", transform_name, "'");
  const std::string mode = b.const_string("mode");
  b.check(mode == "regression" || mode == "classification", "unknown mode '", mode, "'");
  const bool classification = mode == "classification";
  const Shape shape = declared_output_shape(b, 0);
  const int64_t outputs = shape_numel(shape);
  const int64_t transformed = dims + (transform == kSoftmaxZeroReference ? 1 : 0);
  if (classification) {
    b.check(b.output_type(0).dtype == DType::Float32 && shape.size() == 1, "class probabilities are an fp32 vector, "
            "declared ", b.output_type(0).str());
    b.check(outputs == transformed || (transformed == 1 && outputs == 2), dims, " prediction dimensions cannot score ",
            outputs, " classes");
  } else {
    b.check(b.output_type(0).dtype == DType::Float64 && outputs == transformed, "a regression outputs fp64 with ",
            transformed, " values, declared ", b.output_type(0).str());
  }
  FeatureVector features(b, -1);
  return make_kernel([=](KernelContext& ctx) {
    const std::vector<double> x = features.read(ctx);
    if (static_cast<int64_t>(x.size()) < needed_features)
      ctx.fail("the input features hold ", x.size(), " values; the trees test feature ", needed_features - 1);
    std::vector<double> score(base.ptr<double>(), base.ptr<double>() + dims);
    const int32_t* feat = feature.ptr<int32_t>();
    const double* thr = threshold.ptr<double>();
    const int32_t* how = behaviour.ptr<int32_t>();
    for (int64_t r = 0; r < roots.numel(); ++r) {
      int32_t node = roots.ptr<int32_t>()[r];
      for (int64_t steps = 0; how[node] != 6; ++steps) {
        if (steps >= nodes) ctx.fail("a tree has a cycle (a walk from its root passed ", nodes, " nodes)");
        const double v = x[feat[node]], t = thr[node];
        bool go_true;
        if (std::isnan(v)) {
          go_true = missing_true.ptr<int32_t>()[node] != 0;
        } else {
          switch (how[node]) {
            case 0: go_true = v <= t; break;
            case 1: go_true = v < t; break;
            case 2: go_true = v >= t; break;
            case 3: go_true = v > t; break;
            case 4: go_true = v == t; break;
            default: go_true = v != t; break;
          }
        }
        node = go_true ? true_child.ptr<int32_t>()[node] : false_child.ptr<int32_t>()[node];
      }
      for (int32_t i = leaf_start.ptr<int32_t>()[node]; i < leaf_start.ptr<int32_t>()[node + 1]; ++i)
        score[leaf_dimension.ptr<int32_t>()[i]] += leaf_value.ptr<double>()[i];
    }
    switch (transform) {
      case kNone: break;
      case kLogistic:
        for (double& s : score) s = 1.0 / (1.0 + std::exp(-s));
        break;
      case kSoftmax: softmax(score); break;
      case kSoftmaxZeroReference:
        score.insert(score.begin(), 0.0);
        softmax(score);
        break;
    }
    if (!classification) {
      double* out = ctx.allocate_output(0, DType::Float64, shape).ptr<double>();
      std::copy(score.begin(), score.end(), out);
      return;
    }
    float* out = ctx.allocate_output(0, DType::Float32, shape).ptr<float>();
    if (score.size() == 1 && outputs == 2) {
      out[0] = static_cast<float>(1.0 - score[0]);
      out[1] = static_cast<float>(score[0]);
      return;
    }
    for (int64_t i = 0; i < outputs; ++i) out[i] = static_cast<float>(score[i]);
  });
}

}  // namespace

void register_tree_ensemble_kernels(KernelRegistry& registry) {
  registry.add("tree_ensemble", DTypeSet{DType::Float16, DType::Float32, DType::Float64, DType::Int32, DType::Int64},
               make_tree_ensemble);
}

}  // namespace coremlrt::ops
