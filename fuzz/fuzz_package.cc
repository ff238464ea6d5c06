// The .mlpackage reader end to end: Manifest.json (item entries, nested and escaping paths),
// the root model protobuf, then everything Model::load does with it. Input: a u16 length,
// Manifest.json of that length, then the model spec (scripts/fuzz_seeds.py writes seeds).
#include <cstdint>

#include "coremlrt/model.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace coremlrt;
  auto [manifest, spec] = fuzz::split_prefixed(data, size);
  const std::string package = fuzz::scratch_dir() + "/model.mlpackage";
  fuzz::write_file(package + "/Manifest.json", manifest);
  fuzz::write_file(package + "/Data/com.apple.CoreML/model.mlmodel", spec);
  LoadOptions options;
  options.memory_limit_bytes = size_t{1} << 30;  // a fuzzer's process has less than the machine
  fuzz::expect_only_errors([&] { Model::load(package, options); });
  return 0;
}
