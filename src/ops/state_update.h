#pragma once
// A KV-cache step: read_state -> slice_update (or scatter_nd) -> write_state, with the fp32 programs' casts
// around the slice_update (read_state -> cast fp32 -> slice_update -> cast fp16 -> write_state),
// done as one kernel that writes the update into the state's own buffer. src/runtime/plan.cc
// recognises the chain and plans this kernel in place of it; the kernel is in slice.cc, next to
// slice_update, whose slicing rules it shares.
#include <memory>

#include "ops/kernel.h"

namespace coremlrt::ops {

// `b` builds the chain's slice_update op (its update, begin, end and masks); `state_input` is
// the index of the state among the step's inputs (bound by the caller before the factory runs).
// With casts around the slice_update, the update (fp32) is written rounded to the state's fp16:
// exactly what cast(slice_update(cast(state)), fp16) gives, since fp16 -> fp32 -> fp16 returns
// every fp16 value unchanged.
std::unique_ptr<Kernel> in_place_state_slice_update(KernelBuilder& b, int state_input);

// The same for a scatter_nd of mode "update" (the chain's update op, built by `b`): each index
// tuple's slice of the state is overwritten in place, in order, as scatter_nd would write its
// copy. The kernel is in gather.cc, next to scatter_nd.
std::unique_ptr<Kernel> in_place_state_scatter_nd(KernelBuilder& b, int state_input);

}  // namespace coremlrt::ops
