#include "ops/register.h"

namespace coremlrt::ops {

void register_pool_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
