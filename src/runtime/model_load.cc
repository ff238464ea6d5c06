// Model::load as a pipeline of named steps: read the model, check what this build runs, choose
// the function, check its states, plan it on the backends the options ask for, attach its
// feature codes. Each step fills a part of Model::Impl (runtime/model_impl.h); any failure
// reaches the caller as an Error naming the model (law 5, docs/design/architecture.md).
#include <algorithm>
#include <optional>
#include <set>

#include "backends/backend.h"
#include "format/coreai_asset.h"
#include "format/model_kinds.h"
#include "ops/kernel.h"
#include "runtime/compiled_cache.h"
#include "runtime/model_impl.h"

namespace coremlrt {

namespace {

// Whether function `loaded` of the program reads a constant whose storage another function
// reads too (data pointers into the weight file's one mapping, which all functions of a load
// share; backends::BackendOptions::shares_weights). Weights are const ops' values or values
// bound inline, as a constexpr op's data often is.
void collect_weight(const ir::ConstValue* value, std::set<const void*>& out) {
  if (!value) return;
  if (value->tensor.data) out.insert(value->tensor.data);
  if (value->packed && value->packed->codes.data.data) out.insert(value->packed->codes.data.data);
}

void collect_weights(const ir::Block& block, std::set<const void*>& out) {
  for (const ir::Operation& op : block.operations) {
    for (const auto& [key, value] : op.attributes) collect_weight(value.get(), out);
    for (const auto& [param, bindings] : op.inputs)
      for (const ir::Binding& binding : bindings) collect_weight(binding.value.get(), out);
    for (const ir::Block& nested : op.blocks) collect_weights(nested, out);
  }
}

bool shares_weights(const ir::Program& program, const std::string& loaded) {
  std::set<const void*> others, own;
  for (const auto& [name, function] : program.functions) collect_weights(function.block, name == loaded ? own : others);
  for (const void* storage : own)
    if (others.count(storage)) return true;
  return false;
}

// The limits that hold while loading and predicting (coremlrt/limits.h).
void set_limits(Model::Impl& m, const LoadOptions& options) {
  m.limits.memory = std::make_shared<MemoryBudget>(options.memory_limit_bytes ? options.memory_limit_bytes
                                                                              : default_memory_limit_bytes());
  if (options.max_loop_iterations > 0) m.limits.max_loop_iterations = options.max_loop_iterations;
}

// Reads the model (a Core AI model's translation from the cache folder the caller names, if any:
// format/coreai_asset.h) and refuses what this build does not run, saying why before the type
// check's general words. `coremlrt info` lists the same problems as unsupported.
void read_runnable_model(Model::Impl& m, const LoadOptions& options) {
  const std::string& path = m.path;
  const std::string source = format::is_coreai_asset(path) && !options.cache_dir.empty()
                                 ? format::translated_coreai_model(path, options.cache_dir)
                                 : path;
  m.loaded = format::read_model(format::locate_model(source));
  const ModelDescription& description = m.loaded.description;
  COREMLRT_CHECK_AS(ErrorKind::Unsupported, m.loaded.problem.empty(), "model '", path, "': ", m.loaded.problem);
  COREMLRT_CHECK_AS(ErrorKind::Unsupported, format::runs_model_type(description.model_type), "model '", path,
                    "' is of type '", description.model_type,
                    "'; this build runs ML programs (mlProgram), neuralNetwork models, "
                    "classic predictors, feature-engineering models and pipelines of these");
  const format::NeuralNetworkReading& network = m.loaded.network;
  COREMLRT_CHECK_AS(ErrorKind::Unsupported, network.problem.empty(), "model '", path, "' (neuralNetwork): ",
                    network.problem);
  for (const format::NetworkLayer& layer : network.layers)
    COREMLRT_CHECK_AS(ErrorKind::Unsupported, layer.problem.empty(), "model '", path, "': neuralNetwork layer '",
                      layer.name, "' (", layer.type, "): ", layer.problem);
}

// The function the options name (the model's default when they name none), validated.
void choose_function(Model::Impl& m, const LoadOptions& options) {
  const ModelDescription& description = m.loaded.description;
  const std::string name = options.function_name.empty() ? description.default_function : options.function_name;
  if (!description.multifunction && !options.function_name.empty())
    COREMLRT_CHECK_AS(ErrorKind::BadInput, options.function_name == "main", "model '", m.path,
                      "' has a single function, 'main'; function_name '", options.function_name, "' does not exist");
  auto fn = m.loaded.program.functions.find(name);
  if (fn == m.loaded.program.functions.end() || !description.find_function(name)) {
    std::string available;
    for (const auto& f : description.functions) available += (available.empty() ? "'" : ", '") + f.name + "'";
    fail_as(ErrorKind::BadInput, "model '", m.path, "' has no function '", name, "'; available functions: ", available);
  }
  m.function = &fn->second;
  m.function_description = description.find_function(name);
  ir::validate_function(*m.function);
}

// Each state input of the program matches a state of the model's description (an MLState made
// from the description then fits the program).
void check_states(const Model::Impl& m) {
  for (const ir::NamedValue& input : m.function->inputs) {
    if (input.type.kind != ir::TypeKind::State) continue;
    const FeatureDescription* declared = nullptr;
    for (const auto& d : m.function_description->states)
      if (d.name == input.name) declared = &d;
    COREMLRT_CHECK(declared && input.type.element && input.type.element->is_static() &&
                       declared->dtype == input.type.element->dtype &&
                       declared->shape == Shape(input.type.element->dims.begin(), input.type.element->dims.end()),
                   m.where(), ": state input '", input.name, "' does not match the model description's states (",
                   input.type.str(), ")");
  }
}

// The backends' options, derived from the load options in this one place: the weight-copies
// limit defaults to the larger of 64 MiB and the model's weight bytes, and, with that default,
// weights another function of the package reads too are not copied (shares_weights).
backends::BackendOptions backend_options_for(const Model::Impl& m, const LoadOptions& options) {
  backends::BackendOptions backend;
  backend.low_precision = options.low_precision;
  backend.threads = options.threads;
  backend.concurrent_predictions = options.concurrent_predictions;
  backend.cache_dir = options.cache_dir;
  backend.force = options.backend != "auto";
  backend.weight_copies_limit = options.weight_copies_limit_bytes
                                    ? options.weight_copies_limit_bytes
                                    : std::max<uint64_t>(uint64_t{64} << 20, m.loaded.weight_bytes);
  if (!options.weight_copies_limit_bytes) backend.shares_weights = shares_weights(m.loaded.program, m.function->name);
  return backend;
}

// The function's plan on the backends the options select; a planning error without a kind is a
// bad model. A plan that wrote to the cache folder trims it to its size limit.
void plan_function(Model::Impl& m, const LoadOptions& options) {
  m.backend = options.backend;
  m.threads = options.threads;
  const auto cache_before = options.cache_dir.empty() ? std::nullopt : runtime::cache_folder_stamp(options.cache_dir);
  try {
    runtime::PlanOptions plan_options;
    plan_options.packed_weights = options.packed_weights;
    m.plan = runtime::build_plan(*m.function, ops::KernelRegistry::cpu(),
                                 backends::select_backends(options.backend, backend_options_for(m, options)),
                                 plan_options);
  } catch (const Error& e) {
    throw Error(e.has_kind() ? e.kind() : ErrorKind::BadModel, "model '" + m.path + "': " + e.what());
  }
  if (!options.cache_dir.empty() && runtime::cache_folder_stamp(options.cache_dir) != cache_before)
    runtime::keep_cache_within(options.cache_dir, options.cache_limit_bytes ? options.cache_limit_bytes
                                                                             : runtime::default_cache_limit_bytes());
}

// The function's class labels and string vocabularies, as format/ read them.
void attach_feature_codes(Model::Impl& m) {
  auto codes = m.loaded.feature_codes.find(m.function->name);
  COREMLRT_CHECK_AS(ErrorKind::Internal, codes != m.loaded.feature_codes.end(), m.where(),
                    ": internal error: no class labels or vocabularies were read for it");
  COREMLRT_CHECK(codes->second.problem.empty(), "model '", m.path, "', ", codes->second.problem);
  m.codes = &codes->second;
}

}  // namespace

// The one check of the options' values: the Python binding runs it too, as each field is set
// (python/src/load_options_bindings.cc). Unsigned options need none: Python's negative ints do
// not convert to them.
void LoadOptions::validate() const {
  const auto at_least = [](const char* name, int64_t value, int64_t minimum) {
    COREMLRT_CHECK_AS(ErrorKind::BadInput, value >= minimum, "load option \"", name, "\" must be at least ", minimum,
                      ", got ", value);
  };
  at_least("threads", threads, 0);
  at_least("concurrent_predictions", concurrent_predictions, 1);
  at_least("max_loop_iterations", max_loop_iterations, 0);
  COREMLRT_CHECK_AS(ErrorKind::BadInput, !backend.empty(),
                    "load option \"backend\" must be \"auto\", \"reference\" or a backend's name, not empty");
}

std::shared_ptr<const Model> Model::load(const std::string& path, const LoadOptions& options) try {
  options.validate();
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  set_limits(*impl, options);
  ResourceScope limits(&impl->limits);
  read_runnable_model(*impl, options);
  choose_function(*impl, options);
  check_states(*impl);
  plan_function(*impl, options);
  attach_feature_codes(*impl);
  impl->contexts = std::make_unique<runtime::ContextPool>(*impl->plan, options.context_linger);
  return std::shared_ptr<const Model>(new Model(std::move(impl)));
} catch (...) {
  runtime::rethrow_naming_model(path, ErrorKind::BadModel);
}

}  // namespace coremlrt
