// Reductions over constant axes (our kernels: src/ops/reduction.cc), floating point only but for
// int32 max and min: our kernel accumulates in double and rounds once, which OpenVINO's fp32
// accumulation matches within fp32 rounding; integer sums keep our kernel's rules.
#include <openvino/op/ops.hpp>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

std::vector<int64_t> axes_of(const OpReader& op) {
  const int64_t rank = op.type("x").rank;
  std::vector<int64_t> axes;
  if (op.constant("axes")) {
    axes = op.const_ints("axes");
    for (int64_t& a : axes) a = a < 0 ? a + rank : a;
  } else {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  return axes;
}

Verdict check(const OpReader& op) {
  const DType d = op.type("x").dtype;
  if (d != DType::Float16 && d != DType::Float32) return Verdict::refuse("x is not fp16 or fp32");
  if (op.count("axes") && !op.constant("axes")) return Verdict::refuse("axes are not known at load");
  return Verdict::claim();
}

template <class OvOp>
OpLowering reduce() {
  return {check, [](Lowerer& op) -> std::vector<Value> {
            return {std::make_shared<OvOp>(op.input("x"), Lowerer::i64s(axes_of(op)), op.const_bool("keep_dims", false))};
          }};
}

// reduce_max and reduce_min also on int32 (torch.any and torch.all become a cast to int32 and one
// of these). The CPU plugin reduces int32 values in fp32, which rounds those above 2^24, so each
// value is split into x >> 12 and its low 12 bits, both exact in fp32: the extreme of the high parts,
// then the extreme of the low parts among the values sharing it.
template <class OvOp>
OpLowering extreme(bool max) {
  return {[](const OpReader& op) -> Verdict {
            if (op.type("x").dtype != DType::Int32) return check(op);
            if (op.count("axes") && !op.constant("axes")) return Verdict::refuse("axes are not known at load");
            return Verdict::claim();
          },
          [max](Lowerer& op) -> std::vector<Value> {
            Value x = op.input("x");
            const bool keep = op.const_bool("keep_dims", false);
            Value axes = Lowerer::i64s(axes_of(op));
            if (x.get_element_type() != ov::element::i32) return {std::make_shared<OvOp>(x, axes, keep)};
            Value high = std::make_shared<ov::op::v15::BitwiseRightShift>(x, Lowerer::scalar_like(x, 12));
            Value low = std::make_shared<ov::op::v13::BitwiseAnd>(x, Lowerer::scalar_like(x, 4095));
            Value top = std::make_shared<OvOp>(high, axes, true);
            Value others = Lowerer::scalar_like(x, max ? -1 : 4096);  // below or above every low part
            Value lows = std::make_shared<ov::op::v1::Select>(std::make_shared<ov::op::v1::Equal>(high, top), low, others);
            Value y = std::make_shared<ov::op::v1::Add>(
                std::make_shared<ov::op::v1::Multiply>(top, Lowerer::scalar_like(x, 4096)),
                std::make_shared<OvOp>(lows, axes, true));
            return {keep ? y : Value(std::make_shared<ov::op::v0::Squeeze>(y, Lowerer::i64s(axes_of(op))))};
          }};
}

// A reduction computed with its reduced dims kept, those dropped unless keep_dims (by axis, not
// to the declared dims: these lowerings read ranks only, lowering.cc).
Value declared(Lowerer& op, const Value& kept, const std::vector<int64_t>& axes) {
  if (op.const_bool("keep_dims", false)) return kept;
  return std::make_shared<ov::op::v0::Squeeze>(kept, Lowerer::i64s(axes));
}
Value declared(Lowerer& op, const Value& kept) { return declared(op, kept, axes_of(op)); }

Value sum_kept(Lowerer& op, const Value& v) {
  return std::make_shared<ov::op::v1::ReduceSum>(v, Lowerer::i64s(axes_of(op)), true);
}

// argmax / argmin over one axis: the first index of the extreme value (OpenVINO's stable TopK of
// one), with the region's check that x holds no NaN (our kernel takes the first NaN; TopK does not
// say where NaN goes).
OpLowering arg_reduce(bool max) {
  return {[](const OpReader& op) -> Verdict {
            if (!fp16_or_fp32(op.type("x").dtype)) return Verdict::refuse("x is not fp16 or fp32");
            const int64_t rank = op.type("x").rank, axis = op.const_int("axis", -1);
            if (axis < -rank || axis >= rank) return Verdict::refuse("axis out of range");
            return Verdict::claim();
          },
          [max](Lowerer& op) -> std::vector<Value> {
            Value x = op.input("x");
            const int64_t rank = op.type("x").rank;
            int64_t axis = op.const_int("axis", -1);
            if (axis < 0) axis += rank;
            Value nan = std::make_shared<ov::op::v10::IsNaN>(x);
            Value flat = std::make_shared<ov::op::v1::Reshape>(nan, Lowerer::i64s({-1}), false);
            op.require(std::make_shared<ov::op::v1::LogicalNot>(
                std::make_shared<ov::op::v1::ReduceLogicalOr>(flat, Lowerer::i64(0), false)));
            auto top = std::make_shared<ov::op::v11::TopK>(x, Lowerer::i64(1), axis,
                                                            max ? ov::op::TopKMode::MAX : ov::op::TopKMode::MIN,
                                                            ov::op::TopKSortType::SORT_VALUES, ov::element::i32, true);
            // int32, or uint16 where output_dtype (iOS17) asks for it.
            return {converted(declared(op, top->output(1), {axis}), op.compute_type(op.output_type(0).dtype))};
          }};
}

}  // namespace

