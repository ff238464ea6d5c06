// Binary arithmetic and comparisons with numpy broadcasting (our kernels:
// src/ops/elementwise_binary.cc). Floating-point only unless the integer semantics are plainly the
// same (add, sub, mul, maximum, minimum and comparisons on int32; the divisions differ at the
// edges).
#include <openvino/op/ops.hpp>

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

}  // namespace

void add_elementwise_binary_lowerings(LoweringTable& t) {
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
}

}  // namespace coremlrt::backends::openvino
