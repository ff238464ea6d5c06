#pragma once
// The Pipeline message inside a pipeline, pipelineClassifier or pipelineRegressor model (its
// stages as serialized Model messages), for the readers of format/ that walk stages.
#include "Model.pb.h"
#include "classic_pipeline.pb.h"

namespace coremlrt::format {

// False when the model is no pipeline or its message does not parse.
bool parse_pipeline(const CoreML::Specification::Model& model, CoreML::Specification::Pipeline& pipeline);

}  // namespace coremlrt::format
