#include "ops/register.h"

namespace coremlrt::ops {

void register_activation_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
