#pragma once
// A compiled OpenVINO region as one kernel of the plan (src/backends/backend.h): shared by every
// execution context; each context's infer request is its KernelContext::kernel_state().
#include <openvino/runtime/compiled_model.hpp>

#include <memory>
#include <vector>

#include "backends/backend.h"

namespace coremlrt::backends::openvino {

// `kept` are the plan constants the compiled model was built from (views, not copies).
std::unique_ptr<ops::Kernel> make_region_kernel(ov::CompiledModel compiled, const Region& region, std::vector<Tensor> kept);

}  // namespace coremlrt::backends::openvino
