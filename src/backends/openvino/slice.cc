// Slices (our kernels: src/ops/slice.cc), resolved here into explicit start/stop/step with the
// rules of src/ops/slice.cc.
#include <openvino/op/ops.hpp>

#include <algorithm>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {


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

}  // namespace

void add_slice_lowerings(LoweringTable& t) {
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
}

}  // namespace coremlrt::backends::openvino
