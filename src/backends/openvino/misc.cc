// select, cast, identity (our kernels: src/ops/misc.cc).
#include <openvino/op/ops.hpp>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v1 = ov::op::v1;

std::optional<DType> cast_target(const std::string& name) {
  if (name == "fp32") return DType::Float32;
  if (name == "fp16") return DType::Float16;
  return std::nullopt;
}

}  // namespace

void add_misc_lowerings(LoweringTable& t) {
  t["select"] = {[](const OpReader& op) -> Verdict {
                   if (op.type("cond").dtype != DType::Bool) return Verdict::refuse("cond is not bool");
                   if (op.type("a").dtype != op.type("b").dtype)
                     return Verdict::refuse("a and b have different dtypes");
                   return Verdict::claim();
                 },
                 [](Lowerer& op) -> std::vector<Value> {
                   return {std::make_shared<v1::Select>(op.input("cond"), op.input("a"), op.input("b"))};
                 }};
  t["cast"] = {[](const OpReader& op) -> Verdict {
                 // Float to float and integer to float only: float to integer rounding and
                 // saturation are defined by our kernel (src/ops/misc.cc).
                 if (!cast_target(op.const_string("dtype")))
                   return Verdict::refuse("cast to " + op.const_string("dtype"));
                 const DType from = op.type("x").dtype;
                 if (from != DType::Float16 && from != DType::Float32 && from != DType::Int32)
                   return Verdict::refuse("cast from this dtype");
                 return Verdict::claim();
               },
               [](Lowerer& op) -> std::vector<Value> {
                 // A cast to fp16 inside a region computed in fp32 keeps fp32 (fp16 or wider).
                 return {std::make_shared<ov::op::v0::Convert>(op.input("x"),
                                                               op.compute_type(*cast_target(op.const_string("dtype"))))};
               }};
  t["identity"] = {{}, [](Lowerer& op) -> std::vector<Value> { return {op.input("x")}; }};
  t["select"].any_dims = true;  // reads ranks only, as the elementwise ops
}

}  // namespace coremlrt::backends::openvino
