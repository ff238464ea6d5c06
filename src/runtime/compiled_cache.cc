#include "compiled_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace coremlrt::runtime {

namespace fs = std::filesystem;

uint64_t default_cache_limit_bytes() {
  if (const char* env = std::getenv("COREMLRT_CACHE_LIMIT_BYTES")) {
    char* end = nullptr;
    unsigned long long value = std::strtoull(env, &end, 10);
    if (end != env && *end == '\0' && value > 0) return value;
  }
  return uint64_t{2} << 30;
}

std::optional<fs::file_time_type> cache_folder_stamp(const std::string& dir) {
  std::error_code error;
  auto stamp = fs::last_write_time(dir, error);
  if (error) return std::nullopt;
  return stamp;
}

void keep_cache_within(const std::string& dir, uint64_t limit_bytes) {
  struct Entry {
    fs::path path;
    uint64_t bytes;
    int64_t last_used_ns;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const fs::path& path = it->path();
    if (path.extension() != ".blob") continue;
    struct stat info;
    if (::lstat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) continue;
    // File systems mounted relatime update the access time at most daily; the write time
    // covers entries written since.
    int64_t accessed = int64_t{info.st_atim.tv_sec} * 1'000'000'000 + info.st_atim.tv_nsec;
    int64_t written = int64_t{info.st_mtim.tv_sec} * 1'000'000'000 + info.st_mtim.tv_nsec;
    entries.push_back({path, static_cast<uint64_t>(info.st_size), std::max(accessed, written)});
    total += static_cast<uint64_t>(info.st_size);
  }
  if (total <= limit_bytes) return;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.last_used_ns < b.last_used_ns; });
  for (const Entry& entry : entries) {
    if (total <= limit_bytes) break;
    // Another process may be reading this entry: unlinking leaves its open file intact, and a
    // later load that misses simply compiles again.
    if (fs::remove(entry.path, error)) total -= entry.bytes;
  }
}

}  // namespace coremlrt::runtime
