// Pooling: max_pool, avg_pool (our kernels: src/ops/pool.cc). Padding is resolved from the
// input's spatial dims with the rules of our kernels (resolve_pads, lowering.cc), so OpenVINO gets
// explicit pads.
#include <openvino/op/ops.hpp>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v1 = ov::op::v1;

Verdict pool_window(const OpReader& op, Window& w) {
  const ir::ValueType& x = op.type("x");
  if (!fp16_or_fp32(x.dtype)) return Verdict::refuse("x is not fp16 or fp32");
  if (op.const_bool("ceil_mode", false)) return Verdict::refuse("ceil_mode");
  w.kernel = op.const_ints("kernel_sizes");
  const size_t n = w.kernel.size();
  if (static_cast<int64_t>(n) + 2 != x.rank) return Verdict::refuse("kernel_sizes does not match x's rank");
  w.strides = op.const_ints("strides", std::vector<int64_t>(n, 1));
  w.dilations.assign(n, 1);
  return resolve_pads(op, spatial(x), w);
}

}  // namespace

void add_pool_lowerings(LoweringTable& t) {
  t["max_pool"] = {[](const OpReader& op) {
                     Window w;
                     return pool_window(op, w);
                   },
                   [](Lowerer& op) -> std::vector<Value> {
                     Window w;
                     pool_window(op, w);
                     return {std::make_shared<v1::MaxPool>(
                         op.input("x"), ov::Strides(w.strides.begin(), w.strides.end()),
                         ov::Shape(w.pad_begin.begin(), w.pad_begin.end()), ov::Shape(w.pad_end.begin(), w.pad_end.end()),
                         ov::Shape(w.kernel.begin(), w.kernel.end()))};
                   }};
  t["avg_pool"] = {[](const OpReader& op) {
                     Window w;
                     return pool_window(op, w);
                   },
                   [](Lowerer& op) -> std::vector<Value> {
                     Window w;
                     pool_window(op, w);
                     return {std::make_shared<v1::AvgPool>(
                         op.input("x"), ov::Strides(w.strides.begin(), w.strides.end()),
                         ov::Shape(w.pad_begin.begin(), w.pad_begin.end()), ov::Shape(w.pad_end.begin(), w.pad_end.end()),
                         ov::Shape(w.kernel.begin(), w.kernel.end()), op.const_bool("exclude_padding_from_average", false))};
                   }};
}

}  // namespace coremlrt::backends::openvino
