#pragma once
// A compiled OpenVINO region as one kernel of the plan (src/backends/backend.h): shared by every
// execution context; each context's infer request is its KernelContext::kernel_state().
#include <openvino/runtime/compiled_model.hpp>
#include <openvino/runtime/tensor.hpp>

#include <memory>
#include <vector>

#include "backends/backend.h"

namespace coremlrt::backends::openvino {

// `kept` are the plan constants the compiled model was built from (views, not copies); `blob`, the
// memory-mapped file it was imported from instead (region_cache.h), or an empty tensor.
// `streams`: the infer requests the compiled model runs side by side (ov::num_streams; 1 under
// the latency hint). With several, every call is handed to the streams' own threads.
// `guarded`: the model has one more output after the region's, a boolean scalar; when a run
// yields false, its results are dropped and the region's ops run on our kernels (nested block 0).
std::unique_ptr<ops::Kernel> make_region_kernel(ov::CompiledModel compiled, const Region& region, std::vector<Tensor> kept,
                                                int streams, bool guarded, ov::Tensor blob);

}  // namespace coremlrt::backends::openvino
