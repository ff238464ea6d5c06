// Layout ops (our kernels: src/ops/shape.cc). Every claimed op has static shapes (backend.cc),
// so ops that only regroup elements in row-major order (reshape, expand_dims, squeeze, flatten2d)
// become one Reshape to the declared output dims.
#include <openvino/op/ops.hpp>

#include <cmath>

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
                   // MIL joins scalars as one-element vectors (coremltools writes concat((1, n, H)) for
                   // a shape); OpenVINO's Concat needs each input of rank 1 or more.
                   ov::OutputVector values;
                   for (size_t i = 0; i < op.count("values"); ++i)
                     values.push_back(op.type("values", i).rank == 0 ? reshape_to(op.input("values", i), {1})
                                                                     : op.input("values", i));
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
  // pad: (before, after) pairs for the last len(pad) / 2 dims;
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
}

}  // namespace coremlrt::backends::openvino
