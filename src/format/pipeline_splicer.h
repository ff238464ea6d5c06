#pragma once
// Core ML pipelines (pipeline, pipelineClassifier, pipelineRegressor): each stage is a whole
// model, already translated into a typed program of its own (src/format/spec_reader.cc reads
// and translates them). The splicer joins them into one function, so one plan runs the whole
// pipeline: features flow by name, each stage reading the pipeline's inputs or the outputs of
// earlier stages (a later stage's output of a name hides an earlier one's), every value renamed
// to stay unique, and the pipeline's outputs are the features its description names. The
// function takes the opset of its ML-program stages (they must agree); the other stages'
// ops mean the same in every opset.
#include <string>
#include <vector>

#include "coremlrt/description.h"
#include "ir/program.h"

namespace coremlrt::format {

struct PipelineStage {
  std::string label;               // "stage 1 'scaler' (scaler)", for errors
  FunctionDescription description; // the stage model's own inputs and outputs
  ir::Program program;             // its translation; one function, outputs in description order
  bool fixed_opset = false;        // an ML program: its ops run under its own opset
};

// `model_type` names the pipeline in errors.
ir::Program splice_pipeline(std::vector<PipelineStage> stages, const FunctionDescription& description,
                            const std::string& model_type);

}  // namespace coremlrt::format
