// Activations (our kernels: src/ops/activation.cc), floating-point only; semantics from
// docs/design/coreml-format.md, "Activations". Those with parameters are written with the
// comparisons and selects of their definition rather than OpenVINO's nearest named op where the
// two part at an edge: PRelu and HardSigmoid take x >= 0 and clamp in another order, which differs
// from Core ML's at -0 and NaN. Scalar parameters are read as our kernels read them (doubles,
// rounded to the element type the region computes in); per-channel ones are constants of the
// region, converted to that type.
#include <openvino/op/ops.hpp>

#include <initializer_list>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v0 = ov::op::v0;
namespace v1 = ov::op::v1;

Value scalar(Lowerer& op, const Value& like, const char* param) {
  return Lowerer::scalar_like(like, op.const_float(param));
}

// x with a function of (x, alpha, beta) applied; alpha and beta scalars known at load.
OpLowering with_params(std::initializer_list<const char*> params, std::function<Value(Lowerer&, const Value&)> fn) {
  std::vector<const char*> names(params);
  return {[names](const OpReader& op) -> Verdict {
            if (Verdict why = float_input(op); !why.claimed) return why;
            for (const char* p : names)
              if (!op.constant(p)) return Verdict::refuse(std::string(p) + " is not known at load");
            return Verdict::claim();
          },
          [fn](Lowerer& op) -> std::vector<Value> { return {fn(op, op.input("x"))}; }};
}

// prelu and softplus_parametric: per-channel vectors along axis 1 of x, as our kernel reads them
// (its checks: rank 1, one value per channel, the ranks the op allows).
Verdict channel_params(const OpReader& op, std::initializer_list<const char*> params, int64_t min_rank,
                       int64_t max_rank) {
  if (Verdict why = float_input(op); !why.claimed) return why;
  const ir::ValueType& x = op.type("x");
  if (x.rank < min_rank || x.rank > max_rank) return Verdict::refuse("x has rank " + std::to_string(x.rank));
  for (const char* p : params) {
    if (!op.constant(p)) return Verdict::refuse(std::string(p) + " is not known at load");
    const ir::ValueType& t = op.type(p);
    if (!fp16_or_fp32(t.dtype)) return Verdict::refuse(std::string(p) + " is not fp16 or fp32");
    if (t.rank != 1 || t.dims[0] != x.dims[1])
      return Verdict::refuse(std::string(p) + " does not hold one value per channel of x");
  }
  return Verdict::claim();
}

// A per-channel constant as [C, 1, ...] broadcasting over x's axis 1, in x's element type.
Value per_channel(Lowerer& op, const char* param, const Value& x) {
  std::vector<int64_t> shape(static_cast<size_t>(op.type("x").rank - 1), 1);
  shape[0] = -1;
  Value v = converted(op.input(param), x.get_element_type());
  return std::make_shared<v1::Reshape>(v, Lowerer::i64s(shape), false);
}

// log(1 + e^v) as our kernel computes it, max(v, 0) + log1p(e^-|v|), without overflow for large v
// or the loss of e^v for very negative v. OpenVINO has no log1p, and its SoftPlus is not exact
// there (its CPU plugin gives -1.9e-6 for softplus(-17.7) = 2.1e-8), so log1p(t) is written as
// log(u) * t / (u - 1) with u = 1 + t (t itself where u rounds to 1), within a few units in the
// last place (Goldberg, "What every computer scientist should know about floating-point
// arithmetic", theorem 4). u is max(t + 1, 1), the same value (t >= 0, NaN kept), so that the
// plugin's SoftPlus fusion does not find log(e^x + 1) in it and put its SoftPlus back.
Value softplus(const Value& v) {
  Value t = std::make_shared<v0::Exp>(std::make_shared<v0::Negative>(std::make_shared<v0::Abs>(v)));
  Value u = std::make_shared<v1::Maximum>(std::make_shared<v1::Add>(t, Lowerer::scalar_like(v, 1.0)),
                                          Lowerer::scalar_like(v, 1.0));
  Value d = std::make_shared<v1::Subtract>(u, Lowerer::scalar_like(v, 1.0));
  Value ratio = std::make_shared<v1::Divide>(mul(std::make_shared<v0::Log>(u), t), d);
  Value log1p = std::make_shared<v1::Select>(std::make_shared<v1::Equal>(d, Lowerer::scalar_like(v, 0.0)), t, ratio);
  return std::make_shared<v1::Add>(std::make_shared<v1::Maximum>(v, Lowerer::scalar_like(v, 0.0)), log1p);
}

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
  // min(max(alpha * x + beta, 0), 1); coremltools writes hardsigmoid, and hardswish as
  // thresholded_relu(x, -3) * sigmoid_hard(that, 1/6, 1/2) (MobileNetV3, LeViT, GhostNet).
  t["sigmoid_hard"] = with_params({"alpha", "beta"}, [](Lowerer& op, const Value& x) -> Value {
    Value y = std::make_shared<v1::Add>(mul(x, scalar(op, x, "alpha")), scalar(op, x, "beta"));
    y = std::make_shared<v1::Maximum>(y, Lowerer::scalar_like(x, 0.0));
    return std::make_shared<v1::Minimum>(y, Lowerer::scalar_like(x, 1.0));
  });
  // x >= alpha ? x : 0 (NaN gives 0, as in our kernel).
  t["thresholded_relu"] = with_params({"alpha"}, [](Lowerer& op, const Value& x) -> Value {
    return std::make_shared<v1::Select>(std::make_shared<v1::GreaterEqual>(x, scalar(op, x, "alpha")), x,
                                        Lowerer::scalar_like(x, 0.0));
  });
  // alpha * tanh(beta * x)
  t["scaled_tanh"] = with_params({"alpha", "beta"}, [](Lowerer& op, const Value& x) -> Value {
    return mul(scalar(op, x, "alpha"), std::make_shared<v0::Tanh>(mul(x, scalar(op, x, "beta"))));
  });
  // min(x >= 0 ? x : alpha * x, beta)
  t["clamped_relu"] = with_params({"alpha", "beta"}, [](Lowerer& op, const Value& x) -> Value {
    Value leaky = std::make_shared<v1::Select>(std::make_shared<v1::GreaterEqual>(x, Lowerer::scalar_like(x, 0.0)), x,
                                               mul(x, scalar(op, x, "alpha")));
    return std::make_shared<v1::Minimum>(leaky, scalar(op, x, "beta"));
  });
  t["softplus"] = with_params({}, [](Lowerer&, const Value& x) { return softplus(x); });
  // x > 0 ? x : alpha[c] * x. Ranks 3 and 5 take one slope for every channel (the op's rule,
  // which our kernel checks at load: such a program does not load).
  t["prelu"] = {[](const OpReader& op) { return channel_params(op, {"alpha"}, 3, 5); },
                [](Lowerer& op) -> std::vector<Value> {
                  Value x = op.input("x");
                  Value positive = std::make_shared<v1::Greater>(x, Lowerer::scalar_like(x, 0.0));
                  return {std::make_shared<v1::Select>(positive, x, mul(x, per_channel(op, "alpha", x)))};
                }};
  // alpha[c] * log(1 + e^(beta[c] * x))
  t["softplus_parametric"] = {[](const OpReader& op) { return channel_params(op, {"alpha", "beta"}, 3, 1 << 20); },
                              [](Lowerer& op) -> std::vector<Value> {
                                Value x = op.input("x");
                                Value scaled = mul(x, per_channel(op, "beta", x));
                                return {mul(per_channel(op, "alpha", x), softplus(scaled))};
                              }};
}

}  // namespace coremlrt::backends::openvino
