#include "format/coreai_asset.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "base/sha256.h"
#include "coremlrt/error.h"

namespace coremlrt::format {

namespace fs = std::filesystem;

namespace {

std::vector<char> read_file(const fs::path& path, const std::string& model) {
  std::ifstream in(path, std::ios::binary);
  COREMLRT_CHECK(in.good(), "Core AI model '", model, "': cannot read ", path.filename().string());
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

fs::path default_cache_dir() {
  if (const char* dir = std::getenv("COREMLRT_CACHE_DIR"); dir && *dir) return dir;
  const char* home = std::getenv("HOME");
  return fs::path(home && *home ? home : ".") / ".cache" / "coremlrt";
}

// The translator version in a cached folder's name "<hex>-t<version>.mlmodelc", or -1.
long translator_version(const std::string& name, const std::string& prefix) {
  const std::string suffix = ".mlmodelc";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stol(digits);
}

// Whether the translation's own main.mlirb (weights it reads in place: a hard link to the model's
// file, or a copy) is as the translator wrote it: its size and modification time in
// nanoseconds equal those main.mlirb.stamp records (python/coremlrt/coreai/_translate.py).
bool source_unchanged(const fs::path& translation) {
  const fs::path source = translation / "weights" / "main.mlirb";
  std::error_code ec;
  if (!fs::exists(source, ec)) return true;  // every weight is in weight.bin
  std::ifstream in(translation / "weights" / "main.mlirb.stamp");
  std::string recorded((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  struct stat st {};
  if (::stat(source.c_str(), &st) != 0) return false;
  const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return recorded == std::to_string(st.st_size) + " " + std::to_string(mtime_ns) + "\n";
}

}  // namespace

bool is_coreai_asset(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "main.mlirb", ec);
}

std::string translated_coreai_model(const std::string& path, const std::string& cache_dir) {
  const fs::path folder(path);
  const std::vector<char> program = read_file(folder / "main.mlirb", path);
  const std::vector<char> hash = read_file(folder / "main.hash", path);
  Sha256 sha;
  sha.update(program.data(), program.size());
  const std::array<uint8_t, 32> digest = sha.finish();
  COREMLRT_CHECK(hash.size() == digest.size() && std::equal(digest.begin(), digest.end(), hash.begin(),
                                                            [](uint8_t a, char b) { return a == static_cast<uint8_t>(b); }),
                 "Core AI model '", path, "': main.hash does not match the SHA-256 of main.mlirb (the model is "
                 "damaged or was edited)");
  const fs::path root = (cache_dir.empty() ? default_cache_dir() : fs::path(cache_dir)) / "coreai";
  const std::string prefix = to_hex(digest.data(), digest.size()) + "-t";
  long best = -1;
  fs::path found;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const long version = translator_version(it->path().filename().string(), prefix);
    if (version > best && fs::is_directory(it->path(), ec)) best = version, found = it->path();
  }
  COREMLRT_CHECK(best >= 0, "Core AI model '", path, "' has not been translated yet: its program is read by "
                 "coreai-core's Python bindings. Load it once from Python (coremlrt.MLModel, or `coremlrt info "
                 "<model>`, with `pip install coremlrt[coreai]`), which writes the translation into ", root.string(),
                 "; this loader then reads it from there");
  COREMLRT_CHECK(source_unchanged(found), "Core AI model '", path, "': its translation ", found.string(),
                 " reads weights from its own main.mlirb, which changed after the translation was written (the "
                 "model file it is linked to was rewritten in place). Load the model once from Python, which "
                 "translates it again");
  return found.string();
}

}  // namespace coremlrt::format
