#pragma once
// The classic predictors' ops (glm, svm, tree_ensemble, nearest_neighbors) read every value
// bound to their variadic input `x` (the model's input features, in description order) as
// one vector of doubles: Core ML evaluates these models in double precision, and joins a
// model's several input features into one vector in that order (src/format/classic/predictor.h).
#include <memory>
#include <string>
#include <vector>

#include "ops/kernel.h"

namespace coremlrt::ops {

// The op's parameter `name`, a constant tensor of `dtype` with `rank` dims (fails otherwise).
// The copy shares the constant's storage, so a kernel may capture it.
Tensor constant_tensor(const KernelBuilder& b, const std::string& name, DType dtype, int rank);

class FeatureVector {
 public:
  // Reads the inputs bound to `x`; `width` (-1: any) is how many values they must hold.
  FeatureVector(KernelBuilder& b, int64_t width);
  // Reads the given inputs (indices from KernelBuilder::input / variadic_input).
  FeatureVector(std::vector<int> inputs, int64_t width) : inputs_(std::move(inputs)), width_(width) {}
  // The features of one prediction; fails naming the op when their count is not `width`.
  std::vector<double> read(const KernelContext& ctx) const;

 private:
  std::vector<int> inputs_;
  int64_t width_;
};

// Output 0's shape as the program declares it (the translator fixes it statically).
Shape declared_output_shape(const KernelBuilder& b, int index);

}  // namespace coremlrt::ops
