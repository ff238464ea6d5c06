#include "ops/register.h"

namespace coremlrt::ops {

void register_reduction_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
