#include "ops/register.h"

namespace coremlrt::ops {

void register_gather_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
