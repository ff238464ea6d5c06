#include "ops/register.h"

namespace coremlrt::ops {

// Each family's entries carry its name (KernelRegistry::Entry::family).
#define COREMLRT_OP_FAMILY(family) registry.add_family(#family, register_##family##_kernels)

void register_cpu_kernels(KernelRegistry& registry) {
  COREMLRT_OP_FAMILY(elementwise_binary);
  COREMLRT_OP_FAMILY(elementwise_unary);
  COREMLRT_OP_FAMILY(activation);
  COREMLRT_OP_FAMILY(reduction);
  COREMLRT_OP_FAMILY(linear);
  COREMLRT_OP_FAMILY(conv);
  COREMLRT_OP_FAMILY(pool);
  COREMLRT_OP_FAMILY(normalization);
  COREMLRT_OP_FAMILY(shape);
  COREMLRT_OP_FAMILY(slice);
  COREMLRT_OP_FAMILY(space);
  COREMLRT_OP_FAMILY(tensor_ops);
  COREMLRT_OP_FAMILY(gather);
  COREMLRT_OP_FAMILY(constexpr);
  COREMLRT_OP_FAMILY(state);
  COREMLRT_OP_FAMILY(attention);
  COREMLRT_OP_FAMILY(misc);
  COREMLRT_OP_FAMILY(recurrent);
  COREMLRT_OP_FAMILY(resize);
  COREMLRT_OP_FAMILY(control_flow);
  COREMLRT_OP_FAMILY(sampling);
  COREMLRT_OP_FAMILY(detection);
  COREMLRT_OP_FAMILY(random);
  COREMLRT_OP_FAMILY(quantization);
  COREMLRT_OP_FAMILY(dynamic_quantization);
  COREMLRT_OP_FAMILY(classify);
  COREMLRT_OP_FAMILY(glm);
  COREMLRT_OP_FAMILY(feature_engineering);
  COREMLRT_OP_FAMILY(recommender);
  COREMLRT_OP_FAMILY(svm);
  COREMLRT_OP_FAMILY(tree_ensemble);
  COREMLRT_OP_FAMILY(nearest_neighbors);
}

#undef COREMLRT_OP_FAMILY

}  // namespace coremlrt::ops
