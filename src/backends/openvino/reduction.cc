// Reductions over constant axes (our kernels: src/ops/reduction.cc), floating point only: our
// kernel accumulates in double and rounds once, which OpenVINO's fp32 accumulation matches
// within fp32 rounding; integer reductions keep our kernel's wrap-around rules.
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

}  // namespace

void add_reduction_lowerings(LoweringTable& t) {
  t["reduce_mean"] = reduce<ov::op::v1::ReduceMean>();
  t["reduce_sum"] = reduce<ov::op::v1::ReduceSum>();
  t["reduce_max"] = reduce<ov::op::v1::ReduceMax>();
  t["reduce_min"] = reduce<ov::op::v1::ReduceMin>();
  t["reduce_prod"] = reduce<ov::op::v1::ReduceProd>();
  t["reduce_l2_norm"] = reduce<ov::op::v4::ReduceL2>();
  t["reduce_l1_norm"] = reduce<ov::op::v4::ReduceL1>();
}

}  // namespace coremlrt::backends::openvino
