// Elementwise ops: binary arithmetic and comparisons with numpy broadcasting, unary functions
// and activations (our kernels: src/ops/elementwise_binary.cc, elementwise_unary.cc,
// activation.cc). Floating-point only unless the integer semantics are plainly the same (add,
// sub, mul, maximum, minimum and comparisons on int32; the divisions differ at the edges).
#include <openvino/op/ops.hpp>

#include <cmath>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v0 = ov::op::v0;
namespace v1 = ov::op::v1;


template <class OvOp>
OpLowering binary(bool ints_too) {
  return {[ints_too](const OpReader& op) -> Verdict {
            const DType x = op.type("x").dtype, y = op.type("y").dtype;
            if (x != y) return Verdict::refuse("x and y have different dtypes");
            if (!fp16_or_fp32(x) && !(ints_too && x == DType::Int32))
              return Verdict::refuse("dtype " + std::string(dtype_name(x)));
            return Verdict::claim();
          },
          [](Lowerer& op) -> std::vector<Value> { return {std::make_shared<OvOp>(op.input("x"), op.input("y"))}; }};
}

template <class OvOp>
OpLowering unary() {
  return {[](const OpReader& op) { return float_input(op); },
          [](Lowerer& op) -> std::vector<Value> { return {std::make_shared<OvOp>(op.input("x"))}; }};
}

// A unary op written as a function of the lowered x.
OpLowering unary_fn(std::function<Value(Lowerer&, const Value&)> fn) {
  return {[](const OpReader& op) { return float_input(op); },
          [fn](Lowerer& op) -> std::vector<Value> { return {fn(op, op.input("x"))}; }};
}

Verdict float_or_int32(const OpReader& op) {
  const DType d = op.type("x").dtype;
  if (fp16_or_fp32(d) || d == DType::Int32) return Verdict::claim();
  return Verdict::refuse("x is not fp16, fp32 or int32");
}

template <class OvOp>
OpLowering logical() {
  return {[](const OpReader& op) -> Verdict {
            if (op.type("x").dtype != DType::Bool || op.type("y").dtype != DType::Bool)
              return Verdict::refuse("x or y is not bool");
            return Verdict::claim();
          },
          [](Lowerer& op) -> std::vector<Value> { return {std::make_shared<OvOp>(op.input("x"), op.input("y"))}; }};
}

Value add(const Value& a, const Value& b) { return std::make_shared<v1::Add>(a, b); }
Value mul(const Value& a, const Value& b) { return std::make_shared<v1::Multiply>(a, b); }

}  // namespace

void add_elementwise_lowerings(LoweringTable& t) {
  t["add"] = binary<v1::Add>(true);
  t["sub"] = binary<v1::Subtract>(true);
  t["mul"] = binary<v1::Multiply>(true);
  t["maximum"] = binary<v1::Maximum>(true);
  t["minimum"] = binary<v1::Minimum>(true);
  t["real_div"] = binary<v1::Divide>(false);
  t["pow"] = binary<v1::Power>(false);
  t["equal"] = binary<v1::Equal>(true);
  t["not_equal"] = binary<v1::NotEqual>(true);
  t["less"] = binary<v1::Less>(true);
  t["less_equal"] = binary<v1::LessEqual>(true);
  t["greater"] = binary<v1::Greater>(true);
  t["greater_equal"] = binary<v1::GreaterEqual>(true);
  t["floor_div"] = {binary<v1::Divide>(false).check, [](Lowerer& op) -> std::vector<Value> {
                      return {std::make_shared<v0::Floor>(std::make_shared<v1::Divide>(op.input("x"), op.input("y")))};
                    }};
  t["mod"] = binary<v1::FloorMod>(false);

  t["sqrt"] = unary<v0::Sqrt>();
  t["exp"] = unary<v0::Exp>();
  t["erf"] = unary<v0::Erf>();
  t["tanh"] = unary<v0::Tanh>();
  t["sigmoid"] = unary<v0::Sigmoid>();
  t["relu"] = unary<v0::Relu>();
  t["abs"] = unary<v0::Abs>();
  t["floor"] = unary<v0::Floor>();
  t["ceil"] = unary<v0::Ceiling>();
  t["sin"] = unary<v0::Sin>();
  t["cos"] = unary<v0::Cos>();
  t["silu"] = unary<ov::op::v4::Swish>();
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
  t["softsign"] = unary<ov::op::v9::SoftSign>();
  t["square"] = unary_fn([](Lowerer&, const Value& x) { return mul(x, x); });
  t["relu6"] = unary_fn([](Lowerer&, const Value& x) -> Value { return std::make_shared<v0::Clamp>(x, 0.0, 6.0); });
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
  t["select"] = {[](const OpReader& op) -> Verdict {
                   if (op.type("cond").dtype != DType::Bool) return Verdict::refuse("cond is not bool");
                   if (op.type("a").dtype != op.type("b").dtype)
                     return Verdict::refuse("a and b have different dtypes");
                   return Verdict::claim();
                 },
                 [](Lowerer& op) -> std::vector<Value> {
                   return {std::make_shared<v1::Select>(op.input("cond"), op.input("a"), op.input("b"))};
                 }};
  t["logical_and"] = logical<v1::LogicalAnd>();
  t["logical_or"] = logical<v1::LogicalOr>();
  t["logical_xor"] = logical<v1::LogicalXor>();
  t["logical_not"] = {[](const OpReader& op) {
                        return op.type("x").dtype == DType::Bool ? Verdict::claim() : Verdict::refuse("x is not bool");
                      },
                      [](Lowerer& op) -> std::vector<Value> { return {std::make_shared<v1::LogicalNot>(op.input("x"))}; }};
}

}  // namespace coremlrt::backends::openvino
