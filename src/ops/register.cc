#include "ops/register.h"

namespace coremlrt::ops {

void register_cpu_kernels(KernelRegistry& registry) {
  register_elementwise_binary_kernels(registry);
  register_elementwise_unary_kernels(registry);
  register_activation_kernels(registry);
  register_reduction_kernels(registry);
  register_linear_kernels(registry);
  register_conv_kernels(registry);
  register_pool_kernels(registry);
  register_normalization_kernels(registry);
  register_shape_kernels(registry);
  register_gather_kernels(registry);
  register_constexpr_kernels(registry);
  register_state_kernels(registry);
  register_attention_kernels(registry);
  register_misc_kernels(registry);
  register_recurrent_kernels(registry);
  register_resize_kernels(registry);
  register_control_flow_kernels(registry);
  register_sampling_kernels(registry);
  register_detection_kernels(registry);
  register_random_kernels(registry);
  register_quantization_kernels(registry);
  register_dynamic_quantization_kernels(registry);
  register_classify_kernels(registry);
  register_glm_kernels(registry);
  register_feature_engineering_kernels(registry);
  register_recommender_kernels(registry);
  register_svm_kernels(registry);
  register_tree_ensemble_kernels(registry);
  register_nearest_neighbors_kernels(registry);
}

}  // namespace coremlrt::ops
