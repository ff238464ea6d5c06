// The partitioner (src/runtime/partition.h) with a fake backend: which ops become regions, what
// a region reads and writes, the cost rule, fallback when compilation fails, per-context state.
#include "runtime/partition.h"

#include <gtest/gtest.h>

#include <set>

#include "runtime/execute.h"

namespace coremlrt::runtime {
namespace {

ir::ValueType f32(std::vector<int64_t> dims) {
  ir::ValueType t;
  t.dtype = DType::Float32;
  t.rank = static_cast<int64_t>(dims.size());
  t.dims = std::move(dims);
  return t;
}

std::shared_ptr<ir::ConstValue> scalar(float v) {
  auto c = std::make_shared<ir::ConstValue>();
  c->type = f32({});
  c->tensor = Tensor::empty(DType::Float32, {});
  *c->tensor.ptr<float>() = v;
  return c;
}

ir::Operation binary(const std::string& type, const std::string& x, ir::Binding y, const std::string& out) {
  ir::Operation op;
  op.type = type;
  op.name = out + "_op";
  op.inputs["x"] = {ir::Binding{x, nullptr}};
  op.inputs["y"] = {std::move(y)};
  op.outputs = {{out, f32({4})}};
  return op;
}

// x -> a = x + 1 -> b = relu(a) -> c = b * 2 -> d = c - x -> e = relu(d); outputs a and e.
ir::Function sample_function() {
  ir::Function f;
  f.name = "main";
  f.opset = "CoreML7";
  f.ios_version = 17;
  f.inputs = {{"x", f32({4})}};
  f.block.operations.push_back(binary("add", "x", {"", scalar(1)}, "a"));
  ir::Operation relu;
  relu.type = "relu";
  relu.inputs["x"] = {ir::Binding{"a", nullptr}};
  relu.outputs = {{"b", f32({4})}};
  f.block.operations.push_back(relu);
  f.block.operations.push_back(binary("mul", "b", {"", scalar(2)}, "c"));
  f.block.operations.push_back(binary("sub", "c", {"x", nullptr}, "d"));
  relu.inputs["x"] = {ir::Binding{"d", nullptr}};
  relu.outputs = {{"e", f32({4})}};
  f.block.operations.push_back(relu);
  f.block.outputs = {"a", "e"};
  return f;
}

struct Counters {
  int regions_compiled = 0;
  int states_created = 0;
  std::vector<std::vector<std::string>> region_inputs, region_outputs;
};

// Runs add/sub/mul regions itself, reading the region's ops, so the numbers prove that the
// runtime bound the region's inputs and outputs correctly.
class FakeBackend final : public backends::Backend {
 public:
  FakeBackend(Counters& counters, size_t min_ops, bool fail_compile)
      : counters_(counters), min_ops_(min_ops), fail_compile_(fail_compile) {}
  const std::string& name() const override {
    static const std::string kName = "fake";
    return kName;
  }
  std::vector<backends::Verdict> propose(const backends::FunctionView& view) const override {
    std::vector<backends::Verdict> out;
    for (const ir::Operation* op : view.ops)
      out.push_back(op->type == "relu" ? backends::Verdict::refuse("no relu here") : backends::Verdict::claim());
    return out;
  }
  backends::Verdict worth_running(const backends::Region& region) const override {
    return region.ops.size() >= min_ops_ ? backends::Verdict::claim() : backends::Verdict::refuse("too small");
  }
  std::unique_ptr<ops::Kernel> compile(const backends::Region& region) const override {
    if (fail_compile_) fail("fake compiler refuses");
    ++counters_.regions_compiled;
    std::vector<std::string> ins, outs;
    for (const auto& v : region.inputs) ins.push_back(v.name);
    for (const auto& v : region.outputs) outs.push_back(v.name);
    counters_.region_inputs.push_back(ins);
    counters_.region_outputs.push_back(outs);
    struct Count final : ops::KernelState {};
    // The kernel outlives this backend object (and the region): it keeps the op pointers (the
    // function outlives the plan) and the test's counters, nothing of the backend's.
    return ops::make_kernel([ops = region.ops, ins, outs, &counters = counters_](ops::KernelContext& ctx) {
      if (!ctx.kernel_state()) {
        ctx.kernel_state() = std::make_unique<Count>();
        ++counters.states_created;
      }
      std::map<std::string, std::vector<float>> env;
      for (size_t i = 0; i < ins.size(); ++i) {
        const Tensor& t = ctx.input(static_cast<int>(i));
        env[ins[i]].assign(t.ptr<float>(), t.ptr<float>() + t.numel());
      }
      for (const ir::Operation* op : ops) {
        std::vector<float> x = env.at(op->inputs.at("x")[0].name);
        const ir::Binding& yb = op->inputs.at("y")[0];
        std::vector<float> y = yb.value ? std::vector<float>(x.size(), *yb.value->tensor.ptr<float>()) : env.at(yb.name);
        for (size_t i = 0; i < x.size(); ++i)
          x[i] = op->type == "add" ? x[i] + y[i] : op->type == "mul" ? x[i] * y[i] : x[i] - y[i];
        env[op->outputs[0].name] = x;
      }
      for (size_t i = 0; i < outs.size(); ++i) {
        Tensor& t = ctx.allocate_output(static_cast<int>(i), DType::Float32, {4});
        std::copy(env.at(outs[i]).begin(), env.at(outs[i]).end(), t.ptr<float>());
      }
    });
  }

