#include "format/pipeline_message.h"

namespace coremlrt::format {

namespace spec = CoreML::Specification;

bool parse_pipeline(const spec::Model& model, spec::Pipeline& pipeline) {
  switch (model.Type_case()) {
    case spec::Model::kPipeline: return pipeline.ParseFromString(model.pipeline());
    case spec::Model::kPipelineClassifier: {
      spec::PipelineClassifier outer;
      if (!outer.ParseFromString(model.pipelineclassifier())) return false;
      pipeline = outer.pipeline();
      return true;
    }
    case spec::Model::kPipelineRegressor: {
      spec::PipelineRegressor outer;
      if (!outer.ParseFromString(model.pipelineregressor())) return false;
      pipeline = outer.pipeline();
      return true;
    }
    default: return false;
  }
}

}  // namespace coremlrt::format
