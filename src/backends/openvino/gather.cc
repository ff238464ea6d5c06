// gather (our kernel: src/ops/gather.cc).
#include <openvino/op/ops.hpp>

#include <limits>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v1 = ov::op::v1;

}  // namespace

void add_gather_lowerings(LoweringTable& t) {
  // OpenVINO's Gather yields zeros for an index outside [-D, D) where our kernel fails the
  // prediction (src/ops/gather.cc); inside it both wrap negative indices. Indices known at load
  // were checked when the op was folded, or are checked here; indices computed at run time (token
  // ids of an embedding) are checked by the region: a guard (Lowerer::require) sends a run with an
  // index out of range to our kernels, which report it. With validate_indices (iOS17+), negative
  // indices fail on our kernels too, which the guard does not say: such gathers stay ours.
  t["gather"] = {[](const OpReader& op) -> Verdict {
                   if (op.const_int("batch_dims", 0) != 0) return Verdict::refuse("batch_dims");
                   if (op.const_bool("validate_indices", false)) return Verdict::refuse("validate_indices");
                   const ir::ValueType& x = op.type("x");
                   const int64_t axis = normalized_axis(op.const_int("axis", 0), x.rank);
                   if (axis < 0 || axis >= x.rank) return Verdict::refuse("axis out of range");
                   if (!op.constant("indices")) {
                     const DType d = op.type("indices").dtype;
                     if (d != DType::Int32 && d != DType::Int16 && d != DType::UInt16 && d != DType::Int8 && d != DType::UInt8)
                       return Verdict::refuse("indices of dtype " + std::string(dtype_name(d)));
                     return Verdict::claim();
                   }
                   for (int64_t i : op.const_ints("indices"))
                     if (i < -x.dims[axis] || i >= x.dims[axis]) return Verdict::refuse("an index is out of range");
                   return Verdict::claim();
                 },
                 [](Lowerer& op) -> std::vector<Value> {
                   const ir::ValueType& x = op.type("x");
                   const int64_t axis = normalized_axis(op.const_int("axis", 0), x.rank);
                   Value indices = op.input("indices");
                   if (!op.constant("indices")) {
                     if (indices.get_element_type() != ov::element::i32 && indices.get_element_type() != ov::element::i64)
                       indices = std::make_shared<ov::op::v0::Convert>(indices, ov::element::i32);
                     const int64_t size = x.dims[axis];
                     auto bound = [&](int64_t v) {
                       return Lowerer::constant_of(indices.get_element_type(), {}, {static_cast<double>(v)});
                     };
                     Value in_range = std::make_shared<ov::op::v1::LogicalAnd>(
                         std::make_shared<v1::GreaterEqual>(indices, bound(-size)), std::make_shared<v1::Less>(indices, bound(size)));
                     Value flat = std::make_shared<v1::Reshape>(in_range, Lowerer::i64s({-1}), false);
                     op.require(std::make_shared<v1::ReduceLogicalAnd>(flat, Lowerer::i64(0), false));
                   }
                   // An fp16 table (an embedding) is gathered in fp16 and only the rows taken are
                   // widened: the table is not copied to fp32 in the compiled model.
                   Value table = op.stored("x");
                   Value rows = std::make_shared<ov::op::v8::Gather>(table, indices, Lowerer::i64(axis), 0);
                   if (rows.get_element_type() != op.compute_type(x.dtype))
                     rows = std::make_shared<ov::op::v0::Convert>(rows, op.compute_type(x.dtype));
                   return {rows};
                 }};
}

}  // namespace coremlrt::backends::openvino
