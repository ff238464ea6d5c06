// Normalizations (our kernels: src/ops/normalization.cc): batch_norm, layer_norm over trailing
// axes, instance_norm. Statistics are the biased variance with epsilon inside the square root,
// as in our kernels.
#include <openvino/op/ops.hpp>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v1 = ov::op::v1;


Verdict float_io(const OpReader& op, std::initializer_list<const char*> constants) {
  if (!fp16_or_fp32(op.type("x").dtype)) return Verdict::refuse("x is not fp16 or fp32");
  for (const char* p : constants) {
    if (!op.count(p)) continue;
    if (!op.constant(p)) return Verdict::refuse(std::string(p) + " is not known at load");
    if (op.type(p).dtype != op.type("x").dtype)
      return Verdict::refuse(std::string(p) + " and x have different dtypes");
  }
  return Verdict::claim();
}

// A per-channel [C] value shaped to broadcast over [n, C, *D] of rank `rank`.
Value per_channel(const Value& v, int64_t rank) {
  std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
  shape[1] = -1;
  return std::make_shared<v1::Reshape>(v, Lowerer::i64s(shape), false);
}

Value mvn(const Value& x, const std::vector<int64_t>& axes, double eps) {
  return std::make_shared<ov::op::v6::MVN>(x, Lowerer::i64s(axes), true, static_cast<float>(eps),
                                            ov::op::MVNEpsMode::INSIDE_SQRT);
}

// The axes of layer_norm, normalized, when they are the trailing dims in order; else empty.
std::vector<int64_t> trailing_axes(const OpReader& op) {
  const int64_t rank = op.type("x").rank;
  if (!op.constant("axes")) return {};
  std::vector<int64_t> axes = op.const_ints("axes");
  for (int64_t& a : axes) a = a < 0 ? a + rank : a;
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != rank - static_cast<int64_t>(axes.size() - i)) return {};
  return axes;
}

}  // namespace

void add_normalization_lowerings(LoweringTable& t) {
  // x / sqrt(sum of squares over the last three dims + epsilon), as our kernel.
  t["l2_norm"] = {[](const OpReader& op) -> Verdict {
                    if (op.type("x").rank < 3) return Verdict::refuse("x has rank < 3");
                    return float_io(op, {});
                  },
                  [](Lowerer& op) -> std::vector<Value> {
                    Value x = op.input("x");
                    const int64_t rank = op.type("x").rank;
                    Value squares = std::make_shared<v1::ReduceSum>(std::make_shared<v1::Multiply>(x, x),
                                                                   Lowerer::i64s({rank - 3, rank - 2, rank - 1}), true);
                    Value eps = Lowerer::scalar_like(x, static_cast<float>(op.const_float("epsilon", 1e-6)));
                    Value norm = std::make_shared<ov::op::v0::Sqrt>(std::make_shared<v1::Add>(squares, eps));
                    Value inverse = std::make_shared<v1::Divide>(Lowerer::scalar_like(x, 1.0), norm);
                    return {std::make_shared<v1::Multiply>(x, inverse)};
                  }};
  t["batch_norm"] = {[](const OpReader& op) -> Verdict {
                       if (op.type("x").rank < 2) return Verdict::refuse("x has rank < 2");
                       return float_io(op, {"mean", "variance", "gamma", "beta"});
                     },
                     [](Lowerer& op) -> std::vector<Value> {
                       Value x = op.input("x");
                       const int64_t channels = op.type("x").dims[1];
                       auto param = [&](const char* name, double fallback) {
                         return op.count(name) ? op.input(name)
                                               : Lowerer::constant_of(x.get_element_type(), {channels},
                                                                      std::vector<double>(channels, fallback));
                       };
                       return {std::make_shared<ov::op::v5::BatchNormInference>(
                           x, param("gamma", 1.0), param("beta", 0.0), op.input("mean"), op.input("variance"),
                           op.const_float("epsilon", 1e-5))};
                     }};
  t["layer_norm"] = {[](const OpReader& op) -> Verdict {
                       Verdict why = float_io(op, {"gamma", "beta"});
                       if (!why.claimed) return why;
                       if (trailing_axes(op).empty())
                         return Verdict::refuse("axes are not the trailing dims in order");
                       return Verdict::claim();
                     },
                     [](Lowerer& op) -> std::vector<Value> {
                       Value y = mvn(op.input("x"), trailing_axes(op), op.const_float("epsilon", 1e-5));
                       if (op.count("gamma")) y = std::make_shared<v1::Multiply>(y, op.input("gamma"));
                       if (op.count("beta")) y = std::make_shared<v1::Add>(y, op.input("beta"));
                       return {y};
                     }};
  t["instance_norm"] = {[](const OpReader& op) -> Verdict {
                          if (op.type("x").rank < 3) return Verdict::refuse("x has rank < 3");
                          return float_io(op, {"gamma", "beta"});
                        },
                        [](Lowerer& op) -> std::vector<Value> {
                          const int64_t rank = op.type("x").rank;
                          std::vector<int64_t> axes;
                          for (int64_t a = 2; a < rank; ++a) axes.push_back(a);
                          Value y = mvn(op.input("x"), axes, op.const_float("epsilon", 1e-5));
                          if (op.count("gamma")) y = std::make_shared<v1::Multiply>(y, per_channel(op.input("gamma"), rank));
                          if (op.count("beta")) y = std::make_shared<v1::Add>(y, per_channel(op.input("beta"), rank));
                          return {y};
                        }};
}

}  // namespace coremlrt::backends::openvino
