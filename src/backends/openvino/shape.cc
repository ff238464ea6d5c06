// Layout ops (our kernels: src/ops/shape.cc). Every claimed op has static shapes (backend.cc),
// so ops that only regroup elements in row-major order (reshape, expand_dims, squeeze, flatten2d)
// become one Reshape to the declared output dims.
#include <openvino/op/ops.hpp>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v1 = ov::op::v1;

OpLowering regroup() {
  return {{}, [](Lowerer& op) -> std::vector<Value> { return {reshape_to(op.input("x"), declared_dims(op))}; }};
}

}  // namespace

void add_shape_lowerings(LoweringTable& t) {
  t["reshape"] = regroup();
  t["expand_dims"] = regroup();
  t["squeeze"] = regroup();
  t["flatten2d"] = regroup();
  t["transpose"] = {[](const OpReader& op) -> Verdict {
                      return op.constant("perm") ? Verdict::claim() : Verdict::refuse("perm is not known at load");
                    },
                    [](Lowerer& op) -> std::vector<Value> {
                      std::vector<int64_t> perm = op.const_ints("perm");
                      for (int64_t& p : perm) p = normalized_axis(p, static_cast<int64_t>(perm.size()));
                      return {std::make_shared<v1::Transpose>(op.input("x"), Lowerer::i64s(perm))};
                    }};
  t["concat"] = {[](const OpReader& op) -> Verdict {
                   if (op.const_bool("interleave", false)) return Verdict::refuse("interleave");
                   const DType d = op.type("values", 0).dtype;
                   for (size_t i = 1; i < op.count("values"); ++i)
                     if (op.type("values", i).dtype != d) return Verdict::refuse("values have different dtypes");
                   return Verdict::claim();
                 },
                 [](Lowerer& op) -> std::vector<Value> {
                   ov::OutputVector values;
                   for (size_t i = 0; i < op.count("values"); ++i) values.push_back(op.input("values", i));
                   return {std::make_shared<ov::op::v0::Concat>(
                       values, normalized_axis(op.const_int("axis"), op.output_type(0).rank))};
                 }};
  t["split"] = {{},
                [](Lowerer& op) -> std::vector<Value> {
                  const int64_t axis = normalized_axis(op.const_int("axis"), op.type("x").rank);
                  std::vector<int64_t> sizes;
                  for (const ir::NamedValue& out : op.op().outputs) sizes.push_back(out.type.dims[axis]);
                  auto split = std::make_shared<v1::VariadicSplit>(op.input("x"), Lowerer::i64(axis),
                                                                   Lowerer::i64s(sizes));
                  std::vector<Value> outs;
                  for (size_t i = 0; i < sizes.size(); ++i) outs.push_back(split->output(i));
                  return outs;
                }};
  t["tile"] = {[](const OpReader& op) -> Verdict {
                 return op.constant("reps") ? Verdict::claim() : Verdict::refuse("reps are not known at load");
               },
               [](Lowerer& op) -> std::vector<Value> {
                 return {std::make_shared<ov::op::v0::Tile>(op.input("x"), Lowerer::i64s(op.const_ints("reps")))};
               }};
}

}  // namespace coremlrt::backends::openvino
