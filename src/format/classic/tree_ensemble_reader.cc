// treeEnsembleRegressor (Model field 302) and treeEnsembleClassifier (402). The nodes, keyed
// by (treeId, nodeId) in the file, become flat arrays indexed by node position (children as
// positions, each tree's root listed), which the `tree_ensemble` op walks
// (src/ops/tree_ensemble.cc).
#include <map>
#include <set>
#include <utility>

#include "classic_tree_ensemble.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

namespace spec = CoreML::Specification;
using Node = spec::TreeEnsembleParameters::TreeNode;

namespace {

const char* transform_name(spec::TreeEnsemblePostEvaluationTransform transform, const std::string& what) {
  switch (transform) {
    case spec::NoTransform: return "none";
    case spec::Classification_SoftMax: return "softmax";
    case spec::Regression_Logistic: return "logistic";
    case spec::Classification_SoftMaxWithZeroClassReference: return "softmax_zero_reference";
    default: fail(what, ": unknown postEvaluationTransform ", static_cast<int>(transform));
  }
}

// Adds the ensemble's op; `output` is its output type, `mode` "regression" or "classification".
std::string add_ensemble(PredictorProgram& program, const spec::TreeEnsembleParameters& trees, const char* transform,
                         const char* mode, const ir::ValueType& output, const std::string& output_name) {
  const std::string& what = program.model_type();
  const int64_t dims = static_cast<int64_t>(trees.numpredictiondimensions());
  COREMLRT_CHECK(dims > 0 && dims <= (1 << 20), what, ": numPredictionDimensions is ", dims);
  const int n = trees.nodes_size();
  COREMLRT_CHECK(n < (1 << 30), what, ": too many nodes (", n, ")");
  std::map<std::pair<uint64_t, uint64_t>, int32_t> position;
  for (int i = 0; i < n; ++i) {
    const Node& node = trees.nodes(i);
    COREMLRT_CHECK(position.emplace(std::make_pair(node.treeid(), node.nodeid()), i).second, what, ": tree ",
                   node.treeid(), " has two nodes with id ", node.nodeid());
  }
  std::vector<int32_t> feature(n, 0), mode_of(n, 0), true_child(n, -1), false_child(n, -1), missing_true(n, 0);
  std::vector<double> threshold(n, 0.0);
  std::vector<int32_t> leaf_start{0}, leaf_dim;
  std::vector<double> leaf_value;
  std::set<int32_t> children;
  auto child = [&](const Node& node, uint64_t id, const char* which) {
    auto it = position.find({node.treeid(), id});
    COREMLRT_CHECK(it != position.end(), what, ": node ", node.nodeid(), " of tree ", node.treeid(), " has ", which,
                   " child ", id, ", which the tree does not have");
    children.insert(it->second);
    return it->second;
  };
  for (int i = 0; i < n; ++i) {
    const Node& node = trees.nodes(i);
    const int behaviour = static_cast<int>(node.nodebehavior());
    COREMLRT_CHECK(behaviour >= 0 && behaviour <= Node::LeafNode, what, ": node ", node.nodeid(), " of tree ",
                   node.treeid(), " has unknown behaviour ", behaviour);
    mode_of[i] = behaviour;
    if (node.nodebehavior() == Node::LeafNode) {
      for (const auto& info : node.evaluationinfo()) {
        COREMLRT_CHECK(info.evaluationindex() < static_cast<uint64_t>(dims), what, ": leaf ", node.nodeid(), " of tree ",
                       node.treeid(), " adds to dimension ", info.evaluationindex(), " of ", dims);
        leaf_dim.push_back(static_cast<int32_t>(info.evaluationindex()));
        leaf_value.push_back(info.evaluationvalue());
      }
    } else {
      COREMLRT_CHECK(program.feature_count() < 0 ||
                         node.branchfeatureindex() < static_cast<uint64_t>(program.feature_count()),
                     what, ": node ", node.nodeid(), " of tree ", node.treeid(), " tests feature ",
                     node.branchfeatureindex(), " but the inputs hold ", program.feature_count(), " values");
      COREMLRT_CHECK(node.branchfeatureindex() < (1u << 30), what, ": feature index ", node.branchfeatureindex());
      feature[i] = static_cast<int32_t>(node.branchfeatureindex());
      threshold[i] = node.branchfeaturevalue();
      true_child[i] = child(node, node.truechildnodeid(), "true");
      false_child[i] = child(node, node.falsechildnodeid(), "false");
      missing_true[i] = node.missingvaluetrackstruechild() ? 1 : 0;
    }
    leaf_start.push_back(static_cast<int32_t>(leaf_dim.size()));
  }
  // A tree's root is the node no other node names as a child (the op bounds each walk by
  // the node count, so a malformed cycle fails instead of looping).
  std::vector<int32_t> roots;
  std::set<uint64_t> trees_seen;
  for (int i = 0; i < n; ++i) {
    if (children.count(i)) continue;
    COREMLRT_CHECK(trees_seen.insert(trees.nodes(i).treeid()).second, what, ": tree ", trees.nodes(i).treeid(),
                   " has more than one root (nodes no other node leads to)");
    roots.push_back(i);
  }
  std::vector<double> base(trees.basepredictionvalue().begin(), trees.basepredictionvalue().end());
  if (base.empty()) base.assign(dims, 0.0);
  COREMLRT_CHECK(static_cast<int64_t>(base.size()) == dims, what, ": basePredictionValue has ", base.size(),
                 " values for ", dims, " prediction dimensions");
  const auto count = static_cast<int64_t>(n);
  return program.add_model_op(
      "tree_ensemble",
      {{"node_feature", i32_tensor(feature, {count})},
       {"node_threshold", f64_tensor(threshold, {count})},
       {"node_behaviour", i32_tensor(mode_of, {count})},
       {"node_true", i32_tensor(true_child, {count})},
       {"node_false", i32_tensor(false_child, {count})},
       {"node_missing_true", i32_tensor(missing_true, {count})},
       {"leaf_start", i32_tensor(leaf_start, {count + 1})},
       {"leaf_dimension", i32_tensor(leaf_dim, {static_cast<int64_t>(leaf_dim.size())})},
       {"leaf_value", f64_tensor(leaf_value, {static_cast<int64_t>(leaf_value.size())})},
       {"roots", i32_tensor(roots, {static_cast<int64_t>(roots.size())})},
       {"base", f64_tensor(base, {dims})},
       {"transform", string_scalar(transform)},
       {"mode", string_scalar(mode)}},
      output, output_name);
}

}  // namespace

