// The protobuf -> IR translation with validation, shape inference and planning (constant
// folding included): Model::load of a single-file model. Input: a Model protobuf (.mlmodel);
// blob references resolve against weights/weight.bin beside it, a copy of a real one when
// COREMLRT_FUZZ_WEIGHTS names it.
#include <cstdint>
#include <cstdlib>
#include <filesystem>

#include "coremlrt/model.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* weights = std::getenv("COREMLRT_FUZZ_WEIGHTS")) {
    std::filesystem::create_directories(coremlrt::fuzz::scratch_dir() + "/program/weights");
    std::filesystem::copy_file(weights, coremlrt::fuzz::scratch_dir() + "/program/weights/weight.bin",
                               std::filesystem::copy_options::overwrite_existing);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace coremlrt;
  const std::string path = fuzz::scratch_dir() + "/program/model.mlmodel";
  fuzz::write_file(path, {reinterpret_cast<const char*>(data), size});
  LoadOptions options;
  options.memory_limit_bytes = size_t{1} << 30;  // a fuzzer's process has less than the machine
  fuzz::expect_only_errors([&] { Model::load(path, options); });
  return 0;
}
