#pragma once
// Optional inputs with a default value (coremltools' TensorType(default_value=...), written as
// the description's floatDefaultValue / intDefaultValue / doubleDefaultValue): when a caller
// leaves such an input out, Core ML feeds an array of the declared (default) shape filled with
// that value (docs/design/declared-shapes.md). An optional sequence (an itemSimilarityRecommender's
// restriction or exclusion list) left out is the one code kAbsentSequenceCode
// (include/coremlrt/description.h), which its reader tells from an empty list.
#include "coremlrt/description.h"
#include "coremlrt/tensor.h"

namespace coremlrt::runtime {

// The array Core ML would feed for an absent optional input: `feature.shape`, `feature.dtype`,
// every element `*feature.default_value`; for a sequence, int64 [1] holding kAbsentSequenceCode. Throws Error naming `where` when the feature has no
// default value or no fixed shape to fill.
Tensor default_input(const FeatureDescription& feature, const std::string& where);

}  // namespace coremlrt::runtime
