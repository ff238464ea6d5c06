#include "ops/register.h"

namespace coremlrt::ops {

void register_constexpr_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
