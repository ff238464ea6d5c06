#include "ops/register.h"

namespace coremlrt::ops {

void register_normalization_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
