#include "ops/register.h"

namespace coremlrt::ops {

void register_recurrent_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
