#include "format/memory_model.h"

#include <atomic>
#include <filesystem>
#include <mutex>

#include "coremlrt/error.h"
#include "coremlrt/memory_model.h"

namespace coremlrt::format {

namespace {

std::mutex g_mutex;
std::map<std::string, std::shared_ptr<const MemoryModel>> g_models;
std::atomic<uint64_t> g_next{1};

}  // namespace

std::string register_memory_model(std::string spec, const std::map<std::string, std::string>& blobs) {
  auto model = std::make_shared<MemoryModel>();
  model->spec = std::move(spec);
  for (const auto& [name, bytes] : blobs) {
    std::filesystem::path relative = std::filesystem::path(name).lexically_normal();
    COREMLRT_CHECK(!name.empty() && !relative.is_absolute() && relative.string().rfind("..", 0) != 0,
                   "blob mapping key '", name, "' is not a path inside the model");
    model->blobs[relative.string()] = BlobFile::from_memory("blob mapping '" + name + "'", bytes);
  }
  std::string path = kMemoryModelPrefix + std::to_string(g_next++);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_models[path] = std::move(model);
  return path;
}

void unregister_memory_model(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_models.erase(path);
}

std::shared_ptr<const MemoryModel> find_memory_model(const std::string& path) {
  if (path.rfind(kMemoryModelPrefix, 0) != 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_models.find(path);
  COREMLRT_CHECK(it != g_models.end(), "model '", path, "' was given in memory and has been released");
  return it->second;
}

}  // namespace coremlrt::format

namespace coremlrt {

MemoryModelHandle::MemoryModelHandle(std::string spec, const std::map<std::string, std::string>& blobs)
    : path_(format::register_memory_model(std::move(spec), blobs)) {}

MemoryModelHandle::~MemoryModelHandle() { format::unregister_memory_model(path_); }

}  // namespace coremlrt
