// What a loaded Model holds (Model::Impl), shared by the load pipeline (model_load.cc) and
// prediction (model.cc).
#pragma once

#include <memory>
#include <string>

#include "coremlrt/error.h"
#include "coremlrt/limits.h"
#include "coremlrt/model.h"
#include "format/spec_reader.h"
#include "runtime/context_pool.h"
#include "runtime/plan.h"

namespace coremlrt {

struct Model::Impl {
  std::string path;
  ResourceLimits limits;  // active while loading and predicting (coremlrt/limits.h)
  format::LoadedModel loaded;
  const ir::Function* function = nullptr;
  const FunctionDescription* function_description = nullptr;
  std::string backend;
  int threads = 0;  // LoadOptions::threads: caps the intra-op pool per prediction (ops/thread_pool.h)
  std::unique_ptr<runtime::Plan> plan;
  // The function's class labels and string vocabularies, as format/ read them (in `loaded`).
  const format::FeatureCodes* codes = nullptr;
  // Declared after the plan so that it is destroyed (and its reaper joined) first.
  mutable std::unique_ptr<runtime::ContextPool> contexts;
  std::string where() const { return "model '" + path + "', function '" + function->name + "'"; }
};

namespace runtime {

// Law 5 (docs/design/architecture.md): rethrows the exception being handled as an Error naming
// the model at `path`, of kind `kind` where it has none (model.cc).
[[noreturn]] void rethrow_naming_model(const std::string& path, ErrorKind kind);

}  // namespace runtime

}  // namespace coremlrt
