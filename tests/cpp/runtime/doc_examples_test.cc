// The C++ examples of README.md and docs/guide/cpp.md, as written: tests/python/docs/
// test_doc_examples.py checks that each example's lines are in this file, in order.
#include "coremlrt/model.h"
#include "coremlrt/threads.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "generated_model.h"

namespace coremlrt {
namespace {

// The examples name "model.mlpackage": run them in the folder of fixture_doc_model
// (x float32 [1, 3] -> y = relu(x + 1)), and go back afterwards.
class InModelFolder {
 public:
  explicit InModelFolder(const std::string& model) : previous_(std::filesystem::current_path()) {
    std::filesystem::current_path(std::filesystem::path(model).parent_path());
  }
  ~InModelFolder() { std::filesystem::current_path(previous_); }

 private:
  std::filesystem::path previous_;
};

TEST(DocExamples, Readme) {
  GENERATED_MODEL(path, "fixture_doc_model");
  InModelFolder folder(path);
  auto model = coremlrt::Model::load("model.mlpackage");
  float data[3] = {1, 2, 3};
  auto outputs = model->predict({{"x", coremlrt::Tensor::view(coremlrt::DType::Float32, {1, 3}, data, nullptr)}});
  const Tensor& y = outputs.at("y");
  ASSERT_EQ(y.shape, (Shape{1, 3}));
  EXPECT_EQ(y.ptr<float>()[0], 2.0f);
  EXPECT_EQ(y.ptr<float>()[1], 3.0f);
  EXPECT_EQ(y.ptr<float>()[2], 4.0f);
}

TEST(DocExamples, GuideCpp) {
  GENERATED_MODEL(path, "fixture_doc_model");
  InModelFolder folder(path);
  coremlrt::set_num_threads(2);                     // the pool and each calling thread together use 2
  coremlrt::LoadOptions options;
  options.backend = "reference";                    // "auto" (default), "reference" or "openvino"
  auto model = coremlrt::Model::load("model.mlpackage", options);
  float data[3] = {-2, 0, 2};
  coremlrt::NamedTensors inputs = {{"x", coremlrt::Tensor::view(coremlrt::DType::Float32, {1, 3}, data, nullptr)}};
  coremlrt::NamedTensors outputs = model->predict(inputs);
  const float* y = outputs.at("y").ptr<float>();   // y = relu(x + 1): {0, 1, 3}
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 3.0f);
  coremlrt::set_num_threads(0);  // back to the default for the tests after this one
}

}  // namespace
}  // namespace coremlrt
