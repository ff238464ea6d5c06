#include "ops/register.h"

namespace coremlrt::ops {

void register_state_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
