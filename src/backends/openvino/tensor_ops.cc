// Tensor operations that compute values rather than only move them (our kernels:
// src/ops/tensor_ops.cc): cumsum, band_part, one_hot, topk, argsort, sliding_windows, fill_like.
#include <openvino/op/ops.hpp>

#include <cmath>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v1 = ov::op::v1;

// A value stored in `dtype` as our kernels store it (fill_value): truncated for integers, nonzero
// for bool, as is for floats.
double stored_as(DType dtype, double value) {
  if (dtype == DType::Bool) return value != 0;
  return fp16_or_fp32(dtype) ? value : std::trunc(value);
}

Verdict axis_in_range(const OpReader& op, int64_t axis, int64_t rank) {
  const int64_t a = normalized_axis(axis, rank);
  return a >= 0 && a < rank ? Verdict::claim() : Verdict::refuse("axis out of range");
}

// The region's check that x holds no NaN: where OpenVINO's TopK puts NaN is not defined, where
// our kernel puts them first (descending) or last (ascending).
void require_no_nan(Lowerer& op, const Value& x) {
  Value nan = std::make_shared<ov::op::v10::IsNaN>(x);
  Value flat = std::make_shared<v1::Reshape>(nan, Lowerer::i64s({-1}), false);
  op.require(std::make_shared<v1::LogicalNot>(std::make_shared<v1::ReduceLogicalOr>(flat, Lowerer::i64(0), false)));
}

// topk and argsort: OpenVINO's stable TopK keeps equal values in index order, as our kernel's
// sort does; floats only (the CPU plugin orders int32 values in fp32, which ties those above 2^24).
Verdict sortable(const OpReader& op) {
  if (Verdict why = float_input(op); !why.claimed) return why;
  return axis_in_range(op, op.const_int("axis", -1), op.type("x").rank);
}

std::shared_ptr<ov::op::v11::TopK> sorted(Lowerer& op, int64_t k, ov::element::Type index_type) {
  Value x = op.input("x");
  require_no_nan(op, x);
  const int64_t axis = normalized_axis(op.const_int("axis", -1), op.type("x").rank);
  const bool ascending = op.const_bool("ascending", false);
  return std::make_shared<ov::op::v11::TopK>(x, Lowerer::i64(k), axis,
                                              ascending ? ov::op::TopKMode::MIN : ov::op::TopKMode::MAX,
                                              ov::op::TopKSortType::SORT_VALUES, index_type, true);
}

}  // namespace

