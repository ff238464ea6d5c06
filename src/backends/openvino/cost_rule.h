#pragma once
// The cost rule of backend "auto" (docs/design/architecture.md, "Backends", 5): whether a region
// does enough work to pay for an OpenVINO call, from the costs the ops' registry entries declare
// (src/ops/op_cost.h). The memory rule is weight_memory.h's.
#include "backends/backend.h"

namespace coremlrt::backends::openvino {

// Claimed when the region pays for OpenVINO's per-call cost; refused with why not.
Verdict pays_for_a_call(const Region& region, const BackendOptions& options);

// Whether backend "auto" leaves `op` to our kernel: its cost says ours runs it as fast on fp32
// weights (ops::OpCost::ours_on_fp32_weights), and every weight it reads is an fp32 constant.
bool ours_on_fp32_weights(const ir::Operation& op, const ValueInfo& values, int ios_version);

}  // namespace coremlrt::backends::openvino
