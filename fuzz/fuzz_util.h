#pragma once
// Helpers shared by the fuzz targets (fuzz/README.md): files the readers can open, made from
// the fuzzer's bytes without touching the disk.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <google/protobuf/stubs/logging.h>

#include "coremlrt/error.h"

namespace coremlrt::fuzz {

// A folder of this process under /dev/shm (memory), removed at exit. The path is kept in a
// string that is never destroyed, so the exit handler cannot outlive it.
inline const std::string& scratch_dir() {
  static const std::string* dir = [] {
    auto* path = new std::string(
        (std::filesystem::exists("/dev/shm") ? std::string("/dev/shm") : std::filesystem::temp_directory_path().string()) +
        "/coremlrt-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(*path);
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch_dir(), ec); });
    return path;
  }();
  return *dir;
}

inline void write_file(const std::string& path, std::string_view bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// protobuf logs every string field that is not UTF-8 to stderr before the parse fails (and
// the reader reports it as an Error); at fuzzing speed that is noise and lost time.
inline const bool protobuf_logs_silenced = [] {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}();

// Reads a little-endian u16 length prefix and splits `data` into (first part, rest).
inline std::pair<std::string_view, std::string_view> split_prefixed(const uint8_t* data, size_t size) {
  if (size < 2) return {{}, {reinterpret_cast<const char*>(data), size}};
  size_t first = std::min<size_t>(data[0] | (data[1] << 8), size - 2);
  std::string_view all(reinterpret_cast<const char*>(data) + 2, size - 2);
  return {all.substr(0, first), all.substr(first)};
}

// Runs `f`; an Error is the expected outcome for most inputs (law 5). Anything else escaping
// (another exception type) is a bug: abort so that libFuzzer records the input.
template <class F>
void expect_only_errors(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

}  // namespace coremlrt::fuzz
