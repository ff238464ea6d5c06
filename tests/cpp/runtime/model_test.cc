#include "coremlrt/model.h"

#include "generated_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <vector>

namespace coremlrt {
namespace {


// fixture_add computes cast(fp32->fp16) -> add 1 -> cast(fp16->fp32).
float reference_add_one(float x) { return static_cast<float>(static_cast<half>(static_cast<float>(static_cast<half>(x)) + 1.0f)); }

TEST(Model, LoadsAndPredictsThroughTheCppApi) {
  GENERATED_MODEL(path, "fixture_add");
  // Our own kernels round every fp16 value, so the result is exactly the fp16 computation.
  LoadOptions options;
  options.backend = "reference";
  auto model = Model::load(path, options);
  ASSERT_EQ(model->function().inputs.size(), 1u);
  EXPECT_EQ(model->function().inputs[0].name, "x");
  EXPECT_EQ(model->function().inputs[0].shape, (Shape{1, 64, 512}));
  std::vector<float> x(64 * 512);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * i) * 10;
  auto outputs = model->predict({{"x", Tensor::view(DType::Float32, {1, 64, 512}, x.data(), nullptr)}});
  const Tensor& y = outputs.at("add_0");
  ASSERT_EQ(y.dtype, DType::Float32);
  ASSERT_EQ(y.shape, (Shape{1, 64, 512}));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y.ptr<float>()[i], reference_add_one(x[i])) << i;
  EXPECT_NE(y.data, x.data());
}

// With every backend this build has, fp16 ops may compute in fp32 (docs/design/architecture.md, law 6: fp16 or
// wider), so each value is the fp16 result or the fp32 one, nothing else.
TEST(Model, AutoBackendComputesFp16OpsInFp16OrWider) {
  GENERATED_MODEL(path, "fixture_add");
  LoadOptions options;
  const std::vector<std::string> backends = available_backends();
  // OpenVINO where this build has it (auto would keep this elementwise model on our kernels).
  options.backend = std::find(backends.begin(), backends.end(), "openvino") != backends.end() ? "openvino" : "auto";
  auto model = Model::load(path, options);
  std::vector<float> x(64 * 512);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * i) * 10;
  auto outputs = model->predict({{"x", Tensor::view(DType::Float32, {1, 64, 512}, x.data(), nullptr)}});
  const Tensor& y = outputs.at("add_0");
  for (size_t i = 0; i < x.size(); ++i) {
    const float got = y.ptr<float>()[i];
    ASSERT_TRUE(got == reference_add_one(x[i]) || got == x[i] + 1.0f) << i << ": " << got;
  }
}

TEST(Model, ConcurrentPredictionsMatchSerialOnes) {
  GENERATED_MODEL(path, "fixture_add");
  auto model = Model::load(path);
  auto run = [&](float seed, std::vector<float>* out) {
    std::vector<float> x(64 * 512, seed);
    for (int round = 0; round < 20; ++round) {
      auto y = model->predict({{"x", Tensor::view(DType::Float32, {1, 64, 512}, x.data(), nullptr)}}).at("add_0");
      out->assign(y.ptr<float>(), y.ptr<float>() + y.numel());
    }
  };
  std::vector<float> a, b;
  std::thread ta(run, 1.5f, &a), tb(run, -2.25f, &b);
  ta.join();
  tb.join();
  EXPECT_EQ(a, std::vector<float>(a.size(), 2.5f));
  EXPECT_EQ(b, std::vector<float>(b.size(), -1.25f));
}

// Predictions running at once on a model loaded for 3 threads (ten rounds from each of 3
// threads) must give the bits of one prediction on a model loaded for 1: `predict` runs one
// prediction and returns its output, of `size` values.
void expect_concurrent_predictions_alike(const std::string& path, size_t size,
                                         const std::function<std::vector<float>(const std::shared_ptr<const Model>&)>& predict) {
  LoadOptions serial;
  serial.backend = "reference";
  serial.threads = 1;
  const std::vector<float> expected = predict(Model::load(path, serial));
  ASSERT_EQ(expected.size(), size);
  LoadOptions parallel = serial;
  parallel.threads = 3;
  auto model = Model::load(path, parallel);
  std::vector<std::vector<float>> got(3);
  std::vector<std::thread> threads;
  for (auto& out : got)
    threads.emplace_back([&] {
      for (int round = 0; round < 10; ++round) out = predict(model);
    });
  for (auto& t : threads) t.join();
  for (const auto& out : got) EXPECT_EQ(out, expected);
}

