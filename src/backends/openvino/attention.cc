// scaled_dot_product_attention (our kernel: src/ops/attention.cc).
#include <openvino/op/ops.hpp>

#include <cmath>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

// softmax(Q K^T * (1 / sqrt(E)) + mask) V over the last axis, a bool mask's False as -inf; query,
// key and value share their batch dims. Lowered to OpenVINO's ScaledDotProductAttention, whose
// order is our kernel's (scaled, then masked).
Verdict check_attention(const OpReader& op) {
  const ir::ValueType& q = op.type("query");
  if (!fp16_or_fp32(q.dtype)) return Verdict::refuse("query is not fp16 or fp32");
  const ir::ValueType& k = op.type("key");
  const ir::ValueType& v = op.type("value");
  if (k.dtype != q.dtype || v.dtype != q.dtype) return Verdict::refuse("query, key and value have different dtypes");
  if (q.rank < 3 || k.rank != q.rank || v.rank != q.rank) return Verdict::refuse("ranks differ or are below 3");
  const size_t r = q.dims.size();
  for (size_t d = 0; d + 2 < r; ++d)
    if (k.dims[d] != q.dims[d] || v.dims[d] != q.dims[d]) return Verdict::refuse("batch dims differ");
  if (k.dims[r - 1] != q.dims[r - 1] || v.dims[r - 2] != k.dims[r - 2]) return Verdict::refuse("shapes do not match");
  if (op.count("attn_mask")) {
    const ir::ValueType& m = op.type("attn_mask");
    if (m.dtype != DType::Bool && !fp16_or_fp32(m.dtype)) return Verdict::refuse("attn_mask is not bool, fp16 or fp32");
    if (m.rank > q.rank) return Verdict::refuse("attn_mask has a higher rank than the scores");
    for (size_t d = 0; d < m.dims.size(); ++d) {
      const size_t at = r - m.dims.size() + d;
      const int64_t score = at == r - 1 ? k.dims[r - 2] : q.dims[at];
      if (m.dims[d] != 1 && m.dims[d] != score) return Verdict::refuse("attn_mask does not broadcast to the scores");
    }
  }
  return Verdict::claim();
}

std::vector<Value> lower_attention(Lowerer& op) {
  Value q = op.input("query");
  const int64_t e = op.type("query").dims.back();
  Value scale = Lowerer::scalar_like(q, 1.0f / std::sqrt(static_cast<float>(e)));
  // OpenVINO's own attention op, which the CPU plugin runs as one fused kernel; written as
  // matrix products and softmax, vit_b_16 ran slower (docs/reports/performance.md, torchvision
  // networks). Its mask semantics are ours: a bool mask's False drops the position, a float mask
  // is added after scaling.
  if (op.count("attn_mask")) {
    Value mask = op.input("attn_mask");
    if (op.type("attn_mask").dtype != DType::Bool) mask = converted(mask, q.get_element_type());
    return {std::make_shared<ov::op::v13::ScaledDotProductAttention>(q, op.input("key"), op.input("value"), mask, scale,
                                                                      false)};
  }
  // No mask: a zero one, since the op takes the scale only after the mask.
  Value zero = Lowerer::scalar_like(q, 0.0f);
  return {std::make_shared<ov::op::v13::ScaledDotProductAttention>(q, op.input("key"), op.input("value"), zero, scale,
                                                                    false)};
}

}  // namespace

void add_attention_lowerings(LoweringTable& t) {
  t["scaled_dot_product_attention"] = {check_attention, lower_attention};
}

}  // namespace coremlrt::backends::openvino
