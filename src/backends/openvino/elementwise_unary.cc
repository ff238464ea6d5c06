// Unary functions (our kernels: src/ops/elementwise_unary.cc), floating-point only but for
// logical_not, and sign and threshold, which take int32 too.
#include <openvino/op/ops.hpp>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v0 = ov::op::v0;
namespace v1 = ov::op::v1;

Verdict float_or_int32(const OpReader& op) {
  const DType d = op.type("x").dtype;
  if (fp16_or_fp32(d) || d == DType::Int32) return Verdict::claim();
  return Verdict::refuse("x is not fp16, fp32 or int32");
}

}  // namespace

void add_elementwise_unary_lowerings(LoweringTable& t) {
  t["sqrt"] = unary<v0::Sqrt>();
  t["erf"] = unary<v0::Erf>();
  t["abs"] = unary<v0::Abs>();
  t["floor"] = unary<v0::Floor>();
  t["ceil"] = unary<v0::Ceiling>();
  t["sin"] = unary<v0::Sin>();
  t["cos"] = unary<v0::Cos>();
  t["tan"] = unary<v0::Tan>();
  t["sinh"] = unary<v0::Sinh>();
  t["cosh"] = unary<v0::Cosh>();
  t["asin"] = unary<v0::Asin>();
  t["acos"] = unary<v0::Acos>();
  t["atan"] = unary<v0::Atan>();
  t["asinh"] = unary<ov::op::v3::Asinh>();
  t["acosh"] = unary<ov::op::v3::Acosh>();
  t["atanh"] = unary<ov::op::v3::Atanh>();
  // Halves to even, as NumPy and our kernel (nearbyint) round.
  t["round"] = unary_fn([](Lowerer&, const Value& x) -> Value {
    return std::make_shared<ov::op::v5::Round>(x, ov::op::v5::Round::RoundMode::HALF_TO_EVEN);
  });
  // 1, -1, or x itself (0, -0 and NaN stay as they are, as in our kernel).
  t["sign"] = {[](const OpReader& op) { return float_or_int32(op); },
               [](Lowerer& op) -> std::vector<Value> {
                 Value x = op.input("x");
                 Value zero = Lowerer::scalar_like(x, 0.0);
                 Value negative = std::make_shared<v1::Select>(std::make_shared<v1::Less>(x, zero),
                                                               Lowerer::scalar_like(x, -1.0), x);
                 return {std::make_shared<v1::Select>(std::make_shared<v1::Greater>(x, zero), Lowerer::scalar_like(x, 1.0),
                                                      negative)};
               }};
  // max(x, alpha) with x first, as std::max keeps a NaN x; alpha truncated for int32 x, as our
  // kernel converts it.
  t["threshold"] = {[](const OpReader& op) -> Verdict {
                      if (Verdict why = float_or_int32(op); !why.claimed) return why;
                      return op.constant("alpha") ? Verdict::claim() : Verdict::refuse("alpha is not known at load");
                    },
                    [](Lowerer& op) -> std::vector<Value> {
                      Value x = op.input("x");
                      double alpha = op.const_float("alpha");
                      if (x.get_element_type().is_integral()) alpha = static_cast<double>(static_cast<int32_t>(alpha));
                      Value a = Lowerer::scalar_like(x, alpha);
                      return {std::make_shared<v1::Select>(std::make_shared<v1::Less>(x, a), a, x)};
                    }};
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
