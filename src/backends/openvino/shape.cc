// Data movement (our kernels: src/ops/shape.cc, slice.cc, gather.cc, misc.cc). Every claimed
// op has static shapes (backend.cc), so ops that only regroup elements in row-major order
// (reshape, expand_dims, squeeze, flatten2d) become one Reshape to the declared output dims,
// and slices are resolved here into explicit start/stop/step with the rules of
// src/ops/slice.cc.
#include <openvino/op/ops.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v1 = ov::op::v1;

std::vector<int64_t> declared_dims(const OpReader& op, size_t output = 0) { return op.output_type(output).dims; }

Value reshape_to(const Value& x, const std::vector<int64_t>& dims) {
  return std::make_shared<v1::Reshape>(x, Lowerer::i64s(dims), false);
}

OpLowering regroup() {
  return {{}, [](Lowerer& op) -> std::vector<Value> { return {reshape_to(op.input("x"), declared_dims(op))}; }};
}

struct SliceSpec {
  std::vector<int64_t> start, stop, step;
};

// slice_by_index's begin/end/stride/masks for static x, as src/ops/slice.cc reads them; claimed
// when they resolve, else refused with why not. Stops are written for OpenVINO's Slice, where a
// negative stop counts from the end: "before the first element" is -(size + 1).
Verdict resolve_slice(const OpReader& op, SliceSpec& s) {
  const std::vector<int64_t>& x = op.type("x").dims;
  const size_t rank = x.size();
  for (const char* p : {"begin", "end", "stride", "begin_mask", "end_mask", "squeeze_mask"})
    if (op.count(p) && !op.constant(p)) return Verdict::refuse(std::string(p) + " is not known at load");
  const std::vector<int64_t> begin = op.const_ints("begin", std::vector<int64_t>{});
  const std::vector<int64_t> end = op.const_ints("end", std::vector<int64_t>{});
  const std::vector<int64_t> stride = op.const_ints("stride", std::vector<int64_t>{});
  const std::vector<bool> bm = op.const_bools("begin_mask", std::vector<bool>{}),
                          em = op.const_bools("end_mask", std::vector<bool>{}),
                          sm = op.const_bools("squeeze_mask", std::vector<bool>{});
  for (size_t n : {begin.size(), end.size(), stride.size(), bm.size(), em.size(), sm.size()})
    if (n != 0 && n != rank) return Verdict::refuse("a slice parameter does not have x's rank");
  auto flag = [](const std::vector<bool>& v, size_t d) { return !v.empty() && v[d]; };
  for (size_t d = 0; d < rank; ++d) {
    const int64_t size = x[d];
    const int64_t step = stride.empty() ? 1 : stride[d];
    int64_t b = begin.empty() ? 0 : begin[d], e = end.empty() ? size : end[d];
    if (flag(sm, d)) {
      if (b < 0) b += size;
      if (b < 0 || b >= size) return Verdict::refuse("squeezed index out of range");
      s.start.push_back(b);
      s.stop.push_back(b + 1);
      s.step.push_back(1);
      continue;
    }
    if (step == 0) return Verdict::refuse("stride 0");
    if (step > 0) {
      auto clamp = [&](int64_t v) { return v < 0 ? std::max<int64_t>(v + size, 0) : std::min(v, size); };
      b = flag(bm, d) ? 0 : clamp(b);
      e = flag(em, d) ? size : clamp(e);
    } else {
      auto clamp = [&](int64_t v) { return v < 0 ? std::max<int64_t>(v + size, -1) : std::min(v, size - 1); };
      b = flag(bm, d) ? size - 1 : clamp(b);
      e = flag(em, d) ? -1 : clamp(e);
      if (e < 0) e = -(size + 1);
    }
    s.start.push_back(b);
    s.stop.push_back(e);
    s.step.push_back(step);
  }
  return Verdict::claim();
}