ir::Program read_tree_ensemble_regressor(const std::string& serialized, const FunctionDescription& description) {
  spec::TreeEnsembleRegressor model;
  COREMLRT_CHECK(model.ParseFromString(serialized), "treeEnsembleRegressor: the message does not parse");
  PredictorProgram program(description, "treeEnsembleRegressor");
  const char* transform = transform_name(model.postevaluationtransform(), program.model_type());
  const auto dims = static_cast<int64_t>(model.treeensemble().numpredictiondimensions());
  add_ensemble(program, model.treeensemble(), transform, "regression", program.regressor_output_type(dims),
               program.regressor_output_name());
  program.finish_regressor();
  return program.take();
}

ir::Program read_tree_ensemble_classifier(const std::string& serialized, const FunctionDescription& description) {
  spec::TreeEnsembleClassifier model;
  COREMLRT_CHECK(model.ParseFromString(serialized), "treeEnsembleClassifier: the message does not parse");
  PredictorProgram program(description, "treeEnsembleClassifier");
  const std::string& what = program.model_type();
  Labels labels = read_labels(model, what);
  const auto classes = static_cast<int64_t>(labels.size());
  const auto dims = static_cast<int64_t>(model.treeensemble().numpredictiondimensions());
  const bool zero_reference = model.postevaluationtransform() == spec::Classification_SoftMaxWithZeroClassReference;
  // Scores map onto classes one to one; or one score is the second of two classes; or, with
  // a zero class reference, the first class's score is an implicit 0.
  COREMLRT_CHECK(zero_reference ? dims == classes - 1 : (dims == classes || (dims == 1 && classes == 2)), what, ": ",
                 dims, " prediction dimensions for ", classes, " classes",
                 zero_reference ? " (the zero-class-reference softmax needs one fewer dimension than classes)" : "");
  const char* transform = transform_name(model.postevaluationtransform(), what);
  std::string probabilities = add_ensemble(program, model.treeensemble(), transform, "classification",
                                           tensor_type(DType::Float32, {classes}), "");
  program.finish_classifier(probabilities, labels);
  return program.take();
}

}  // namespace coremlrt::format::classic
