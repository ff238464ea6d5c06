#include "format/pipeline_splicer.h"

#include <gtest/gtest.h>

#include <string>

#include "coremlrt/error.h"

namespace coremlrt::format {
namespace {

ir::ValueType tensor(DType dtype, std::vector<int64_t> dims) {
  ir::ValueType type;
  type.dtype = dtype;
  type.rank = static_cast<int64_t>(dims.size());
  type.dims = std::move(dims);
  return type;
}

FeatureDescription array_feature(const std::string& name, int64_t size) {
  FeatureDescription f;
  f.name = name;
  f.kind = FeatureKind::MultiArray;
  f.dtype = DType::Float64;
  f.shape = {size};
  return f;
}

// A stage of one op `type` reading `input` (typed `in`) and writing `output` (typed `out`).
PipelineStage stage(const std::string& type, const std::string& input, const ir::ValueType& in,
                    const std::string& output, const ir::ValueType& out) {
  PipelineStage s;
  s.label = "stage '" + type + "'";
  s.description.inputs = {array_feature(input, 3)};
  s.description.outputs = {array_feature(output, 3)};
  ir::Function f;
  f.name = "main";
  f.opset = "CoreML5";
  f.ios_version = ir::ios_version_of_opset(f.opset);
  f.inputs = {{input, in}};
  ir::Operation op;
  op.type = type;
  op.inputs["x"] = {ir::Binding{input, nullptr}};
  // A stage may read and write one feature name: its program names the output apart.
  const std::string value = input == output ? output + "_0" : output;
  op.outputs = {{value, out}};
  f.block.operations.push_back(op);
  f.block.outputs = {value};
  s.program.functions.emplace("main", std::move(f));
  return s;
}

FunctionDescription pipeline(const std::string& input, const std::string& output) {
  FunctionDescription d;
  d.inputs = {array_feature(input, 3)};
  d.outputs = {array_feature(output, 3)};
  return d;
}

TEST(PipelineSplicer, ChainsStagesByFeatureNameWithUniqueValues) {
  const ir::ValueType f64 = tensor(DType::Float64, {3});
  std::vector<PipelineStage> stages;
  stages.push_back(stage("scaler", "x", f64, "v", f64));
  stages.push_back(stage("normalizer", "v", f64, "v", f64));  // reads and rewrites "v"
  stages.push_back(stage("imputer", "v", f64, "y", f64));
  ir::Program program = splice_pipeline(std::move(stages), pipeline("x", "y"), "pipeline");
  const ir::Function& f = program.functions.at("main");
  ir::validate_function(f);
  ASSERT_EQ(f.inputs.size(), 1u);
  EXPECT_EQ(f.inputs[0].name, "x");
  ASSERT_EQ(f.block.operations.size(), 3u);
  EXPECT_EQ(f.block.operations[0].inputs.at("x")[0].name, "x");
  // Each stage reads the previous stage's value of "v".
  EXPECT_EQ(f.block.operations[1].inputs.at("x")[0].name, f.block.operations[0].outputs[0].name);
  EXPECT_EQ(f.block.operations[2].inputs.at("x")[0].name, f.block.operations[1].outputs[0].name);
  EXPECT_NE(f.block.operations[0].outputs[0].name, f.block.operations[1].outputs[0].name);
  EXPECT_EQ(f.block.operations[2].outputs[0].name, "y");
  EXPECT_EQ(f.block.outputs, std::vector<std::string>{"y"});
}

TEST(PipelineSplicer, CastsAndReshapesWhereAStageExpectsAnotherType) {
  std::vector<PipelineStage> stages;
  stages.push_back(stage("scaler", "x", tensor(DType::Float64, {3}), "v", tensor(DType::Float64, {3})));
  stages.push_back(stage("relu", "v", tensor(DType::Float32, {1, 3}), "y", tensor(DType::Float32, {1, 3})));
  ir::Program program = splice_pipeline(std::move(stages), pipeline("x", "y"), "pipeline");
  const ir::Function& f = program.functions.at("main");
  ir::validate_function(f);
  ASSERT_EQ(f.block.operations.size(), 4u);
  EXPECT_EQ(f.block.operations[1].type, "cast");
  EXPECT_EQ(f.block.operations[1].inputs.at("dtype")[0].value->strings, std::vector<std::string>{"fp32"});
  EXPECT_EQ(f.block.operations[2].type, "reshape");
  EXPECT_EQ(f.block.operations[3].inputs.at("x")[0].name, f.block.operations[2].outputs[0].name);
}

TEST(PipelineSplicer, RefusesAStageReadingAFeatureNobodyProvides) {
  const ir::ValueType f64 = tensor(DType::Float64, {3});
  std::vector<PipelineStage> stages;
  stages.push_back(stage("scaler", "nowhere", f64, "y", f64));
  try {
    splice_pipeline(std::move(stages), pipeline("x", "y"), "pipeline");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stage 'scaler': reads 'nowhere'"), std::string::npos) << e.what();
  }
}

TEST(PipelineSplicer, RefusesAnOutputNoStageProduces) {
  const ir::ValueType f64 = tensor(DType::Float64, {3});
  std::vector<PipelineStage> stages;
  stages.push_back(stage("scaler", "x", f64, "v", f64));
  EXPECT_THROW(splice_pipeline(std::move(stages), pipeline("x", "y"), "pipeline"), Error);
}

}  // namespace
}  // namespace coremlrt::format
