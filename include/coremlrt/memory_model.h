#pragma once
// A model given as bytes: a serialized Model protobuf and its weight files (by their path
// inside the model, "weights/weight.bin"). While the handle lives, path() names the model for
// Model::load, inspect_model, read_model_structure and compile_model; no file is written.
// Models loaded from it keep their weights after the handle is gone.
#include <map>
#include <string>

namespace coremlrt {

class MemoryModelHandle {
 public:
  // Throws Error for a blob name that leaves the model or a weight file with a bad header.
  MemoryModelHandle(std::string spec, const std::map<std::string, std::string>& blobs);
  ~MemoryModelHandle();
  MemoryModelHandle(const MemoryModelHandle&) = delete;
  MemoryModelHandle& operator=(const MemoryModelHandle&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace coremlrt
