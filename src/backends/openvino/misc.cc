// select, cast, identity (our kernels: src/ops/misc.cc).
//
// cast (cast_tensor there) between the dtypes of Core ML's cast: fp16, fp32,
// int32, bool (iOS15) and int8, uint8, int16, uint16 (iOS17). Our kernel's rules, which OpenVINO's
// Convert does not keep on its own (its CPU plugin turns NaN and out-of-range floats into
// INT32_MIN, wraps 300.0 to int8 44, and gives false for NaN to bool):
// * to bool: x != 0 (NaN is true);
// * float to an integer: truncated toward zero, NaN to 0, saturated at the type's bounds;
// * integer (or bool) to a narrower integer: modulo 2^bits, as C++ conversions are;
// * to a float: rounded to nearest.
// So a cast is lowered to values the Convert takes exactly: floats already truncated, NaN-free and
// clamped; integers already reduced modulo 2^bits by a mask. int64, uint32 and fp64 stay on our
// kernels: the CPU plugin computes int64 in int32 (a float of 3e9 converts to INT32_MIN there).
// Casts from fp16 to an integer or bool stay ours: a region computes fp16 values in fp32 (fp16 or
// wider, docs/design/architecture.md, law 6), whose truncation can differ from the fp16 value's,
// and the plugin folds a round trip through fp16 away.
#include <openvino/op/ops.hpp>

#include <cmath>
#include <limits>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v1 = ov::op::v1;

std::optional<DType> cast_target(const std::string& name) {
  static const std::pair<const char*, DType> kNames[] = {
      {"fp32", DType::Float32}, {"fp16", DType::Float16}, {"int32", DType::Int32},   {"bool", DType::Bool},
      {"int8", DType::Int8},    {"uint8", DType::UInt8},  {"int16", DType::Int16}, {"uint16", DType::UInt16}};
  for (auto& [text, dtype] : kNames)
    if (name == text) return dtype;
  return std::nullopt;
}

bool castable(DType d) {
  return d == DType::Float32 || d == DType::Float16 || d == DType::Int32 || d == DType::Bool || d == DType::Int8 ||
         d == DType::UInt8 || d == DType::Int16 || d == DType::UInt16;
}

Value scalar(const Value& like, double value) { return Lowerer::scalar_like(like, value); }

// [min, max] of an integer dtype narrower than 32 bits.
std::pair<int64_t, int64_t> bounds(DType d) {
  switch (d) {
    case DType::Int8: return {std::numeric_limits<int8_t>::min(), std::numeric_limits<int8_t>::max()};
    case DType::UInt8: return {0, std::numeric_limits<uint8_t>::max()};
    case DType::Int16: return {std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max()};
    default: return {0, std::numeric_limits<uint16_t>::max()};
  }
}

// A float truncated toward zero, NaN to 0, saturated at the integer dtype's bounds, then converted.
Value float_to_integer(const Value& x, DType to, ov::element::Type type) {
  Value finite = std::make_shared<v1::Select>(std::make_shared<ov::op::v10::IsNaN>(x), scalar(x, 0.0), x);
  Value truncated = std::make_shared<v1::Select>(std::make_shared<v1::Less>(finite, scalar(x, 0.0)),
                                                 std::make_shared<ov::op::v0::Ceiling>(finite),
                                                 std::make_shared<ov::op::v0::Floor>(finite));
  if (to != DType::Int32) {
    const auto [low, high] = bounds(to);
    Value clamped = std::make_shared<v1::Minimum>(std::make_shared<v1::Maximum>(truncated, scalar(x, low)), scalar(x, high));
    return std::make_shared<ov::op::v0::Convert>(clamped, type);
  }
  // INT32_MAX has no float: values from 2^31 up saturate by a select; below, the largest float
  // under 2^31 and -2^31 itself convert exactly.
  const double two_31 = 2147483648.0;
  const double below_two_31 = static_cast<double>(std::nextafter(2147483648.0f, 0.0f));
  Value clamped =
      std::make_shared<v1::Minimum>(std::make_shared<v1::Maximum>(truncated, scalar(x, -two_31)), scalar(x, below_two_31));
  Value converted_value = std::make_shared<ov::op::v0::Convert>(clamped, ov::element::i32);
  return std::make_shared<v1::Select>(std::make_shared<v1::GreaterEqual>(truncated, scalar(x, two_31)),
                                      Lowerer::constant_of(ov::element::i32, {}, {2147483647.0}), converted_value);
}

// An integer or bool reduced modulo 2^bits of the target (from int32, which holds every source).
Value integer_to_integer(const Value& x, DType to, ov::element::Type type) {
  Value wide = converted(x, ov::element::i32);
  if (to == DType::Int32) return wide;
  const bool byte = to == DType::Int8 || to == DType::UInt8;
  const double modulus = byte ? 256.0 : 65536.0;
  Value low_bits = std::make_shared<ov::op::v13::BitwiseAnd>(wide, scalar(wide, modulus - 1));
  if (to == DType::Int8 || to == DType::Int16) {
    Value negative = std::make_shared<v1::GreaterEqual>(low_bits, scalar(wide, modulus / 2));
    low_bits = std::make_shared<v1::Subtract>(
        low_bits, std::make_shared<v1::Select>(negative, scalar(wide, modulus), scalar(wide, 0.0)));
  }
  return std::make_shared<ov::op::v0::Convert>(low_bits, type);
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
                 const std::optional<DType> to = cast_target(op.const_string("dtype"));
                 if (!to) return Verdict::refuse("cast to " + op.const_string("dtype"));
                 const DType from = op.type("x").dtype;
                 if (!castable(from)) return Verdict::refuse("cast from " + std::string(dtype_name(from)));
                 // The fp16 value itself decides an integer or bool: a region computes it in fp32
                 // (fp16 or wider), where -7.99 truncates to -7 and its fp16 value, -8, to -8; and
                 // the CPU plugin folds a round trip through fp16 away.
                 if (from == DType::Float16 && !fp16_or_fp32(*to))
                   return Verdict::refuse("cast from fp16 to " + op.const_string("dtype") +
                                          ": the region holds fp16 values in fp32, whose truncation can differ");
                 return Verdict::claim();
               },
               [](Lowerer& op) -> std::vector<Value> {
                 const DType from = op.type("x").dtype, to = *cast_target(op.const_string("dtype"));
                 Value x = op.input("x");
                 // A cast to fp16 inside a region computed in fp32 keeps fp32 (fp16 or wider).
                 const ov::element::Type type = op.compute_type(to);
                 if (from == to) return {x};
                 if (to == DType::Bool)
                   return {std::make_shared<v1::NotEqual>(x, Lowerer::scalar_like(x, 0.0))};
                 if (fp16_or_fp32(to)) return {converted(x, type)};
                 if (fp16_or_fp32(from)) return {float_to_integer(x, to, type)};
                 return {integer_to_integer(x, to, type)};
               }};
  t["identity"] = {{}, [](Lowerer& op) -> std::vector<Value> { return {op.input("x")}; }};
  t["select"].any_dims = true;  // reads ranks only, as the elementwise ops
}

}  // namespace coremlrt::backends::openvino