void add_reduction_lowerings(LoweringTable& t) {
  t["reduce_sum_square"] = {check, [](Lowerer& op) -> std::vector<Value> {
                              Value x = op.input("x");
                              return {declared(op, sum_kept(op, std::make_shared<ov::op::v1::Multiply>(x, x)))};
                            }};
  t["reduce_log_sum"] = {check, [](Lowerer& op) -> std::vector<Value> {
                           return {declared(op, std::make_shared<ov::op::v0::Log>(sum_kept(op, op.input("x"))))};
                         }};
  // max + log(sum(exp(x - max))), the shift 0 where the max is not finite (our kernel's rule).
  t["reduce_log_sum_exp"] = {check, [](Lowerer& op) -> std::vector<Value> {
                               Value x = op.input("x");
                               Value max = std::make_shared<ov::op::v1::ReduceMax>(x, Lowerer::i64s(axes_of(op)), true);
                               Value shift = std::make_shared<ov::op::v1::Select>(
                                   std::make_shared<ov::op::v10::IsFinite>(max), max, Lowerer::scalar_like(x, 0.0));
                               Value sum = sum_kept(op, std::make_shared<ov::op::v0::Exp>(
                                                            std::make_shared<ov::op::v1::Subtract>(x, shift)));
                               return {declared(op, std::make_shared<ov::op::v1::Add>(
                                                        shift, std::make_shared<ov::op::v0::Log>(sum)))};
                             }};
  t["reduce_argmax"] = arg_reduce(true);
  t["reduce_argmin"] = arg_reduce(false);
  t["reduce_mean"] = reduce<ov::op::v1::ReduceMean>();
  t["reduce_sum"] = reduce<ov::op::v1::ReduceSum>();
  t["reduce_max"] = extreme<ov::op::v1::ReduceMax>(true);
  t["reduce_min"] = extreme<ov::op::v1::ReduceMin>(false);
  t["reduce_prod"] = reduce<ov::op::v1::ReduceProd>();
  t["reduce_l2_norm"] = reduce<ov::op::v4::ReduceL2>();
  t["reduce_l1_norm"] = reduce<ov::op::v4::ReduceL1>();
}

}  // namespace coremlrt::backends::openvino
