// predict with hostile inputs on a fixed model (tests/python/fixtures.py: fixture_fuzz_predict,
// x: float32 [1..8, 16], indices: int32 [4]; gather rows of x, linear, relu, softmax, reductions).
// Input: byte 0 picks the row count (0 and 9 lie outside the model's range), the next 16 bytes
// are the indices, the rest fills x (any float bit pattern: NaN, infinities, subnormals).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "coremlrt/model.h"
#include "fuzz_util.h"

namespace {
std::shared_ptr<const coremlrt::Model> g_model;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* path = std::getenv("COREMLRT_FUZZ_MODEL");
  if (!path) {
    std::fprintf(stderr, "set COREMLRT_FUZZ_MODEL to fixture_fuzz_predict's model.mlpackage (scripts/fuzz.sh does)\n");
    std::abort();
  }
  g_model = coremlrt::Model::load(path);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace coremlrt;
  if (size < 1) return 0;
  const int64_t rows = data[0] % 10;
  std::vector<int32_t> indices(4, 0);
  std::memcpy(indices.data(), data + 1, std::min<size_t>(size - 1, 16));
  std::vector<float> x(static_cast<size_t>(rows) * 16, 0.0f);
  if (size > 17) {
    const size_t available = size - 17;
    for (size_t i = 0; i < x.size() * 4; ++i)
      reinterpret_cast<uint8_t*>(x.data())[i] = data[17 + i % available];
  }
  NamedTensors inputs{{"x", Tensor::view(DType::Float32, {rows, 16}, x.data(), nullptr)},
                      {"indices", Tensor::view(DType::Int32, {4}, indices.data(), nullptr)}};
  fuzz::expect_only_errors([&] {
    NamedTensors outputs = g_model->predict(inputs);
    for (const auto& [name, tensor] : outputs)
      if (tensor.nbytes() > 0 && !tensor.data) std::abort();
  });
  return 0;
}
