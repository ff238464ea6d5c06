#pragma once
// Models made for the C++ tests by tests/python/fixtures.py with coremltools (cached under
// build/test-fixtures), so a fresh clone runs them without any shared corpus.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>

namespace coremlrt::testing {

// The generator prints "case: FOLDER"; an empty result means it failed, and the test fails.
inline std::string generated_model(const std::string& name, std::string* failure) {
  static std::mutex mutex;
  static std::map<std::string, std::string> made;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = made.find(name); it != made.end()) return it->second;
  std::string command = std::string(COREMLRT_PYTHON) + " " + COREMLRT_SOURCE_DIR + "/tests/python/fixtures.py " + name + " 2>&1";
  std::string output;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[4096];
    while (fgets(buffer, sizeof buffer, pipe)) output += buffer;
    if (pclose(pipe) == 0) {
      size_t line = output.rfind("case: ");
      std::string folder = line == std::string::npos ? "" : output.substr(line + 6);
      folder.erase(std::min(folder.size(), folder.find('\n')));
      std::string path = folder + "/model.mlpackage";
      if (std::filesystem::exists(path)) return made[name] = path;
    }
  }
  *failure = "could not generate test model '" + name + "' with `" + command + "` (needs python3 with numpy, " +
             "coremltools and torch; scripts/setup.sh installs them):\n" + output;
  return "";
}

#define GENERATED_MODEL(variable, name)               \
  std::string variable##_failure;                     \
  std::string variable = ::coremlrt::testing::generated_model(name, &variable##_failure); \
  ASSERT_FALSE(variable.empty()) << variable##_failure

}  // namespace coremlrt::testing
