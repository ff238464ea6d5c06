#pragma once
// Locating the model inside what the user passed: an .mlpackage folder (Manifest.json
// names the root model item), a compiled .mlmodelc folder or a single .mlmodel protobuf file.
#include <string>

namespace coremlrt::format {

struct ModelFiles {
  std::string model_file;  // the serialized Model protobuf
  std::string model_dir;   // what "@model_path" stands for in blob references
  bool is_package = false;
  bool compiled = false;   // a compiled folder (.mlmodelc): see compiled_model.h
  bool in_memory = false;  // registered bytes (memory_model.h): model_file is the memory path
  // The folder the model (its .mlmodel file, .mlpackage or .mlmodelc folder) lies in, where a
  // pipeline's linked models are looked for; empty for a model in memory.
  std::string location;
};

// Throws Error naming the path and what was expected when it is not a model.
ModelFiles locate_model(const std::string& path);

}  // namespace coremlrt::format
