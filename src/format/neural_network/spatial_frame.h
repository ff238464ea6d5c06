#pragma once
// The layers of the convolution, pooling and normalization families read blobs whose last
// `spatial` + 1 axes are [C, *spatial] (in the rank-5 layout [Seq, Batch, C, H, W], in the
// exact-rank layout [.., C, H, W]), while the ops they map onto (conv, max_pool, batch_norm,
// ...; docs/reports/ops.md) take [N, C, *spatial]. A SpatialFrame folds the leading axes into N
// before the op and unfolds them after it.
#include <vector>

#include "format/neural_network/layer_translator.h"

namespace coremlrt::format::neural_network {

class SpatialFrame {
 public:
  // Refuses blobs of rank below spatial + 1, and blobs whose channel or spatial sizes or
  // whose leading axes are unknown in a way one reshape cannot express.
  SpatialFrame(LayerContext& layer, const Value& x, int spatial);

  // x as [N, C, *spatial].
  const Value& folded() const { return folded_; }
  // The folded blob's dims: [N, C, *spatial].
  const std::vector<int64_t>& folded_dims() const { return folded_.type.dims; }
  // The type of the op's output for per-image dims `dims` ([C', *spatial']).
  ir::ValueType folded_type(const std::vector<int64_t>& dims) const;
  // The op's output y ([N, C', *spatial']) given the input's leading axes back.
  Value unfold(const Value& y) const;

 private:
  LayerContext& layer_;
  Value x_, folded_;
  std::vector<int64_t> lead_;   // the axes before C
  int spatial_;
};

}  // namespace coremlrt::format::neural_network
