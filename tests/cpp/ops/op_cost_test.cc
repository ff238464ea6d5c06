#include "ops/op_cost.h"

#include <gtest/gtest.h>

#include <map>

#include "ops/kernel.h"

namespace coremlrt::ops {
namespace {

// An op over named types and constants, as a backend's or the model structure's reader sees it.
class MapReader final : public CostReader {
 public:
  explicit MapReader(ir::Operation op) : op_(std::move(op)) {}
  const ir::Operation& op() const override { return op_; }
  const ir::ValueType* type(const std::string& param, size_t index = 0) const override {
    auto it = op_.inputs.find(param);
    if (it == op_.inputs.end() || index >= it->second.size()) return nullptr;
    const ir::Binding& b = it->second[index];
    return b.value ? &b.value->type : &types.at(b.name);
  }
  const ir::ConstValue* constant(const std::string& param) const override {
    auto it = op_.inputs.find(param);
    return it == op_.inputs.end() || !it->second[0].value ? nullptr : it->second[0].value.get();
  }
  std::map<std::string, ir::ValueType> types;

 private:
  ir::Operation op_;
};

ir::Operation op_of(const std::string& type, std::map<std::string, std::string> inputs, ir::ValueType out) {
  ir::Operation op;
  op.type = type;
  for (const auto& [param, name] : inputs) op.inputs[param].push_back({name, nullptr});
  op.outputs.push_back({"out", std::move(out)});
  return op;
}

std::shared_ptr<const ir::ConstValue> bool_scalar(bool value) {
  auto v = std::make_shared<ir::ConstValue>();
  v->type = ir::tensor_type(DType::Bool, {});
  v->tensor = Tensor::empty(DType::Bool, {});
  *static_cast<uint8_t*>(v->tensor.data) = value;
  return v;
}

TEST(OpCost, LinearCountsADotProductPerOutputOverTheWeightsK) {
  MapReader linear(op_of("linear", {{"x", "x"}, {"weight", "w"}}, ir::tensor_type(DType::Float32, {4, 16})));
  linear.types = {{"x", ir::tensor_type(DType::Float32, {4, 8})}, {"w", ir::tensor_type(DType::Float32, {16, 8})}};
  EXPECT_EQ(op_macs(linear, 17), 4 * 16 * 8);
  EXPECT_EQ(op_matrix_rows(linear, 17), 4);
  EXPECT_EQ(cost_of(linear.op(), 17).weights, std::vector<std::string>{"weight"});
}

TEST(OpCost, DimsKnownOnlyAtPredictionCountAsTheAssumedExtent) {
  MapReader linear(op_of("linear", {{"x", "x"}, {"weight", "w"}}, ir::tensor_type(DType::Float32, {-1, 16})));
  linear.types = {{"x", ir::tensor_type(DType::Float32, {-1, 8})}, {"w", ir::tensor_type(DType::Float32, {16, 8})}};
  EXPECT_EQ(op_macs(linear, 17), kAssumedDynamicExtent * 16 * 8);
  EXPECT_EQ(op_matrix_rows(linear, 17), static_cast<int64_t>(kAssumedDynamicExtent));
  EXPECT_EQ(largest_operand(linear), kAssumedDynamicExtent * 16);
}

TEST(OpCost, MatmulRowsFollowTransposeX) {
  ir::Operation op = op_of("matmul", {{"x", "x"}, {"y", "y"}}, ir::tensor_type(DType::Float32, {2, 3, 5}));
  op.inputs["transpose_x"].push_back({"", bool_scalar(true)});
  MapReader matmul(op);
  matmul.types = {{"x", ir::tensor_type(DType::Float32, {2, 7, 3})}, {"y", ir::tensor_type(DType::Float32, {7, 5})}};
  EXPECT_EQ(op_matrix_rows(matmul, 17), 3);
  EXPECT_EQ(op_macs(matmul, 17), 2 * 3 * 5 * 3);  // output elements x the last dim of x
}

TEST(OpCost, OpsWithoutMatrixWorkDeclareNone) {
  MapReader relu(op_of("relu", {{"x", "x"}}, ir::tensor_type(DType::Float32, {3, 4})));
  relu.types = {{"x", ir::tensor_type(DType::Float32, {3, 4})}};
  EXPECT_EQ(op_macs(relu, 17), 0);
  EXPECT_EQ(op_matrix_rows(relu, 17), -1);
  EXPECT_EQ(largest_operand(relu), 12);
}

TEST(OpCost, LstmCountsEachStepsWeightElements) {
  MapReader lstm(op_of("lstm", {{"x", "x"}, {"weight_ih", "wi"}, {"weight_hh", "wh"}},
                       ir::tensor_type(DType::Float32, {5, 2, 6})));
  lstm.types = {{"x", ir::tensor_type(DType::Float32, {5, 2, 3})},
                {"wi", ir::tensor_type(DType::Float32, {24, 3})},
                {"wh", ir::tensor_type(DType::Float32, {24, 6})}};
  EXPECT_EQ(op_macs(lstm, 17), 5 * 2 * (24 * 3 + 24 * 6));
  EXPECT_TRUE(cost_of(lstm.op(), 17).ours_on_fp32_weights);
  EXPECT_FALSE(cost_of(op_of("gru", {}, {}), 17).ours_on_fp32_weights);
}

TEST(OpCost, EveryMatrixProductDeclaresItsWorkAndWeights) {
  for (const auto& entry : KernelRegistry::cpu().entries()) {
    if (!entry.cost.matrix_rows) continue;
    EXPECT_TRUE(entry.cost.macs) << entry.op_type;
    EXPECT_FALSE(entry.cost.weights.empty()) << entry.op_type;
  }
}

TEST(OpTraits, ConstexprOpsRunAtLoad) {
  for (const auto& entry : KernelRegistry::cpu().entries())
    EXPECT_EQ(entry.traits.evaluated_at_load, entry.family == "constexpr") << entry.op_type;
}

}  // namespace
}  // namespace coremlrt::ops
