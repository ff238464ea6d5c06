// The neuralNetwork translator: a NeuralNetwork message (the Model's field 500) translated
// into a program for a fixed description (x: float32 [1, 16] -> y), then validated and planned.
#include <cstdint>

#include "coremlrt/description.h"
#include "format/neural_network/reader.h"
#include "fuzz_util.h"
#include "ir/program.h"
#include "ops/kernel.h"
#include "runtime/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace coremlrt;
  static const FunctionDescription description = [] {
    FunctionDescription d;
    d.name = "main";
    FeatureDescription x;
    x.name = "x";
    x.shape = {1, 16};
    FeatureDescription y;
    y.name = "y";
    d.inputs.push_back(x);
    d.outputs.push_back(y);
    return d;
  }();
  fuzz::expect_only_errors([&] {
    format::NeuralNetworkReading reading =
        format::read_neural_network(std::string(reinterpret_cast<const char*>(data), size), description);
    auto main = reading.program.functions.find("main");
    if (!reading.problem.empty() || main == reading.program.functions.end()) return;
    ir::validate_function(main->second);
    runtime::build_plan(main->second, ops::KernelRegistry::cpu());
  });
  return 0;
}
