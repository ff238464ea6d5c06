#include "format/package.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "coremlrt/error.h"
#include "coremlrt/utf8.h"
#include "format/compiled_model.h"
#include "format/coreai_asset.h"
#include "format/memory_model.h"

namespace coremlrt::format {

namespace fs = std::filesystem;

namespace {

// Accepts the versions Core ML's package reader accepts
// (docs/design/coreml-format.md, "Package layout and accepted versions").
void check_manifest_version(const std::string& path, const std::string& version) {
  int parts[3] = {0, 0, 0};
  int count = 0;
  size_t start = 0;
  while (count < 3) {
    size_t dot = version.find('.', start);
    std::string token = version.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    COREMLRT_CHECK(!token.empty() && token.find_first_not_of("0123456789") == std::string::npos,
                   "model package '", path, "': fileFormatVersion '", version,
                   "' is not of the form major.minor.patch");
    parts[count++] = std::stoi(token);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  COREMLRT_CHECK(count == 3 && version.find('.', start) == std::string::npos, "model package '",
                 path, "': fileFormatVersion '", version, "' is not of the form major.minor.patch");
  bool unsupported = parts[0] > 1 || (parts[0] == 1 && parts[1] > 0) || (parts[1] == 0 && parts[2] > 0);
  COREMLRT_CHECK_AS(ErrorKind::Unsupported, !unsupported, "model package '", path, "': unsupported fileFormatVersion '",
                 version, "' (this build reads 1.0.0)");
}

ModelFiles locate_in_package(const fs::path& package) {
  fs::path manifest_path = package / "Manifest.json";
  COREMLRT_CHECK(fs::is_regular_file(manifest_path), "'", package.string(),
                 "' is a folder but not a model package: it has no Manifest.json (an .mlpackage "
                 "folder holds Manifest.json and Data/)");
  std::string text;
  {
    std::ifstream in(manifest_path, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // JSON is UTF-8 text; checked first so the error names the byte instead of quoting it.
  for (size_t i = 0; i < text.size();) {
    size_t length = utf8_sequence_length(text, i);
    COREMLRT_CHECK(length > 0, "model package '", package.string(), "': Manifest.json is not valid UTF-8 text (byte ",
                   i, " begins no UTF-8 character)");
    i += length;
  }
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("model package '", package.string(), "': Manifest.json is not valid JSON: ", e.what());
  }
  const std::string where = "model package '" + package.string() + "': Manifest.json ";
  COREMLRT_CHECK(manifest.is_object(), where, "is not a JSON object");
  if (manifest.contains("fileFormatVersion")) {
    COREMLRT_CHECK(manifest["fileFormatVersion"].is_string(), where, "fileFormatVersion is not a string");
    check_manifest_version(package.string(), manifest["fileFormatVersion"].get<std::string>());
  }
  COREMLRT_CHECK(manifest.contains("rootModelIdentifier") && manifest["rootModelIdentifier"].is_string(),
                 where, "has no rootModelIdentifier");
  COREMLRT_CHECK(manifest.contains("itemInfoEntries") && manifest["itemInfoEntries"].is_object(),
                 where, "has no itemInfoEntries object");
  std::string root_id = manifest["rootModelIdentifier"].get<std::string>();
  const auto& items = manifest["itemInfoEntries"];
  COREMLRT_CHECK(items.contains(root_id), where, "names root model '", root_id,
                 "' but itemInfoEntries has no such item");
  const auto& root = items[root_id];
  COREMLRT_CHECK(root.is_object() && root.contains("path") && root["path"].is_string(), where,
                 "item '", root_id, "' has no path");
  fs::path relative = root["path"].get<std::string>();
  COREMLRT_CHECK(!relative.is_absolute() && relative.lexically_normal().string().rfind("..", 0) != 0,
                 where, "root model path '", relative.string(), "' leaves the package");
  fs::path model_file = package / "Data" / relative;
  COREMLRT_CHECK(fs::is_regular_file(model_file), "model package '", package.string(),
                 "': root model file 'Data/", relative.string(), "' does not exist");
  return {model_file.string(), model_file.parent_path().string(), true, false, false, {}};
}

// The folder `p` lies in ("a/b.mlpackage/" -> "a").
std::string folder_of(const fs::path& p) {
  fs::path full = fs::absolute(p).lexically_normal();
  if (!full.has_filename()) full = full.parent_path();
  return full.parent_path().string();
}

}  // namespace

ModelFiles locate_model(const std::string& path) {
  if (find_memory_model(path)) return {path, path, false, false, true, {}};
  std::error_code ec;
  fs::path p(path);
  fs::file_status status = fs::status(p, ec);
  COREMLRT_CHECK(!ec && fs::exists(status), "model path '", path,
                 "' does not exist (expected an .mlpackage folder or an .mlmodel file)");
  if (fs::is_directory(status)) {
    // A Core AI model: the compiled-model folder translated from it (coreai_asset.h).
    if (is_coreai_asset(path)) return locate_model(translated_coreai_model(path, ""));
    // A compiled folder is recognised by its contents, as Core ML does not require the name.
    ModelFiles files = p.extension() == ".mlmodelc" || fs::is_regular_file(p / kCompiledProgramFile) ||
                               fs::is_regular_file(p / kCompiledSourceFile)
                           ? locate_compiled_model(p.string())
                           : locate_in_package(p);
    files.location = folder_of(p);
    return files;
  }
  COREMLRT_CHECK(fs::is_regular_file(status), "model path '", path,
                 "' is neither a folder nor a regular file");
  ModelFiles files{p.string(), p.parent_path().string(), false, false, false, {}};
  files.location = folder_of(p);
  return files;
}

}  // namespace coremlrt::format
