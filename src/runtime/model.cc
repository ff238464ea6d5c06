#include "coremlrt/model.h"

#include "coremlrt/backend_ops.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "backends/backend.h"
#include "backends/op_support.h"
#include "format/model_kinds.h"
#include "format/spec_reader.h"
#include "ops/thread_pool.h"
#include "runtime/context_pool.h"
#include "runtime/default_input.h"
#include "runtime/model_impl.h"
#include "runtime/plan.h"

namespace coremlrt {


namespace {

std::string names_of(const std::vector<FeatureDescription>& features) {
  std::string out;
  for (const auto& f : features) out += (out.empty() ? "'" : ", '") + f.name + "'";
  return out.empty() ? "none" : out;
}

std::string expected_shape(const FeatureDescription& feature, const ir::ValueType& type) {
  std::ostringstream out;
  if (!feature.enumerated_shapes.empty()) {
    out << "one of";
    for (const Shape& s : feature.enumerated_shapes) out << " " << shape_str(s);
  } else if (!feature.shape_range.empty()) {
    out << "[";
    for (size_t i = 0; i < feature.shape_range.size(); ++i) {
      auto [lo, hi] = feature.shape_range[i];
      out << (i ? ", " : "") << lo << ".." << (hi < 0 ? std::string("inf") : std::to_string(hi));
    }
    out << "]";
  } else if (type.is_static()) {
    out << shape_str(Shape(type.dims.begin(), type.dims.end()));
  } else {
    out << type.str();
  }
  return out.str();
}

bool shape_allowed(const Shape& shape, const FeatureDescription& feature, const ir::ValueType& type) {
  if (type.rank >= 0 && static_cast<int64_t>(shape.size()) != type.rank) return false;
  for (size_t i = 0; i < type.dims.size(); ++i)
    if (type.dims[i] >= 0 && type.dims[i] != shape[i]) return false;
  if (!feature.enumerated_shapes.empty()) {
    for (const Shape& s : feature.enumerated_shapes)
      if (s == shape) return true;
    return false;
  }
  if (!feature.shape_range.empty()) {
    if (feature.shape_range.size() != shape.size()) return false;
    for (size_t i = 0; i < shape.size(); ++i) {
      auto [lo, hi] = feature.shape_range[i];
      if (shape[i] < lo || (hi >= 0 && shape[i] > hi)) return false;
    }
  }
  return true;
}

// A neuralNetwork array input in the rank-5 layout whose program input is the blob
// [Seq, 1, C, H, W] itself (src/format/neural_network/translator_edges.cc: networks that need Seq known
// only at prediction) takes an array of the declared [C, H, W] (or [C]) shape as Seq 1: a view
// of it as [1, 1, C, H, W] (or [1, 1, C, 1, 1]). Any other feed is bound as it is.
Tensor bind_rank5_sequence(const Tensor& t, const FeatureDescription& feature, const ir::ValueType& type) {
  const size_t declared = feature.shape.size();
  if (feature.kind != FeatureKind::MultiArray || type.rank != 5 || (declared != 1 && declared != 3) ||
      t.shape != feature.shape)
    return t;
  return t.reshaped(declared == 1 ? Shape{1, 1, t.shape[0], 1, 1} : Shape{1, 1, t.shape[0], t.shape[1], t.shape[2]});
}

void count_ops(const ir::Block& block, const ir::Function& function, const ops::KernelRegistry& registry,
               FunctionReport& report) {
  for (const ir::Operation& op : block.operations) {
    ++report.op_counts[op.type];
    if (op.type != "const" && !registry.find(op.type, function.ios_version))
      report.unsupported.push_back({op.type, op.name, op.outputs.empty() ? "" : op.outputs[0].name, ""});
    for (const ir::Block& nested : op.blocks) count_ops(nested, function, registry, report);
  }
}

// A state may serve this function only if it holds exactly the states the function
// declares, with the same dtypes and shapes.
void check_state_matches(const Model::Impl& m, const State& state) {
  size_t declared = 0;
  for (const ir::NamedValue& input : m.function->inputs) {
    if (input.type.kind != ir::TypeKind::State) continue;
    ++declared;
    const FeatureDescription* held = nullptr;
    for (const auto& d : state.declarations())
      if (d.name == input.name) held = &d;
    const ir::ValueType& wrapped = *input.type.element;
    const Shape want(wrapped.dims.begin(), wrapped.dims.end());
    COREMLRT_CHECK(held && held->dtype == wrapped.dtype && held->shape == want, m.where(), ": the state passed ",
                   held ? "holds '" + input.name + "' as " + std::string(dtype_name(held->dtype)) + " " + shape_str(held->shape)
                        : "has no '" + input.name + "'",
                   "; this function declares state '", input.name, "' as ", dtype_name(wrapped.dtype), " ",
                   shape_str(want));
  }
  COREMLRT_CHECK(state.declarations().size() == declared, m.where(), ": the state passed holds ",
                 state.declarations().size(), " states but this function declares ", declared,
                 "; a state serves only functions that declare the same states");
}

}  // namespace

// Law 5 (docs/design/architecture.md): whatever goes wrong while loading reaches the caller as an Error that
// names the model. Readers below this layer name the file or the field; the model's path is
// added where they did not name it, and a standard exception (a failed allocation, a
// container bound) is turned into an Error saying so. An Error raised without a kind gets the
// kind of the work it stopped (`kind`: BadModel while loading, BadInput while predicting:
// docs/guide/limits-and-errors.md, "Error kinds"); a failed allocation is a ResourceLimit, any
// other standard exception Internal.
void runtime::rethrow_naming_model(const std::string& path, ErrorKind kind) {
  try {
    throw;
  } catch (const Error& e) {
    std::string message = e.what();
    const ErrorKind given = e.has_kind() ? e.kind() : kind;
    if (message.find(path) != std::string::npos) throw Error(given, message);
    fail_as(given, "model '", path, "': ", message);
  } catch (const std::bad_alloc&) {
    fail_as(ErrorKind::ResourceLimit, "model '", path, "': out of memory");
  } catch (const std::exception& e) {
    fail_as(ErrorKind::Internal, "model '", path, "': internal error (", e.what(), ")");
  }
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;


const ModelDescription& Model::description() const { return impl_->loaded.description; }
const FunctionDescription& Model::function() const { return *impl_->function_description; }
const std::string& Model::path() const { return impl_->path; }
size_t Model::weight_bytes() const { return impl_->loaded.weight_bytes; }
const std::vector<std::string>& Model::class_labels() const { return impl_->codes->class_labels; }
const std::vector<std::string>& Model::output_vocabulary(const std::string& output) const {
  static const std::vector<std::string> none;
  auto it = impl_->codes->output_vocabularies.find(output);
  return it == impl_->codes->output_vocabularies.end() ? none : it->second;
}
const Model::InputVocabulary& Model::input_vocabulary(const std::string& input) const {
  auto it = impl_->codes->input_vocabularies.find(input);
  COREMLRT_CHECK(it != impl_->codes->input_vocabularies.end(), impl_->where(), ": input '", input,
                 "' is not a string or dictionary feature");
  return it->second;
}

ModelStats Model::stats() const {
  runtime::ContextPoolStats pool = impl_->contexts->stats();
  ModelStats stats;
  stats.contexts_created = pool.contexts_created;
  stats.contexts_reset = pool.contexts_reset;
  stats.contexts_idle = pool.contexts_idle;
  stats.pooled_bytes = pool.pooled_bytes;
  return stats;
}

const std::string& Model::backend() const { return impl_->backend; }

std::vector<Model::OpPlacement> Model::placements() const {
  std::vector<OpPlacement> out;
  for (const runtime::Placement& p : impl_->plan->placements)
    out.push_back({p.op_type, p.op_name, p.output, p.backend, p.reason, p.region});
  return out;
}

std::vector<std::string> available_backends() { return backends::available_backends(); }

std::map<std::string, std::string> backend_op_support(const std::string& backend) {
  return backends::op_support(backend);
}

std::shared_ptr<State> Model::make_state() const { return std::make_shared<State>(impl_->function_description->states); }

NamedTensors Model::predict(const NamedTensors& inputs, State* state) const try {
  const Impl& m = *impl_;
  ResourceScope limits(&m.limits);
  const FunctionDescription& desc = *m.function_description;
  for (const auto& [name, tensor] : inputs) {
    bool known = false;
    for (const auto& f : desc.inputs) known = known || f.name == name;
    COREMLRT_CHECK(known, m.where(), ": unknown input '", name, "'; the model's inputs are ", names_of(desc.inputs));
  }
  const bool stateful = !desc.states.empty();
  COREMLRT_CHECK(stateful || !state, m.where(), " declares no states, but a state was passed");
  COREMLRT_CHECK(!stateful || state, m.where(), " has states (", names_of(desc.states),
                 "); pass a state made by make_state()");
  if (stateful) check_state_matches(m, *state);
  // Marked busy only after the checks above, so a rejected call never blocks a valid one.
  std::optional<State::Use> use;
  if (stateful) use.emplace(*state, m.where());
  std::vector<Tensor> bound;
  std::vector<std::string> state_names;
  for (const ir::NamedValue& input : m.function->inputs) {
    if (input.type.kind == ir::TypeKind::State) {
      bound.push_back(use->value(input.name));
      state_names.push_back(input.name);
      continue;
    }
    const FeatureDescription* feature = nullptr;
    for (const auto& f : desc.inputs)
      if (f.name == input.name) feature = &f;
    COREMLRT_CHECK(feature, m.where(), ": program input '", input.name, "' is not in the model description");
    auto it = inputs.find(input.name);
    if (it == inputs.end() && feature->optional && (feature->default_value || feature->kind == FeatureKind::Sequence)) {
      bound.push_back(runtime::default_input(*feature, m.where()));  // as Core ML does
      continue;
    }
    COREMLRT_CHECK(it != inputs.end(), m.where(), ": missing input '", input.name, "' (expected ",
                   dtype_name(input.type.dtype), " ", expected_shape(*feature, input.type), "); the model's inputs are ",
                   names_of(desc.inputs));
    const Tensor& t = bind_rank5_sequence(it->second, *feature, input.type);
    COREMLRT_CHECK_AS(ErrorKind::Unsupported, input.type.kind == ir::TypeKind::Tensor, m.where(), ": input '", input.name, "' has type ",
                   input.type.str(), ", which this build cannot bind");
    COREMLRT_CHECK(t.dtype == input.type.dtype, m.where(), ": input '", input.name, "' has dtype ",
                   dtype_name(t.dtype), "; expected ", dtype_name(input.type.dtype));
    COREMLRT_CHECK(shape_allowed(t.shape, *feature, input.type), m.where(), ": input '", input.name, "' has shape ",
                   shape_str(t.shape), "; expected ", expected_shape(*feature, input.type));
    COREMLRT_CHECK(t.data || t.nbytes() == 0, m.where(), ": input '", input.name, "' has no data");
    bound.push_back(t);
  }
  runtime::ExecutionContext::Result results;
  {
    runtime::ContextPool::Lease context = m.contexts->acquire();
    const ops::ThreadLimit thread_limit(m.threads);
    results = context->run(std::move(bound));
  }
  for (size_t i = 0; i < state_names.size(); ++i) use->commit(state_names[i], std::move(results.states[i]));
  NamedTensors outputs;
  const auto& names = m.function->block.outputs;
  for (size_t i = 0; i < names.size(); ++i) outputs[names[i]] = std::move(results.outputs[i]);
  return outputs;
} catch (...) {
  runtime::rethrow_naming_model(impl_->path, ErrorKind::BadInput);
}

ModelReport inspect_model(const std::string& path) try {
  format::LoadedModel loaded = format::read_model(format::locate_model(path));
  ModelReport report;
  report.description = loaded.description;
  report.weight_bytes = loaded.weight_bytes;
  const std::string& type = loaded.description.model_type;
  if (format::is_model_family(type, format::ModelFamily::NeuralNetwork)) {
    // Reported by layer kind, the vocabulary of the file, rather than by translated op.
    FunctionReport f;
    f.name = loaded.description.default_function;
    for (const format::NetworkLayer& layer : loaded.network.layers) {
      ++f.op_counts[layer.type];
      if (!layer.problem.empty()) f.unsupported.push_back({layer.type, layer.name, layer.output, layer.problem});
    }
    report.functions.push_back(std::move(f));
    report.problem = loaded.network.problem;
    return report;
  }
  if (!loaded.problem.empty())
    report.problem = loaded.problem;
  else if (!format::runs_model_type(type))
    report.problem = "model type '" + type + "' (this build runs ML programs, neuralNetwork models, classic "
                     "predictors, feature-engineering models and pipelines of these)";
  for (const auto& [name, function] : loaded.program.functions) {
    FunctionReport f;
    f.name = name;
    f.opset = function.opset;
    count_ops(function.block, function, ops::KernelRegistry::cpu(), f);
    report.functions.push_back(std::move(f));
  }
  return report;
} catch (...) {
  rethrow_as(ErrorKind::BadModel);  // what it reads is a model: coremlrt/error.h
}

std::vector<SupportedOp> supported_ops() {
  std::vector<SupportedOp> out;
  for (const auto& entry : ops::KernelRegistry::cpu().entries())
    out.push_back({entry.op_type, entry.family, entry.min_ios, entry.max_ios, entry.dtypes.list(), entry.dtypes.is_any()});
  std::sort(out.begin(), out.end(), [](const SupportedOp& a, const SupportedOp& b) {
    return std::tie(a.op_type, a.min_ios) < std::tie(b.op_type, b.min_ios);
  });
  return out;
}

}  // namespace coremlrt
