#include "ops/register.h"

namespace coremlrt::ops {

void register_elementwise_unary_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
