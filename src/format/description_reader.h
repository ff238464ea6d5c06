#pragma once
// A Core ML model's description (inputs, outputs, states, functions, metadata) read from its
// specification message (proto/Model.proto, FeatureTypes.proto), for spec_reader.cc.
#include "Model.pb.h"
#include "coremlrt/description.h"

namespace coremlrt::format {

ModelDescription read_description(const CoreML::Specification::Model& model);

}  // namespace coremlrt::format