 private:
  Counters& counters_;
  size_t min_ops_;
  bool fail_compile_;
};

std::vector<float> run(const Plan& plan, ExecutionContext& context, std::vector<float> x, size_t output) {
  Tensor in = Tensor::view(DType::Float32, {4}, x.data(), nullptr);
  ExecutionContext::Result r = context.run({in});
  const Tensor& y = r.outputs.at(output);
  return std::vector<float>(y.ptr<float>(), y.ptr<float>() + 4);
}

// e = relu(relu(x + 1) * 2 - x)
std::vector<float> expected_e(const std::vector<float>& x) {
  std::vector<float> e;
  for (float v : x) e.push_back(std::max(0.0f, std::max(0.0f, v + 1) * 2 - v));
  return e;
}

TEST(Partition, ClaimedRunsBecomeRegionsAndComputeTheSameResults) {
  ir::Function f = sample_function();
  Counters counters;
  auto plan = build_plan(f, ops::KernelRegistry::cpu(), {std::make_shared<FakeBackend>(counters, 1, false)});
  // add | relu | mul, sub | relu: two regions, three steps of ours... two relus.
  ASSERT_EQ(plan->body.steps.size(), 4u);
  EXPECT_EQ(counters.regions_compiled, 2);
  EXPECT_EQ(counters.region_inputs[0], (std::vector<std::string>{"x"}));
  EXPECT_EQ(counters.region_outputs[0], (std::vector<std::string>{"a"}));
  // The second region reads b (from our relu) and x (a function input), and writes only d:
  // c is consumed inside it.
  EXPECT_EQ(counters.region_inputs[1], (std::vector<std::string>{"b", "x"}));
  EXPECT_EQ(counters.region_outputs[1], (std::vector<std::string>{"d"}));
  std::vector<std::string> where;
  for (const Placement& p : plan->placements) where.push_back(p.backend + ":" + std::to_string(p.region));
  EXPECT_EQ(where, (std::vector<std::string>{"fake:0", "reference:-1", "fake:1", "fake:1", "reference:-1"}));
  EXPECT_EQ(plan->placements[1].reason, "fake: no relu here");
  // Steps say by type what they are: regions 0 and 2, our relus 1 and 3; a region keeps its own
  // op steps as nested block 0.
  const std::vector<PlannedStep>& steps = plan->body.steps;
  ASSERT_NE(steps[0].as_region(), nullptr);
  EXPECT_EQ(steps[0].as_op(), nullptr);
  EXPECT_EQ(steps[0].as_region()->ops.size(), 1u);
  EXPECT_EQ(steps[0].describe(), steps[0].as_region()->label);
  EXPECT_EQ(steps[0].describe().rfind("fake region #0 (1 op: ", 0), 0u) << steps[0].describe();
  ASSERT_EQ(steps[0].blocks.size(), 1u);
  ASSERT_NE(steps[0].blocks[0]->steps.at(0).as_op(), nullptr);
  EXPECT_EQ(steps[0].blocks[0]->steps[0].op().type, "add");
  ASSERT_NE(steps[1].as_op(), nullptr);
  EXPECT_EQ(steps[1].op().type, "relu");
  EXPECT_EQ(steps[2].as_region()->ops.size(), 2u);
  EXPECT_THROW(steps[2].op(), Error);

  ExecutionContext context(*plan);
  std::vector<float> x = {-3, -0.5f, 0.25f, 2};
  EXPECT_EQ(run(*plan, context, x, 1), expected_e(x));
  EXPECT_EQ(run(*plan, context, x, 0), (std::vector<float>{-2, 0.5f, 1.25f, 3}));
  // One state per region in this context, made on the first run and kept.
  EXPECT_EQ(counters.states_created, 2);
  ExecutionContext other(*plan);
  run(*plan, other, x, 1);
  EXPECT_EQ(counters.states_created, 4);
}

TEST(Partition, RegionsTheCostRuleTurnsDownStayOnOurKernels) {
  ir::Function f = sample_function();
  Counters counters;
  auto plan = build_plan(f, ops::KernelRegistry::cpu(), {std::make_shared<FakeBackend>(counters, 2, false)});
  EXPECT_EQ(counters.regions_compiled, 1);  // only mul, sub
  EXPECT_EQ(plan->body.steps.size(), 4u);
  EXPECT_EQ(plan->placements[0].backend, "reference");
  EXPECT_EQ(plan->placements[0].reason, "fake: too small");
  ExecutionContext context(*plan);
  std::vector<float> x = {1, 2, 3, -4};
  EXPECT_EQ(run(*plan, context, x, 1), expected_e(x));
}

TEST(Partition, AFailedCompilationFallsBackWithTheReason) {
  ir::Function f = sample_function();
  Counters counters;
  auto plan = build_plan(f, ops::KernelRegistry::cpu(), {std::make_shared<FakeBackend>(counters, 1, true)});
  EXPECT_EQ(plan->body.steps.size(), 5u);
  for (const Placement& p : plan->placements) EXPECT_EQ(p.backend, "reference");
  EXPECT_NE(plan->placements[0].reason.find("fake compiler refuses"), std::string::npos) << plan->placements[0].reason;
  ExecutionContext context(*plan);
  std::vector<float> x = {0, 0, 1, 1};
  EXPECT_EQ(run(*plan, context, x, 1), expected_e(x));
}

TEST(Partition, WithoutBackendsEveryOpIsOurs) {
  ir::Function f = sample_function();
  auto plan = build_plan(f, ops::KernelRegistry::cpu());
  EXPECT_EQ(plan->body.steps.size(), 5u);
  for (const Placement& p : plan->placements) EXPECT_EQ(p.backend, "reference");
}

}  // namespace
}  // namespace coremlrt::runtime
