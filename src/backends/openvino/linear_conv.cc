// Matrix ops (linear, matmul), convolution and pooling (our kernels: src/ops/linear.cc,
// conv.cc, pool.cc). Padding is resolved here from the input's spatial dims with the rules of our
// kernels (same: the odd pixel after; same_lower: before), so OpenVINO gets explicit pads.
#include <openvino/op/ops.hpp>

#include <algorithm>
#include <cmath>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v0 = ov::op::v0;
namespace v1 = ov::op::v1;


// Every listed parameter that is present is a float of x's dtype.
Verdict same_float_dtype(const OpReader& op, std::initializer_list<const char*> params) {
  const DType x = op.type("x").dtype;
  if (!fp16_or_fp32(x)) return Verdict::refuse("x is not fp16 or fp32");
  for (const char* p : params)
    if (op.count(p) && op.type(p).dtype != x)
      return Verdict::refuse(std::string(p) + " and x have different dtypes");
  return Verdict::claim();
}

struct Window {
  std::vector<int64_t> kernel, strides, dilations;
  std::vector<int64_t> pad_begin, pad_end;  // resolved explicit pads
};

// pad_type / pad of conv and the pools, resolved for x's spatial dims `in` (-1 for a dim known
// only at prediction, which "same" padding cannot be resolved for here).
Verdict resolve_pads(const OpReader& op, const std::vector<int64_t>& in, Window& w) {
  const size_t n = in.size();
  const std::string pad_type = op.const_string("pad_type", "valid");
  w.pad_begin.assign(n, 0);
  w.pad_end.assign(n, 0);
  if (pad_type == "custom") {
    const std::vector<int64_t> pad = op.const_ints("pad", std::vector<int64_t>(2 * n, 0));
    if (pad.size() != 2 * n) return Verdict::refuse("pad has the wrong length");
    for (size_t i = 0; i < n; ++i) {
      w.pad_begin[i] = pad[2 * i];
      w.pad_end[i] = pad[2 * i + 1];
    }
  } else if (pad_type == "same" || pad_type == "same_lower") {
    for (size_t i = 0; i < n; ++i) {
      if (in[i] < 0) return Verdict::refuse("pad_type " + pad_type + " over spatial dims known only at prediction");
      const int64_t k_eff = (w.kernel[i] - 1) * w.dilations[i] + 1, s = w.strides[i];
      const int64_t out = (in[i] + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (out - 1) * s + k_eff - in[i]);
      w.pad_begin[i] = pad_type == "same" ? total / 2 : total - total / 2;
      w.pad_end[i] = total - w.pad_begin[i];
    }
  } else if (pad_type != "valid") {
    return Verdict::refuse("pad_type " + pad_type);
  }
  return Verdict::claim();
}

std::vector<int64_t> spatial(const ir::ValueType& x) { return std::vector<int64_t>(x.dims.begin() + 2, x.dims.end()); }

// Conv parameters; the weight must be known at load (it is reshaped for groups).
Verdict conv_window(const OpReader& op, Window& w) {
  const ir::ValueType& x = op.type("x");
  const ir::ConstValue* weight = op.constant("weight");
  if (!weight) return Verdict::refuse("weight is not known at load");
  if (x.rank < 3 || x.rank > 5) return Verdict::refuse("x has rank " + std::to_string(x.rank));
  const size_t n = static_cast<size_t>(x.rank - 2);
  w.kernel.assign(weight->tensor.shape.begin() + 2, weight->tensor.shape.end());
  w.strides = op.const_ints("strides", std::vector<int64_t>(n, 1));
  w.dilations = op.const_ints("dilations", std::vector<int64_t>(n, 1));
  if (w.kernel.size() != n || w.strides.size() != n || w.dilations.size() != n)
    return Verdict::refuse("window ranks differ");
  return resolve_pads(op, spatial(x), w);
}

Value conv(Lowerer& op) {
  Window w;
  conv_window(op, w);
  Value x = op.input("x");
  Value weight = op.input("weight");
  const int64_t groups = op.const_int("groups", 1);
  const ov::Strides strides(w.strides.begin(), w.strides.end()), dilations(w.dilations.begin(), w.dilations.end());
  const ov::CoordinateDiff begin(w.pad_begin.begin(), w.pad_begin.end()), end(w.pad_end.begin(), w.pad_end.end());
  Value y;
  if (groups == 1) {
    y = std::make_shared<v1::Convolution>(x, weight, strides, begin, end, dilations);
  } else {
    // [C_out, C_in / g, *k] -> [g, C_out / g, C_in / g, *k]
    std::vector<int64_t> shape = op.constant("weight")->tensor.shape;
    std::vector<int64_t> grouped = {groups, shape[0] / groups};
    grouped.insert(grouped.end(), shape.begin() + 1, shape.end());
    Value reshaped = std::make_shared<v1::Reshape>(weight, Lowerer::i64s(grouped), false);
    y = std::make_shared<v1::GroupConvolution>(x, reshaped, strides, begin, end, dilations);
  }
  if (op.count("bias")) {
    std::vector<int64_t> bias_shape(static_cast<size_t>(op.type("x").rank), 1);
    bias_shape[1] = -1;
    y = std::make_shared<v1::Add>(y, std::make_shared<v1::Reshape>(op.input("bias"), Lowerer::i64s(bias_shape), false));
  }
  return y;
}

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

// scaled_dot_product_attention (our kernel: src/ops/attention.cc): softmax(Q K^T * (1 / sqrt(E)) +
// mask) V over the last axis, a bool mask's False as -inf; query, key and value share their batch
// dims. Written as its matrix products and softmax, in our kernel's order (scaled, then masked).
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
  Value scores = std::make_shared<v0::MatMul>(q, op.input("key"), false, true);
  scores = std::make_shared<v1::Multiply>(scores, Lowerer::scalar_like(q, 1.0f / std::sqrt(static_cast<float>(e))));
  if (op.count("attn_mask")) {
    Value mask = op.input("attn_mask");
    if (op.type("attn_mask").dtype == DType::Bool)
      // -inf as a float (OpenVINO's Constant refuses it from a double) in the scores' type.
      scores = std::make_shared<v1::Select>(
          mask, scores,
          converted(std::make_shared<v0::Constant>(ov::element::f32, ov::Shape{}, std::vector<float>{-INFINITY}),
                    q.get_element_type()));
    else
      scores = std::make_shared<v1::Add>(scores, converted(mask, q.get_element_type()));
  }
  Value probabilities = std::make_shared<ov::op::v8::Softmax>(scores, -1);
  return {std::make_shared<v0::MatMul>(probabilities, op.input("value"), false, false)};
}

}  // namespace

void add_linear_conv_lowerings(LoweringTable& t) {
  t["scaled_dot_product_attention"] = {check_attention, lower_attention};
  t["linear"] = {[](const OpReader& op) { return same_float_dtype(op, {"weight", "bias"}); },
                 [](Lowerer& op) -> std::vector<Value> {
                   Value y = std::make_shared<v0::MatMul>(op.input("x"), op.input("weight"), false, true);
                   if (op.count("bias")) y = std::make_shared<v1::Add>(y, op.input("bias"));
                   return {y};
                 }};
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
  t["conv"] = {[](const OpReader& op) -> Verdict {
                 Verdict why = same_float_dtype(op, {"weight", "bias"});
                 if (!why.claimed) return why;
                 Window w;
                 return conv_window(op, w);
               },
               [](Lowerer& op) -> std::vector<Value> { return {conv(op)}; }};
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
