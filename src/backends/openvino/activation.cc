// Activations (our kernels: src/ops/activation.cc), floating-point only.
#include <openvino/op/ops.hpp>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v0 = ov::op::v0;
namespace v1 = ov::op::v1;

}  // namespace

void add_activation_lowerings(LoweringTable& t) {
  t["exp"] = unary<v0::Exp>();
  t["tanh"] = unary<v0::Tanh>();
  t["sigmoid"] = unary<v0::Sigmoid>();
  t["relu"] = unary<v0::Relu>();
  t["silu"] = unary<ov::op::v4::Swish>();
  t["softsign"] = unary<ov::op::v9::SoftSign>();
  t["relu6"] = unary_fn([](Lowerer&, const Value& x) -> Value { return std::make_shared<v0::Clamp>(x, 0.0, 6.0); });
  t["leaky_relu"] = unary_fn([](Lowerer& op, const Value& x) -> Value {
    // x >= 0 ? x : alpha * x
    Value zero = Lowerer::scalar_like(x, 0.0);
    Value scaled = mul(x, Lowerer::scalar_like(x, op.const_float("alpha")));
    return std::make_shared<v1::Select>(std::make_shared<v1::GreaterEqual>(x, zero), x, scaled);
  });
  t["elu"] = unary_fn([](Lowerer& op, const Value& x) -> Value {
    return std::make_shared<v0::Elu>(x, op.const_float("alpha"));
  });
  t["linear_activation"] = unary_fn([](Lowerer& op, const Value& x) -> Value {
    return add(mul(x, Lowerer::scalar_like(x, op.const_float("alpha"))), Lowerer::scalar_like(x, op.const_float("beta")));
  });
  t["gelu"] = {[](const OpReader& op) -> Verdict {
                 if (Verdict why = float_input(op); !why.claimed) return why;
                 const std::string mode = op.const_string("mode", "EXACT");
                 if (mode != "EXACT" && mode != "TANH_APPROXIMATION" && mode != "SIGMOID_APPROXIMATION")
                   return Verdict::refuse("mode " + mode);
                 return Verdict::claim();
               },
               [](Lowerer& op) -> std::vector<Value> {
                 Value x = op.input("x");
                 const std::string mode = op.const_string("mode", "EXACT");
                 if (mode == "SIGMOID_APPROXIMATION")
                   return {mul(x, std::make_shared<v0::Sigmoid>(mul(x, Lowerer::scalar_like(x, 1.702))))};
                 return {std::make_shared<ov::op::v7::Gelu>(
                     x, mode == "EXACT" ? ov::op::GeluApproximationMode::ERF : ov::op::GeluApproximationMode::TANH)};
               }};
  t["softmax"] = {[](const OpReader& op) { return float_input(op); },
                  [](Lowerer& op) -> std::vector<Value> {
                    return {std::make_shared<ov::op::v8::Softmax>(op.input("x"), op.const_int("axis", -1))};
                  }};
}

}  // namespace coremlrt::backends::openvino
