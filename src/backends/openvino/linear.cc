// Matrix ops: linear, matmul (our kernels: src/ops/linear.cc).
#include <openvino/op/ops.hpp>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v0 = ov::op::v0;
namespace v1 = ov::op::v1;

}  // namespace

void add_linear_lowerings(LoweringTable& t) {
  // The weight-decompression pattern of an affine compressed weight is what OpenVINO's matrix
  // kernels read compressed (packed.cc).
  t["linear"] = {[](const OpReader& op) { return same_float_dtype(op, {"weight", "bias"}); },
                 [](Lowerer& op) -> std::vector<Value> {
                   Value y = std::make_shared<v0::MatMul>(op.input("x"), op.input("weight"), false, true);
                   if (op.count("bias")) y = std::make_shared<v1::Add>(y, op.input("bias"));
                   return {y};
                 }};
  t["linear"].packed = PackedInputs::kCompressed;
  t["matmul"] = {[](const OpReader& op) -> Verdict {
                   const DType x = op.type("x").dtype;
                   if (!fp16_or_fp32(x)) return Verdict::refuse("x is not fp16 or fp32");
                   if (op.type("y").dtype != x) return Verdict::refuse("x and y have different dtypes");
                   return Verdict::claim();
                 },
                 [](Lowerer& op) -> std::vector<Value> {
                   return {std::make_shared<v0::MatMul>(op.input("x"), op.input("y"), op.const_bool("transpose_x", false),
                                                        op.const_bool("transpose_y", false))};
                 }};
  t["matmul"].packed = PackedInputs::kCompressed;
}

}  // namespace coremlrt::backends::openvino
