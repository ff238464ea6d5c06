#pragma once
// The packed forms of the constexpr_* ops (KernelRegistry::Entry::packed, src/ops/kernel.h):
// each describes the op's result as a packed constant (src/ir/packed.h) whose arrays are the
// op's own inputs, so nothing is decoded at load. Each returns an empty vector when the op's
// parameters have no packed form (a vector palette, an integer palette, a cast); the planner
// then folds the op with its kernel (src/ops/constexpr.cc), whose checks report bad parameters.
#include <memory>
#include <vector>

#include "ops/kernel.h"

namespace coremlrt::ops {

using PackedOutputs = std::vector<std::shared_ptr<const ir::ConstValue>>;

PackedOutputs pack_affine_dequantize(KernelBuilder& b);
PackedOutputs pack_blockwise_shift_scale(KernelBuilder& b);
PackedOutputs pack_lut_to_dense(KernelBuilder& b);
PackedOutputs pack_sparse_to_dense(KernelBuilder& b);
PackedOutputs pack_lut_to_sparse(KernelBuilder& b);
PackedOutputs pack_sparse_blockwise_shift_scale(KernelBuilder& b);

}  // namespace coremlrt::ops