Value slice(const Value& x, const SliceSpec& s) {
  std::vector<int64_t> axes(s.start.size());
  for (size_t i = 0; i < axes.size(); ++i) axes[i] = static_cast<int64_t>(i);
  // A slice of a conversion is the conversion of the slice, element for element: slicing
  // first converts only what is kept. A KV cache read from an fp16 state is widened to fp32
  // (by the program's cast, or at the region's edge) and then sliced to one layer, and the
  // CPU plugin does not reorder the two itself (benchmarks/peer_models.py, GPT-2).
  if (auto convert = ov::as_type_ptr<ov::op::v0::Convert>(x.get_node_shared_ptr())) {
    const Value narrow = convert->input_value(0);
    Value sliced = std::make_shared<ov::op::v8::Slice>(narrow, Lowerer::i64s(s.start), Lowerer::i64s(s.stop),
                                                       Lowerer::i64s(s.step), Lowerer::i64s(axes));
    return std::make_shared<ov::op::v0::Convert>(sliced, convert->get_destination_type());
  }
  return std::make_shared<ov::op::v8::Slice>(x, Lowerer::i64s(s.start), Lowerer::i64s(s.stop), Lowerer::i64s(s.step),
                                             Lowerer::i64s(axes));
}

int64_t normalized_axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

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
  t["slice_by_index"] = {[](const OpReader& op) -> Verdict {
                           SliceSpec s;
                           return resolve_slice(op, s);
                         },
                         [](Lowerer& op) -> std::vector<Value> {
                           SliceSpec s;
                           resolve_slice(op, s);
                           return {reshape_to(slice(op.input("x"), s), declared_dims(op))};
                         }};
  t["slice_by_size"] = {[](const OpReader& op) -> Verdict {
                          if (!op.constant("begin") || !op.constant("size"))
                            return Verdict::refuse("begin or size is not known at load");
                          const std::vector<int64_t>& x = op.type("x").dims;
                          std::vector<int64_t> b = op.const_ints("begin"), n = op.const_ints("size");
                          if (b.size() != x.size() || n.size() != x.size())
                            return Verdict::refuse("begin or size does not have x's rank");
                          for (size_t d = 0; d < x.size(); ++d) {
                            const int64_t start = b[d] < 0 ? b[d] + x[d] : b[d];
                            const int64_t count = n[d] == -1 ? x[d] - start : n[d];
                            if (start < 0 || count < 0 || start + count > x[d])
                              return Verdict::refuse("slice out of range");
                          }
                          return Verdict::claim();
                        },
                        [](Lowerer& op) -> std::vector<Value> {
                          const std::vector<int64_t>& x = op.type("x").dims;
                          std::vector<int64_t> b = op.const_ints("begin"), n = op.const_ints("size");
                          SliceSpec s;
                          for (size_t d = 0; d < x.size(); ++d) {
                            const int64_t start = b[d] < 0 ? b[d] + x[d] : b[d];
                            s.start.push_back(start);
                            s.stop.push_back(n[d] == -1 ? x[d] : start + n[d]);
                            s.step.push_back(1);
                          }
                          return {slice(op.input("x"), s)};
                        }};
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
  t["tile"] = {[](const OpReader& op) -> Verdict {
                 return op.constant("reps") ? Verdict::claim() : Verdict::refuse("reps are not known at load");
               },
               [](Lowerer& op) -> std::vector<Value> {
                 return {std::make_shared<ov::op::v0::Tile>(op.input("x"), Lowerer::i64s(op.const_ints("reps")))};
               }};
  // pad (our kernel: src/ops/shape.cc): (before, after) pairs for the last len(pad) / 2 dims;
  // constant, reflect (the edge not repeated: OpenVINO's reflect) and replicate (its edge).
  t["pad"] = {[](const OpReader& op) -> Verdict {
                if (!op.constant("pad")) return Verdict::refuse("pad is not known at load");
                const std::string mode = op.const_string("mode", "constant");
                if (mode != "constant" && mode != "reflect" && mode != "replicate") return Verdict::refuse("mode " + mode);
                const std::vector<int64_t>& x = op.type("x").dims;
                const std::vector<int64_t> pad = op.const_ints("pad");
                if (pad.size() % 2 || pad.size() > 2 * x.size()) return Verdict::refuse("pad does not fit x's rank");
                const size_t first = x.size() - pad.size() / 2;
                for (size_t i = 0; i < pad.size(); ++i) {
                  if (pad[i] < 0) return Verdict::refuse("negative padding");
                  // Our kernel fails such a program at run time and says why.
                  if (mode == "reflect" && pad[i] >= x[first + i / 2])
                    return Verdict::refuse("reflect padding as large as the dim");
                }
                return Verdict::claim();
              },
              [](Lowerer& op) -> std::vector<Value> {
                const std::vector<int64_t>& x = op.type("x").dims;
                const std::vector<int64_t> pad = op.const_ints("pad");
                std::vector<int64_t> begin(x.size(), 0), end(x.size(), 0);
                const size_t first = x.size() - pad.size() / 2;
                for (size_t i = 0; i < pad.size() / 2; ++i) {
                  begin[first + i] = pad[2 * i];
                  end[first + i] = pad[2 * i + 1];
                }
                const std::string mode = op.const_string("mode", "constant");
                Value input = op.input("x");
                // The fill value as our kernel stores it in x's dtype: truncated for integers,
                // nonzero for bool (fp16 constants are fp16 in the file already).
                double fill = op.const_float("constant_val", 0.0);
                const DType dtype = op.type("x").dtype;
                if (dtype == DType::Bool) fill = fill != 0;
                else if (!fp16_or_fp32(dtype)) fill = std::trunc(fill);
                const auto pad_mode = mode == "constant" ? ov::op::PadMode::CONSTANT
                                      : mode == "reflect" ? ov::op::PadMode::REFLECT
                                                          : ov::op::PadMode::EDGE;
                return {std::make_shared<ov::op::v12::Pad>(input, Lowerer::i64s(begin), Lowerer::i64s(end),
                                                           Lowerer::scalar_like(input, fill), pad_mode)};
              }};
  t["reshape_like"] = regroup();
  // values stacked along a new axis: each given that axis, then joined.
  t["stack"] = {[](const OpReader& op) -> Verdict {
                  const DType d = op.type("values", 0).dtype;
                  for (size_t i = 1; i < op.count("values"); ++i)
                    if (op.type("values", i).dtype != d) return Verdict::refuse("values have different dtypes");
                  return Verdict::claim();
                },
                [](Lowerer& op) -> std::vector<Value> {
                  const int64_t axis = normalized_axis(op.const_int("axis"), op.output_type(0).rank);
                  ov::OutputVector values;
                  for (size_t i = 0; i < op.count("values"); ++i)
                    values.push_back(std::make_shared<ov::op::v0::Unsqueeze>(op.input("values", i), Lowerer::i64s({axis})));
                  return {std::make_shared<ov::op::v0::Concat>(values, axis)};
                }};
  // Every axis reversed when axes are absent.
  t["reverse"] = {[](const OpReader& op) -> Verdict {
                    if (op.has("axes") && !op.constant("axes")) return Verdict::refuse("axes are not known at load");
                    return Verdict::claim();
                  },
                  [](Lowerer& op) -> std::vector<Value> {
                    const int64_t rank = op.type("x").rank;
                    std::vector<int64_t> axes;
                    if (op.has("axes")) {
                      axes = op.const_ints("axes");
                      for (int64_t& a : axes) a = normalized_axis(a, rank);
                    } else {
                      for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
                    }
                    if (axes.empty()) return {op.input("x")};
                    return {std::make_shared<ov::op::v1::Reverse>(op.input("x"), Lowerer::i64s(axes),
                                                                  ov::op::v1::Reverse::Mode::INDEX)};
                  }};
  t["identity"] = {{}, [](Lowerer& op) -> std::vector<Value> { return {op.input("x")}; }};
}

}  // namespace coremlrt::backends::openvino
