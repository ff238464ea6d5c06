#pragma once
// Reads a Model protobuf (through our own .proto subset) into a ModelDescription and, for
// ML programs, an ir::Program whose constants are tensors (blob-backed ones are views into
// the memory-mapped weight files).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coremlrt/description.h"
#include "format/feature_codes.h"
#include "format/neural_network/reader.h"
#include "format/package.h"
#include "ir/program.h"

namespace coremlrt::format {

struct LoadedModel {
  ModelFiles files;
  ModelDescription description;
  // ML programs, and neuralNetwork models whose every layer translated; empty otherwise.
  ir::Program program;
  NeuralNetworkReading network;  // neuralNetwork models: their layers and why any cannot run
  // Classic, feature-engineering and pipeline models: why the model cannot run (a refused
  // stage or feature kind, a malformed message); the program is empty then.
  std::string problem;
  size_t weight_bytes = 0;    // bytes of all weight files the program references
  // Per function of the program: its class labels and string vocabularies (format/feature_codes.h).
  std::map<std::string, FeatureCodes> feature_codes;
};

// Highest specification version this build reads (Core ML 9 / iOS 26).
constexpr int kMaxSpecificationVersion = 10;

LoadedModel read_model(const ModelFiles& files);

// One stage of a pipeline as a model of its own, for describing its structure (not for running
// it: read_model splices the stages into one program): its description and, by its type, its
// ML program (ops and value types; weights stay references), its neuralNetwork layers or its own
// stages. Classic stages carry their description only.
struct PipelineStageModel {
  std::string name;  // the pipeline's name for it, or "model<i>"
  LoadedModel model;
  std::vector<PipelineStageModel> stages;  // a nested pipeline's
};

// The stages of the pipeline in `files` (a .mlmodel, an .mlpackage, or an .mlmodelc that coremlrt
// compiled). Throws Error when the file is no pipeline or does not parse.
std::vector<PipelineStageModel> read_pipeline_stages(const ModelFiles& files);

}  // namespace coremlrt::format
