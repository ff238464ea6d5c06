#include "ops/register.h"

namespace coremlrt::ops {

void register_shape_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
