// scaled_dot_product_attention (docs/design/coreml-format.md, "scaled_dot_product_attention"):
// softmax(Q K^T / sqrt(E) + mask) V over the last axis, computed in float per batch matrix,
// the softmax rows as the softmax op computes them (vector_math.h, softmax_floats).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/gemm.h"
#include "ops/register.h"
#include "ops/util.h"
#include "ops/vector_math.h"

namespace coremlrt::ops {

namespace {

// The mask as additive floats: bool True (attend) -> 0, False -> -inf; float masks as is.
std::vector<float> additive_mask(const Tensor& m) {
  std::vector<float> out(static_cast<size_t>(m.numel()));
  if (m.dtype == DType::Bool) {
    const uint8_t* p = m.ptr<uint8_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i] ? 0.0f : -std::numeric_limits<float>::infinity();
  } else {
    std::vector<float> scratch;
    const float* p = read_floats(m, scratch);
    std::copy(p, p + out.size(), out.begin());
  }
  return out;
}

std::unique_ptr<Kernel> make_sdpa(KernelBuilder& b) {
  const int q = b.input("query"), k = b.input("key"), v = b.input("value");
  const int mask = b.optional_input("attn_mask");
  const DType dq = b.input_type("query").dtype;
  b.check(is_fp32_or_fp16(dq), "query must be fp16 or fp32, got ", dtype_name(dq));
  b.check(b.input_type("key").dtype == dq && b.input_type("value").dtype == dq, "query, key and value must share a dtype");
  b.check(b.output_type(0).dtype == dq, "output dtype must equal query's");
  if (mask >= 0) {
    const DType dm = b.input_type("attn_mask").dtype;
    b.check(dm == DType::Bool || is_fp32_or_fp16(dm), "attn_mask must be bool, fp16 or fp32, got ", dtype_name(dm));
  }
  return make_kernel([q, k, v, mask](KernelContext& ctx) {
    const Tensor& tq = ctx.input(q);
    const Tensor& tk = ctx.input(k);
    const Tensor& tv = ctx.input(v);
    const int64_t rank = tq.rank();
    if (rank < 3 || tk.rank() != rank || tv.rank() != rank)
      ctx.fail("query, key and value must share a rank >= 3, got ", shape_str(tq.shape), ", ", shape_str(tk.shape),
               ", ", shape_str(tv.shape));
    const Shape batch(tq.shape.begin(), tq.shape.end() - 2);
    if (!std::equal(batch.begin(), batch.end(), tk.shape.begin()) || !std::equal(batch.begin(), batch.end(), tv.shape.begin()))
      ctx.fail("query, key and value must share batch dims: ", shape_str(tq.shape), ", ", shape_str(tk.shape), ", ",
               shape_str(tv.shape));
    const int64_t L = tq.shape[rank - 2], E = tq.shape[rank - 1], S = tk.shape[rank - 2], EV = tv.shape[rank - 1];
    if (tk.shape[rank - 1] != E || tv.shape[rank - 2] != S)
      ctx.fail("mismatched attention shapes: query ", shape_str(tq.shape), ", key ", shape_str(tk.shape), ", value ",
               shape_str(tv.shape));
    Shape out_shape = batch;
    out_shape.push_back(L);
    out_shape.push_back(EV);
    Tensor& out = ctx.allocate_output(0, tq.dtype, out_shape);

    // Mask strides over [batch..., L, S]; 0 where the mask broadcasts.
    Shape scores_shape = batch;
    scores_shape.push_back(L);
    scores_shape.push_back(S);
    std::vector<float> mask_values;
    std::vector<int64_t> mask_strides(scores_shape.size(), 0);
    if (mask >= 0) {
      const Tensor& tm = ctx.input(mask);
      if (tm.rank() > static_cast<int64_t>(scores_shape.size()) || broadcast_shapes(tm.shape, scores_shape) != scores_shape)
        ctx.fail("attn_mask ", shape_str(tm.shape), " does not broadcast to ", shape_str(scores_shape));
      mask_values = additive_mask(tm);
      mask_strides = broadcast_strides(tm.shape, scores_shape);
    }
    const std::vector<int64_t> batch_mask_strides(mask_strides.begin(), mask_strides.end() - 2);
    const int64_t ms_l = mask_strides[rank - 2], ms_s = mask_strides[rank - 1];

    // The mask's offset for the matrix at flat batch index i.
    auto mask_offset = [&](int64_t i) {
      int64_t offset = 0;
      for (size_t d = batch.size(); d-- > 0;) {
        offset += i % batch[d] * batch_mask_strides[d];
        i /= batch[d];
      }
      return offset;
    };

    // Q, K and V are read in place by the GEMM (K^T is K with swapped strides). Each matrix
    // (an attention head) is computed whole by one thread, so results do not depend on the
    // number of threads: spread over the threads when there are enough of them (a decode
    // step's heads are a microsecond each, too small for gemm to split), else one after the
    // other, each product split by gemm itself.
    std::vector<float> os;
    float* op = float_output(out, os);
    const float scale = 1.0f / std::sqrt(static_cast<float>(E));
    const int64_t count = shape_numel(batch);
    auto heads = [&](int64_t begin, int64_t end) {
      std::vector<float> scores(static_cast<size_t>(L * S));
      for (int64_t i = begin; i < end; ++i) {
        gemm(L, S, E, matrix_view(tq, i * L * E, E), matrix_view(tk, i * S * E, 1, E), scores.data(), S, false);
        const float* m = mask >= 0 ? mask_values.data() + mask_offset(i) : nullptr;
        for (int64_t l = 0; l < L; ++l) {
          float* row = scores.data() + l * S;
          for (int64_t s = 0; s < S; ++s) row[s] = m ? row[s] * scale + m[l * ms_l + s * ms_s] : row[s] * scale;
          softmax_floats(row, row, S);  // a fully masked row yields NaN, as in PyTorch
        }
        gemm(L, EV, S, MatrixView(scores.data(), S), matrix_view(tv, i * S * EV, EV), op + i * L * EV, EV, false);
      }
    };
    if (count >= available_threads()) parallel_for(count, 1, heads);
    else heads(0, count);
    commit_float_output(out, op);
  });
}

// query . key^T and the probabilities . value: each a product of query's elements with the keys' length.
OpCost sdpa_cost() {
  OpCost cost;
  cost.macs = [](const CostReader& op) -> double {
    const ir::ValueType* query = op.type("query");
    const ir::ValueType* key = op.type("key");
    if (!query || !key) return 0;
    const double keys = key->dims.size() >= 2 ? cost_extent(key->dims[key->dims.size() - 2]) : 1;
    return 2 * cost_numel(*query) * keys;
  };
  return cost;
}

}  // namespace

void register_attention_kernels(KernelRegistry& registry) {
  registry.add("scaled_dot_product_attention", kFloat, make_sdpa, 18).cost = sdpa_cost();
}

}  // namespace coremlrt::ops
