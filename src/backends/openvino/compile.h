#pragma once
// Compiling a region (docs/design/architecture.md, "Backends", 6): imported from the region cache
// when an entry matches (region_cache.h), else built (region_builder.h), compiled by the CPU
// plugin and stored in the cache; either way one kernel (region_kernel.h).
#include <memory>

#include "backends/backend.h"

namespace coremlrt::backends::openvino {

std::unique_ptr<ops::Kernel> compile_region(const Region& region, const BackendOptions& options);

}  // namespace coremlrt::backends::openvino
