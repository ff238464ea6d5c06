#include "ops/register.h"

namespace coremlrt::ops {

void register_conv_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
