#include "ops/register.h"

namespace coremlrt::ops {

void register_attention_kernels(KernelRegistry& registry) {}

}  // namespace coremlrt::ops
