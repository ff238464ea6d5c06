#pragma once
// Models given as bytes rather than files (coremltools' MLModelAsset.from_memory): a
// serialized Model and its weight files, registered under a path of the form
// "coremlrt-memory:N" that locate_model() and read_model() resolve, so the whole load path
// (Model::load, inspect, structure, compile) takes them unchanged. Nothing is written to disk.
#include <map>
#include <memory>
#include <string>

#include "format/blob_file.h"

namespace coremlrt::format {

inline constexpr const char* kMemoryModelPrefix = "coremlrt-memory:";

struct MemoryModel {
  std::string spec;  // the serialized Model protobuf
  // Weight files by their path inside the model ("weights/weight.bin"), as "@model_path/..."
  // names them.
  std::map<std::string, std::shared_ptr<BlobFile>> blobs;
};

// Registers a model and returns its path. Blob names must be relative paths inside the model.
std::string register_memory_model(std::string spec, const std::map<std::string, std::string>& blobs);
void unregister_memory_model(const std::string& path);
// The registered model at `path`; null when `path` is not a memory path. Throws Error for a
// memory path that is not (or no longer) registered.
std::shared_ptr<const MemoryModel> find_memory_model(const std::string& path);

}  // namespace coremlrt::format
