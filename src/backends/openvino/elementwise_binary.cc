// Binary arithmetic and comparisons with numpy broadcasting (our kernels:
// src/ops/elementwise_binary.cc). Floating-point only unless the integer semantics are plainly the
// same (add, sub, mul, maximum, minimum and comparisons on int32; the divisions differ at the
// edges), and the logical ops on bool. The CPU plugin compares int32 values in fp32, which rounds
// those above 2^24 (greater(16777217, 16777216) is false there), so int32 comparisons compare
// split values, each exact in fp32 (compare_int32).
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

// An int32 comparison made exact: each value split into x >> 12 and its low 12 bits (both exact
// in fp32), the high parts compared first and the low parts where the high parts are equal.
enum class Order { kEqual, kNotEqual, kGreater, kGreaterEqual, kLess, kLessEqual };

Value compare_int32(const Value& x, const Value& y, Order order) {
  auto high = [](const Value& v) -> Value {
    return std::make_shared<ov::op::v15::BitwiseRightShift>(v, Lowerer::scalar_like(v, 12));
  };
  auto low = [](const Value& v) -> Value {
    return std::make_shared<ov::op::v13::BitwiseAnd>(v, Lowerer::scalar_like(v, 4095));
  };
  const Value hx = high(x), hy = high(y), lx = low(x), ly = low(y);
  const Value same_high = std::make_shared<v1::Equal>(hx, hy);
  switch (order) {
    case Order::kEqual:
      return std::make_shared<v1::LogicalAnd>(same_high, std::make_shared<v1::Equal>(lx, ly));
    case Order::kNotEqual:
      return std::make_shared<v1::LogicalOr>(std::make_shared<v1::NotEqual>(hx, hy), std::make_shared<v1::NotEqual>(lx, ly));
    case Order::kGreater:
      return std::make_shared<v1::LogicalOr>(std::make_shared<v1::Greater>(hx, hy),
                                             std::make_shared<v1::LogicalAnd>(same_high, std::make_shared<v1::Greater>(lx, ly)));
    case Order::kGreaterEqual:
      return std::make_shared<v1::LogicalOr>(
          std::make_shared<v1::Greater>(hx, hy),
          std::make_shared<v1::LogicalAnd>(same_high, std::make_shared<v1::GreaterEqual>(lx, ly)));
    case Order::kLess:
      return std::make_shared<v1::LogicalOr>(std::make_shared<v1::Less>(hx, hy),
                                             std::make_shared<v1::LogicalAnd>(same_high, std::make_shared<v1::Less>(lx, ly)));
    case Order::kLessEqual:
      return std::make_shared<v1::LogicalOr>(
          std::make_shared<v1::Less>(hx, hy),
          std::make_shared<v1::LogicalAnd>(same_high, std::make_shared<v1::LessEqual>(lx, ly)));
  }
  return {};
}

template <class OvOp>
OpLowering comparison(Order order) {
  OpLowering lowering = binary<OvOp>(true);
  lowering.lower = [order](Lowerer& op) -> std::vector<Value> {
    Value x = op.input("x"), y = op.input("y");
    if (x.get_element_type() == ov::element::i32) return {compare_int32(x, y, order)};
    return {std::make_shared<OvOp>(x, y)};
  };
  return lowering;
}

template <class OvOp>
OpLowering logical() {
  return {[](const OpReader& op) -> Verdict {
            if (op.type("x").dtype != DType::Bool || op.type("y").dtype != DType::Bool)
              return Verdict::refuse("x or y is not bool");
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
  t["equal"] = comparison<v1::Equal>(Order::kEqual);
  t["not_equal"] = comparison<v1::NotEqual>(Order::kNotEqual);
  t["less"] = comparison<v1::Less>(Order::kLess);
  t["less_equal"] = comparison<v1::LessEqual>(Order::kLessEqual);
  t["greater"] = comparison<v1::Greater>(Order::kGreater);
  t["greater_equal"] = comparison<v1::GreaterEqual>(Order::kGreaterEqual);
  t["floor_div"] = {binary<v1::Divide>(false).check, [](Lowerer& op) -> std::vector<Value> {
                      return {std::make_shared<v0::Floor>(std::make_shared<v1::Divide>(op.input("x"), op.input("y")))};
                    }};
  t["mod"] = binary<v1::FloorMod>(false);
  t["logical_and"] = logical<v1::LogicalAnd>();
  t["logical_or"] = logical<v1::LogicalOr>();
  t["logical_xor"] = logical<v1::LogicalXor>();
}

}  // namespace coremlrt::backends::openvino
