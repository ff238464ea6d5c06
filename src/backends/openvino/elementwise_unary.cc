// Unary functions (our kernels: src/ops/elementwise_unary.cc), floating-point only but for
// logical_not.
#include <openvino/op/ops.hpp>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v0 = ov::op::v0;
namespace v1 = ov::op::v1;

}  // namespace

void add_elementwise_unary_lowerings(LoweringTable& t) {
  t["sqrt"] = unary<v0::Sqrt>();
  t["erf"] = unary<v0::Erf>();
  t["abs"] = unary<v0::Abs>();
  t["floor"] = unary<v0::Floor>();
  t["ceil"] = unary<v0::Ceiling>();
  t["sin"] = unary<v0::Sin>();
  t["cos"] = unary<v0::Cos>();
  t["square"] = unary_fn([](Lowerer&, const Value& x) { return mul(x, x); });
  t["exp2"] = unary_fn([](Lowerer&, const Value& x) -> Value {
    return std::make_shared<v1::Power>(Lowerer::scalar_like(x, 2.0), x);
  });
  // Ops that always add their epsilon (src/ops/elementwise_unary.cc).
  t["rsqrt"] = unary_fn([](Lowerer& op, const Value& x) -> Value {
    Value shifted = add(x, Lowerer::scalar_like(x, op.const_float("epsilon", 1e-12)));
    return std::make_shared<v1::Divide>(Lowerer::scalar_like(x, 1.0), std::make_shared<v0::Sqrt>(shifted));
  });
  t["inverse"] = unary_fn([](Lowerer& op, const Value& x) -> Value {
    Value shifted = add(x, Lowerer::scalar_like(x, op.const_float("epsilon", 1e-4)));
    return std::make_shared<v1::Divide>(Lowerer::scalar_like(x, 1.0), shifted);
  });
  t["log"] = unary_fn([](Lowerer& op, const Value& x) -> Value {
    // fp16 cannot hold the default 1e-45, which then adds nothing, as in our kernel.
    return std::make_shared<v0::Log>(add(x, Lowerer::scalar_like(x, op.const_float("epsilon", 1e-45))));
  });
  t["clip"] = {[](const OpReader& op) -> Verdict {
                 if (Verdict why = float_input(op); !why.claimed) return why;
                 if (!op.constant("alpha") || !op.constant("beta"))
                   return Verdict::refuse("alpha and beta are not known at load");
                 return Verdict::claim();
               },
               [](Lowerer& op) -> std::vector<Value> {
                 // Not Clamp: min(max(x, alpha), beta) keeps beta when alpha > beta (iOS15 allows it).
                 Value x = op.input("x");
                 Value lo = std::make_shared<v1::Maximum>(x, Lowerer::scalar_like(x, op.const_float("alpha")));
                 return {std::make_shared<v1::Minimum>(lo, Lowerer::scalar_like(x, op.const_float("beta")))};
               }};
  t["logical_not"] = {[](const OpReader& op) {
                        return op.type("x").dtype == DType::Bool ? Verdict::claim() : Verdict::refuse("x is not bool");
                      },
                      [](Lowerer& op) -> std::vector<Value> { return {std::make_shared<v1::LogicalNot>(op.input("x"))}; }};
}

}  // namespace coremlrt::backends::openvino
