#pragma once
// The runtime's half of the backend seam (src/backends/backend.h): after constant folding,
// decide which backend runs which top-level step of a function.
//
// Backends propose, op by op, in priority order; an op goes to the first backend that claims
// it. Ops whose registry traits forbid it (state ops, classify's label encoding, ops that must
// not be folded, ops with nested blocks) stay on our kernels whatever a backend says, so no
// backend needs to know them. Each maximal run of consecutive steps given to one backend is a
// region; contiguous runs of a topologically ordered block are always convex, so a region's
// inputs are all computed before it and its outputs all read after it. A region the backend's
// cost rule turns down, or whose compilation fails, keeps its steps on our kernels, and its ops
// say why in the plan's placements.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/plan.h"

namespace coremlrt::runtime {

// Replaces the claimed runs of `plan.body.steps` by region steps and fills in the placements
// of the ops still in the body. `slot_of` resolves a top-level value name to its slot.
// Release lists of the body are stale afterwards: the caller recomputes them.
void partition_body(Plan& plan, const backends::ValueInfo& values,
                    const std::vector<std::shared_ptr<const backends::Backend>>& backends,
                    const std::function<int(const std::string&)>& slot_of);

}  // namespace coremlrt::runtime
