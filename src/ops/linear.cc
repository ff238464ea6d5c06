#include "ops/register.h"

namespace coremlrt::ops {

void register_linear_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
