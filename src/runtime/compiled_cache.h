#pragma once
// The folder where backends cache compiled models (LoadOptions::cache_dir; the OpenVINO backend
// writes one `<key>.blob` per compiled region, src/backends/openvino/region_cache.h). Every distinct model and
// option set adds entries, so without a budget the folder only grows; Core ML's own cache of
// compiled models is purged by the system the same way.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace coremlrt::runtime {

// The budget when LoadOptions::cache_limit_bytes is 0: $COREMLRT_CACHE_LIMIT_BYTES when set to a
// positive integer, else 2 GiB.
uint64_t default_cache_limit_bytes();

// When the folder was last changed (an entry written or removed); nullopt if it does not exist.
std::optional<std::filesystem::file_time_type> cache_folder_stamp(const std::string& dir);

// Removes the least recently used entries (by the later of their access and write times) until
// the entries' total size is at most `limit_bytes`. Only backend cache entries (`*.blob` files
// directly in `dir`) are considered. Never throws: a cache that cannot be pruned is still a cache.
void keep_cache_within(const std::string& dir, uint64_t limit_bytes);

}  // namespace coremlrt::runtime