std::vector<float> floats_of(const Tensor& t) { return std::vector<float>(t.ptr<float>(), t.ptr<float>() + t.numel()); }

// fixture_lstm's steps are split into blocks that the prediction's threads claim as they go
// (src/ops/recurrent.cc, StepLoop). (Also run under TSan: scripts/test_sanitizers.sh.)
TEST(Model, ConcurrentLstmPredictionsSplitStepsOverThreadsAlike) {
  GENERATED_MODEL(path, "fixture_lstm");
  std::vector<float> x(5 * 40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * 2;
  expect_concurrent_predictions_alike(path, 5 * 136, [&](const std::shared_ptr<const Model>& model) {
    return floats_of(model->predict({{"x", Tensor::view(DType::Float32, {5, 1, 40}, x.data(), nullptr)}}).at("y"));
  });
}

// fixture_attention's twelve heads are spread over a prediction's threads, each computed whole by
// one (src/ops/attention.cc). (Also run under TSan: scripts/test_sanitizers.sh.)
TEST(Model, ConcurrentAttentionPredictionsSpreadHeadsOverThreadsAlike) {
  GENERATED_MODEL(path, "fixture_attention");
  std::vector<float> q(12 * 5 * 16), k(12 * 40 * 16), v(12 * 40 * 8), m(12 * 5 * 40);
  for (auto* values : {&q, &k, &v, &m})
    for (size_t i = 0; i < values->size(); ++i) (*values)[i] = std::sin(0.37f * i + values->size()) * 2;
  expect_concurrent_predictions_alike(path, 12 * 5 * 8, [&](const std::shared_ptr<const Model>& model) {
    return floats_of(model
                         ->predict({{"q", Tensor::view(DType::Float32, {1, 12, 5, 16}, q.data(), nullptr)},
                                    {"k", Tensor::view(DType::Float32, {1, 12, 40, 16}, k.data(), nullptr)},
                                    {"v", Tensor::view(DType::Float32, {1, 12, 40, 8}, v.data(), nullptr)},
                                    {"m", Tensor::view(DType::Float32, {1, 12, 5, 40}, m.data(), nullptr)}})
                         .at("y"));
  });
}

TEST(Model, RejectsWrongInputsWithClearMessages) {
  GENERATED_MODEL(path, "fixture_add");
  auto model = Model::load(path);
  std::vector<float> x(64 * 512);
  auto expect_error = [&](const NamedTensors& inputs, const std::string& fragment) {
    try {
      model->predict(inputs);
      FAIL() << "expected an Error containing: " << fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error({}, "missing input 'x' (expected float32 [1, 64, 512])");
  expect_error({{"x", Tensor::view(DType::Float32, {64, 512}, x.data(), nullptr)}}, "has shape [64, 512]; expected [1, 64, 512]");
  expect_error({{"x", Tensor::view(DType::Int32, {1, 64, 512}, x.data(), nullptr)}}, "has dtype int32; expected float32");
  expect_error({{"x", Tensor::view(DType::Float32, {1, 64, 512}, x.data(), nullptr)}, {"y", Tensor::empty(DType::Float32, {1})}},
               "unknown input 'y'");
}

TEST(Model, InspectReportsOpsWithoutLoading) {
  GENERATED_MODEL(path, "fixture_add");
  ModelReport report = inspect_model(path);
  ASSERT_EQ(report.functions.size(), 1u);
  EXPECT_EQ(report.functions[0].opset, "CoreML8");
  EXPECT_EQ(report.functions[0].op_counts.at("add"), 1);
  EXPECT_EQ(report.functions[0].op_counts.at("cast"), 2);
  EXPECT_TRUE(report.functions[0].unsupported.empty());
}

// The kind of the Error `run` throws (docs/guide/limits-and-errors.md, "Error kinds"); the
// message must still name the model.
ErrorKind error_kind(const std::function<void()>& run, const std::string& names) {
  try {
    run();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no Error was thrown";
  return ErrorKind::Internal;
}

TEST(Model, ErrorsSayWhatKindTheyAre) {
  GENERATED_MODEL(path, "fixture_add");
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("coremlrt_error_kinds_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // A model file that is not a Model protobuf.
  const std::string garbage = (dir / "garbage.mlmodel").string();
  std::ofstream(garbage) << "this is not a model";
  EXPECT_EQ(error_kind([&] { Model::load(garbage); }, garbage), ErrorKind::BadModel);
  // A package of a file format version this build does not read.
  const fs::path newer = dir / "newer.mlpackage";
  fs::copy(path, newer, fs::copy_options::recursive);
  std::ifstream in(newer / "Manifest.json");
  std::string manifest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const size_t at = manifest.find("\"1.0.0\"");
  ASSERT_NE(at, std::string::npos) << manifest;
  manifest.replace(at, 7, "\"2.0.0\"");
  std::ofstream(newer / "Manifest.json") << manifest;
  EXPECT_EQ(error_kind([&] { Model::load(newer.string()); }, newer.string()), ErrorKind::Unsupported);
  // What the caller passed: a function the model does not have, an input of the wrong shape.
  LoadOptions other_function;
  other_function.function_name = "decode";
  EXPECT_EQ(error_kind([&] { Model::load(path, other_function); }, path), ErrorKind::BadInput);
  auto model = Model::load(path);
  std::vector<float> x(64 * 512, 1.0f);
  EXPECT_EQ(error_kind([&] { model->predict({{"x", Tensor::view(DType::Float32, {64, 512}, x.data(), nullptr)}}); },
                       "input 'x'"),
            ErrorKind::BadInput);
  // A memory limit the prediction's tensors pass (each is 128 KiB).
  LoadOptions small;
  small.backend = "reference";
  small.memory_limit_bytes = 64 << 10;
  auto limited = Model::load(path, small);
  EXPECT_EQ(
      error_kind([&] { limited->predict({{"x", Tensor::view(DType::Float32, {1, 64, 512}, x.data(), nullptr)}}); },
                 "memory_limit_bytes"),
      ErrorKind::ResourceLimit);
  fs::remove_all(dir);
}

// LoadOptions::validate is the one check of the options' values; Model::load runs it before
// reading anything, so a bad value is the caller's error even for a model that loads.
TEST(Model, LoadOptionsOutOfRangeAreBadInput) {
  GENERATED_MODEL(path, "fixture_add");
  LoadOptions options;
  EXPECT_NO_THROW(options.validate());
  options.concurrent_predictions = 0;
  EXPECT_EQ(error_kind([&] { options.validate(); }, "\"concurrent_predictions\" must be at least 1, got 0"),
            ErrorKind::BadInput);
  EXPECT_EQ(error_kind([&] { Model::load(path, options); }, path), ErrorKind::BadInput);
  options = LoadOptions();
  options.threads = -2;
  EXPECT_EQ(error_kind([&] { Model::load(path, options); }, "\"threads\" must be at least 0, got -2"),
            ErrorKind::BadInput);
  options = LoadOptions();
  options.backend.clear();
  EXPECT_EQ(error_kind([&] { options.validate(); }, "\"backend\""), ErrorKind::BadInput);
}

// for_each_load_option names each option once, with a doc, and reaches the member it names.
TEST(Model, EveryLoadOptionIsListedOnceWithItsMeaning) {
  std::vector<std::string> names;
  LoadOptions options;
  for_each_load_option([&](const char* name, auto member, const char* doc) {
    EXPECT_GT(std::string(doc).size(), 20u) << name;
    names.push_back(name);
    EXPECT_EQ(options.*member, LoadOptions().*member) << name;
  });
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_FALSE(names.empty());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
}

TEST(Model, MissingPathIsAnError) {
  EXPECT_THROW(Model::load("/nonexistent/model.mlpackage"), Error);
}

}  // namespace
}  // namespace coremlrt
