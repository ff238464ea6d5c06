#pragma once
// Explicit registration: one function per op family, no static initialisers. A family is the
// file of src/ops its kernels live in (register_<family>_kernels in <family>.cc), and the name
// every other layer gives its file for the same ops (docs/guide/adding-an-op.md).
#include "ops/kernel.h"

namespace coremlrt::ops {

void register_cpu_kernels(KernelRegistry& registry);

void register_elementwise_binary_kernels(KernelRegistry& registry);
void register_elementwise_unary_kernels(KernelRegistry& registry);
void register_activation_kernels(KernelRegistry& registry);
void register_reduction_kernels(KernelRegistry& registry);
void register_linear_kernels(KernelRegistry& registry);
void register_conv_kernels(KernelRegistry& registry);
void register_pool_kernels(KernelRegistry& registry);
void register_normalization_kernels(KernelRegistry& registry);
void register_shape_kernels(KernelRegistry& registry);
void register_slice_kernels(KernelRegistry& registry);
void register_space_kernels(KernelRegistry& registry);
void register_tensor_ops_kernels(KernelRegistry& registry);
void register_gather_kernels(KernelRegistry& registry);
void register_constexpr_kernels(KernelRegistry& registry);
void register_state_kernels(KernelRegistry& registry);
void register_attention_kernels(KernelRegistry& registry);
void register_misc_kernels(KernelRegistry& registry);
void register_recurrent_kernels(KernelRegistry& registry);
void register_resize_kernels(KernelRegistry& registry);
void register_control_flow_kernels(KernelRegistry& registry);
void register_sampling_kernels(KernelRegistry& registry);
void register_detection_kernels(KernelRegistry& registry);
void register_random_kernels(KernelRegistry& registry);
void register_quantization_kernels(KernelRegistry& registry);
void register_dynamic_quantization_kernels(KernelRegistry& registry);
void register_classify_kernels(KernelRegistry& registry);
void register_glm_kernels(KernelRegistry& registry);
void register_feature_engineering_kernels(KernelRegistry& registry);
void register_recommender_kernels(KernelRegistry& registry);
void register_svm_kernels(KernelRegistry& registry);
void register_tree_ensemble_kernels(KernelRegistry& registry);
void register_nearest_neighbors_kernels(KernelRegistry& registry);

}  // namespace coremlrt::ops
