#include "ops/register.h"

namespace coremlrt::ops {

void register_resize_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