void add_tensor_ops_lowerings(LoweringTable& t) {
  // Sums in the element type the region computes in, one after the other along the axis, as our
  // kernel's running sum (float for fp16 and fp32; int32 wrapping).
  t["cumsum"] = {[](const OpReader& op) -> Verdict {
                   const DType d = op.type("x").dtype;
                   if (!fp16_or_fp32(d) && d != DType::Int32) return Verdict::refuse("x is not fp16, fp32 or int32");
                   return axis_in_range(op, op.const_int("axis", 0), op.type("x").rank);
                 },
                 [](Lowerer& op) -> std::vector<Value> {
                   const int64_t axis = normalized_axis(op.const_int("axis", 0), op.type("x").rank);
                   return {std::make_shared<ov::op::v0::CumSum>(op.input("x"), Lowerer::i64(axis),
                                                                op.const_bool("exclusive", false),
                                                                op.const_bool("reverse", false))};
                 }};
  // Keeps (m, n) of the last two dims where (lower < 0 or m - n <= lower) and (upper < 0 or
  // n - m <= upper), zeros elsewhere: a mask made at load.
  t["band_part"] = {[](const OpReader& op) -> Verdict {
                      if (op.type("x").rank < 2) return Verdict::refuse("x has rank < 2");
                      for (const char* p : {"lower", "upper"})
                        if (op.has(p) && !op.constant(p)) return Verdict::refuse(std::string(p) + " is not known at load");
                      return Verdict::claim();
                    },
                    [](Lowerer& op) -> std::vector<Value> {
                      const std::vector<int64_t>& dims = op.type("x").dims;
                      const int64_t rows = dims[dims.size() - 2], cols = dims.back();
                      const int64_t lower = op.const_int("lower", -1), upper = op.const_int("upper", -1);
                      std::vector<double> keep;
                      for (int64_t m = 0; m < rows; ++m)
                        for (int64_t n = 0; n < cols; ++n)
                          keep.push_back((lower < 0 || m - n <= lower) && (upper < 0 || n - m <= upper));
                      Value x = op.input("x");
                      Value mask = Lowerer::constant_of(ov::element::boolean, {rows, cols}, keep);
                      return {std::make_shared<v1::Select>(mask, x, Lowerer::scalar_like(x, 0.0))};
                    }};
  // Indices outside [0, size) give a vector of off_value (OneHot-16, negatives ignored).
  t["one_hot"] = {[](const OpReader& op) -> Verdict {
                    if (!op.constant("one_hot_vector_size")) return Verdict::refuse("one_hot_vector_size is not known at load");
                    const DType d = op.type("indices").dtype;
                    if (d != DType::Int32 && d != DType::Int16 && d != DType::Int8 && d != DType::UInt8 && d != DType::UInt16)
                      return Verdict::refuse("indices of dtype " + std::string(dtype_name(d)));
                    return axis_in_range(op, op.const_int("axis", -1), op.type("indices").rank + 1);
                  },
                  [](Lowerer& op) -> std::vector<Value> {
                    const DType out = op.output_type(0).dtype;
                    const ov::element::Type type = op.compute_type(out);
                    Value indices = converted(op.input("indices"), ov::element::i32);
                    auto value = [&](const char* p, double fallback) {
                      return Lowerer::constant_of(type, {}, {stored_as(out, op.const_float(p, fallback))});
                    };
                    const int64_t axis = normalized_axis(op.const_int("axis", -1), op.type("indices").rank + 1);
                    return {std::make_shared<ov::op::v16::OneHot>(
                        indices, Lowerer::i64(op.const_int("one_hot_vector_size")), value("on_value", 1.0),
                        value("off_value", 0.0), axis, ov::op::v16::OneHot::NegativeIndicesMode::IGNORE_NEGATIVE)};
                  }};
  t["topk"] = {[](const OpReader& op) -> Verdict {
                 if (Verdict why = sortable(op); !why.claimed) return why;
                 if (op.has("k") && !op.constant("k")) return Verdict::refuse("k is not known at load");
                 const std::string index_dtype = op.const_string("output_indices_dtype", "int32");
                 if (index_dtype != "int32" && index_dtype != "uint16")
                   return Verdict::refuse("output_indices_dtype " + index_dtype);
                 const ir::ValueType& x = op.type("x");
                 const int64_t k = op.const_int("k", 1), size = x.dims[normalized_axis(op.const_int("axis", -1), x.rank)];
                 if (k != -1 && (k < 1 || k > size)) return Verdict::refuse("k out of range");
                 return Verdict::claim();
               },
               [](Lowerer& op) -> std::vector<Value> {
                 const ir::ValueType& x = op.type("x");
                 int64_t k = op.const_int("k", 1);
                 if (k == -1) k = x.dims[normalized_axis(op.const_int("axis", -1), x.rank)];
                 auto top = sorted(op, k, ov::element::i32);
                 if (!op.const_bool("return_indices", true)) return {top->output(0)};
                 return {top->output(0), converted(top->output(1), op.compute_type(op.output_type(1).dtype))};
               }};
  t["argsort"] = {sortable, [](Lowerer& op) -> std::vector<Value> {
                    const ir::ValueType& x = op.type("x");
                    const int64_t size = x.dims[normalized_axis(op.const_int("axis", -1), x.rank)];
                    return {sorted(op, size, ov::element::i32)->output(1)};
                  }};
  // Windows of `size` every `stride` along the axis, as a gather of their positions.
  t["sliding_windows"] = {[](const OpReader& op) -> Verdict {
                            const ir::ValueType& x = op.type("x");
                            if (Verdict why = axis_in_range(op, op.const_int("axis"), x.rank); !why.claimed) return why;
                            const int64_t size = op.const_int("size"), stride = op.const_int("stride", 1);
                            if (size < 1 || stride < 1) return Verdict::refuse("size or stride below 1");
                            if (x.dims[normalized_axis(op.const_int("axis"), x.rank)] < size)
                              return Verdict::refuse("a window is longer than the axis");
                            return Verdict::claim();
                          },
                          [](Lowerer& op) -> std::vector<Value> {
                            const ir::ValueType& x = op.type("x");
                            const int64_t axis = normalized_axis(op.const_int("axis"), x.rank);
                            const int64_t size = op.const_int("size"), stride = op.const_int("stride", 1);
                            const int64_t windows = (x.dims[axis] - size) / stride + 1;
                            std::vector<double> positions;
                            for (int64_t w = 0; w < windows; ++w)
                              for (int64_t i = 0; i < size; ++i) positions.push_back(static_cast<double>(w * stride + i));
                            Value indices = Lowerer::constant_of(ov::element::i32, {windows, size}, positions);
                            return {std::make_shared<ov::op::v8::Gather>(op.input("x"), indices, Lowerer::i64(axis))};
                          }};
  // A tensor of ref_tensor's (static) shape filled with the value.
  t["fill_like"] = {{}, [](Lowerer& op) -> std::vector<Value> {
                      const ir::ValueType& out = op.output_type(0);
                      Value value = Lowerer::constant_of(op.compute_type(out.dtype), {},
                                                         {stored_as(out.dtype, op.const_float("value", 0.0))});
                      return {std::make_shared<v1::Broadcast>(value, Lowerer::i64s(out.dims))};
                    }};
}

}  // namespace coremlrt::backends::openvino
