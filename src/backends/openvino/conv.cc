// Convolution (our kernel: src/ops/conv.cc). Padding is resolved from the input's spatial dims
// with the rules of our kernels (resolve_pads, lowering.cc), so OpenVINO gets explicit pads.
#include <openvino/op/ops.hpp>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v1 = ov::op::v1;

// Conv parameters; the weight must be known at load (it is reshaped for groups).
Verdict conv_window(const OpReader& op, Window& w) {
  const ir::ValueType& x = op.type("x");
  const ir::ConstValue* weight = op.constant("weight");
  if (!weight) return Verdict::refuse("weight is not known at load");
  if (x.rank < 3 || x.rank > 5) return Verdict::refuse("x has rank " + std::to_string(x.rank));
  const size_t n = static_cast<size_t>(x.rank - 2);
  w.kernel.assign(weight->tensor.shape.begin() + 2, weight->tensor.shape.end());
  w.strides = op.const_ints("strides", std::vector<int64_t>(n, 1));
  w.dilations = op.const_ints("dilations", std::vector<int64_t>(n, 1));
  if (w.kernel.size() != n || w.strides.size() != n || w.dilations.size() != n)
    return Verdict::refuse("window ranks differ");
  return resolve_pads(op, spatial(x), w);
}

Value conv(Lowerer& op) {
  Window w;
  conv_window(op, w);
  Value x = op.input("x");
  Value weight = op.input("weight");
  const int64_t groups = op.const_int("groups", 1);
  const ov::Strides strides(w.strides.begin(), w.strides.end()), dilations(w.dilations.begin(), w.dilations.end());
  const ov::CoordinateDiff begin(w.pad_begin.begin(), w.pad_begin.end()), end(w.pad_end.begin(), w.pad_end.end());
  Value y;
  if (groups == 1) {
    y = std::make_shared<v1::Convolution>(x, weight, strides, begin, end, dilations);
  } else {
    // [C_out, C_in / g, *k] -> [g, C_out / g, C_in / g, *k]
    std::vector<int64_t> shape = op.constant("weight")->tensor.shape;
    std::vector<int64_t> grouped = {groups, shape[0] / groups};
    grouped.insert(grouped.end(), shape.begin() + 1, shape.end());
    Value reshaped = std::make_shared<v1::Reshape>(weight, Lowerer::i64s(grouped), false);
    y = std::make_shared<v1::GroupConvolution>(x, reshaped, strides, begin, end, dilations);
  }
  if (op.count("bias")) {
    std::vector<int64_t> bias_shape(static_cast<size_t>(op.type("x").rank), 1);
    bias_shape[1] = -1;
    y = std::make_shared<v1::Add>(y, std::make_shared<v1::Reshape>(op.input("bias"), Lowerer::i64s(bias_shape), false));
  }
  return y;
}

}  // namespace

void add_conv_lowerings(LoweringTable& t) {
  t["conv"] = {[](const OpReader& op) -> Verdict {
                 Verdict why = same_float_dtype(op, {"weight", "bias"});
                 if (!why.claimed) return why;
                 Window w;
                 return conv_window(op, w);
               },
               [](Lowerer& op) -> std::vector<Value> { return {conv(op)}; }};
  // OpenVINO's convolutions take no compressed weights: a packed weight is decoded for them.
  t["conv"].packed = PackedInputs::kDecoded;
  t["conv"].decoded_because = "its convolutions take no compressed weights";
}

}  // namespace coremlrt::backends::openvino
