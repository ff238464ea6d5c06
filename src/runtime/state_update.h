#pragma once
// KV-cache steps planned as one in-place update of the state's buffer.
//
// coremltools writes `cache[i, :, p:p+T] = kv` on a state as
//     v = read_state(S); u = slice_update(v, kv, begin, end); write_state(S, u)
// and, in fp32 programs over an fp16 state, with casts around the slice_update:
//     v = read_state(S); c = cast(v, fp32); u = slice_update(c, kv, ...); d = cast(u, fp16); write_state(S, d)
// Run op by op, every step copies the whole state (and the casts convert all of it) to change
// one position. When nothing else reads what the slice_update makes, the planner replaces it by one
// step that writes the update into the state's buffer (ops::in_place_state_slice_update), at
// the write_state's place in the plan.
//
// A scatter_nd of mode "update" in the slice_update's place is done the same way
// (ops::in_place_state_scatter_nd): Core AI programs write `cache[layer].index_copy_(1, rows, kv)`
// as one scatter_nd into the state (python/coremlrt/coreai/_ops_elementwise.py, _where).
#include <functional>
#include <string>
#include <vector>

#include "runtime/plan.h"

namespace coremlrt::runtime {

// Indices into a block's steps of one such chain; widen and narrow are -1 without casts. read
// and widen are also -1 when their value has readers outside the chain: those steps stay.
struct StateUpdateChain {
  int read = -1, widen = -1, update = -1, narrow = -1, write = -1;
  int state_slot = -1;
  bool scatter = false;  // the update is a scatter_nd (mode "update"), not a slice_update
};

// The chains of `block` (the function's top-level block) that may be updated in place: each
// value from the slice_update on is read once, by the next op of the chain, and is not a block
// output; no other write_state to the same state lies between the chain's read and its write.
std::vector<StateUpdateChain> find_state_update_chains(const Plan& plan, const BlockPlan& block,
                                                       const backends::ValueInfo& values,
                                                       const std::function<int(const std::string&)>& slot_of);

}  // namespace coremlrt::runtime
