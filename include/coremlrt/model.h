#pragma once
// The C++ API: load a Core ML model once, predict from any number of threads.
//
//   auto model = coremlrt::Model::load("model.mlpackage");
//   auto outputs = model->predict({{"x", coremlrt::Tensor::view(...)}});
//
// A Model is immutable after load. predict() takes an execution context from the model's
// pool for the duration of the call, so concurrent calls never share mutable state.
// Input tensors are read only during the call; returned tensors belong to the caller.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coremlrt/description.h"
#include "coremlrt/error.h"
#include "coremlrt/limits.h"
#include "coremlrt/state.h"
#include "coremlrt/tensor.h"

namespace coremlrt {

// How Model::load reads, plans and runs a model. Each option is a member here and one line of
// for_each_load_option below, which says what it means: that list is what the Python binding
// builds coremlrt._core.LoadOptions from (its fields, their docs, its pickling:
// python/src/load_options_bindings.cc), so a new option needs nothing else there.
struct LoadOptions {
  std::string function_name;
  std::chrono::milliseconds context_linger{1000};
  std::string backend = "auto";
  bool low_precision = false;
  int threads = 0;
  int concurrent_predictions = 1;
  bool packed_weights = true;
  uint64_t weight_copies_limit_bytes = 0;
  std::string cache_dir;
  uint64_t cache_limit_bytes = 0;
  size_t memory_limit_bytes = 0;
  int64_t max_loop_iterations = 0;

  // Throws Error (BadInput) naming the first option whose value is out of range; Model::load
  // calls it, and the Python binding after setting a field (src/runtime/model_load.cc).
  void validate() const;
};

// Calls field(name, &LoadOptions::member, doc) for each option, in declaration order.
template <class Field>
void for_each_load_option(Field&& field) {
  field("function_name", &LoadOptions::function_name,
        "Function of a multifunction package to load; empty = the model's default function.");
  field("context_linger", &LoadOptions::context_linger,
        "How long an execution context (per-prediction buffers) may stay idle before a background thread "
        "frees it (seconds in Python). Negative: keep idle contexts until the model is destroyed.");
  field("backend", &LoadOptions::backend,
        "Which execution backends may run the model (docs/design/architecture.md, \"Backends\"): "
        "\"auto\", every backend this build has, each region only where its cost rule says it pays (a tiny "
        "model stays on our kernels); \"reference\", our own kernels alone; a backend's name (\"openvino\"), "
        "that backend wherever it can run an op, our kernels elsewhere. available_backends() lists the names "
        "this build accepts.");
  field("low_precision", &LoadOptions::low_precision,
        "Opt-in low-precision mode (docs/design/architecture.md, law 6): matrix ops of fp16 programs may compute "
        "in bf16 on a CPU's matrix unit. Python maps ComputeUnit.CPU_AND_NE to it. Off by default.");
  field("threads", &LoadOptions::threads, "Threads one prediction may use; 0 = the machine's cores.");
  field("concurrent_predictions", &LoadOptions::concurrent_predictions,
        "Predictions the caller will run at once (a batch run's worker threads), at least 1. A backend that "
        "splits its threads between predictions running side by side (OpenVINO's streams) gives each of them "
        "threads / concurrent_predictions; 1 (the default) lets one prediction use every thread, the lowest "
        "latency, and predictions arriving together wait for each other on such a backend's regions.");
  field("packed_weights", &LoadOptions::packed_weights,
        "Compressed weights (quantized, palettized or sparse: constexpr_* ops) stay in the form the weight file "
        "stores them, and the kernels that read them decode them as they run "
        "(docs/design/compressed-weights.md). false decodes each one into a dense constant at load.");
  field("weight_copies_limit_bytes", &LoadOptions::weight_copies_limit_bytes,
        "With backend \"auto\": bytes the copies of the weights a backend holds may add to the process "
        "(OpenVINO repacks every weight its kernels read, and keeps fp16 ones as fp32), net of the weight file's "
        "pages they replace. Regions that would pass it keep their work on our kernels, which read the weights "
        "as the file stores them. 0 = the model's weight bytes, and at least 64 MiB; and then a function that "
        "reads weights another function of the same package reads too runs on our kernels alone, with backend "
        "\"openvino\" too (a backend would copy them once per loaded function, where our kernels share the one "
        "mapping). A limit given lifts that rule (docs/design/compressed-weights.md, \"Weights live once\").");
  field("cache_dir", &LoadOptions::cache_dir,
        "Where backends cache compiled models across processes; empty = no cache.");
  field("cache_limit_bytes", &LoadOptions::cache_limit_bytes,
        "Bytes the cache's entries may take: a load that adds entries removes the least recently used ones "
        "beyond it (src/runtime/compiled_cache.h). 0 = $COREMLRT_CACHE_LIMIT_BYTES, or 2 GiB.");
  field("memory_limit_bytes", &LoadOptions::memory_limit_bytes,
        "Engine memory the model may hold at once (buffers, unpacked weights, outputs not yet freed); 0 = the "
        "machine's physical memory. Memory-mapped weights are not counted.");
  field("max_loop_iterations", &LoadOptions::max_loop_iterations,
        "Iterations one while_loop may run before the prediction fails; 0 = kDefaultMaxLoopIterations "
        "(include/coremlrt/limits.h).");
}

// Counters about a model's execution contexts, for monitoring and tests.
struct ModelStats {
  size_t contexts_created = 0;
  size_t contexts_reset = 0;  // freed after lingering idle
  size_t contexts_idle = 0;
  size_t pooled_bytes = 0;    // buffers kept by idle contexts for reuse
};

using NamedTensors = std::map<std::string, Tensor>;

class Model {
 public:
  // Reads, validates and plans the model. Throws Error (file problems, unsupported ops
  // named with their function and output, unknown function names).
  static std::shared_ptr<const Model> load(const std::string& path, const LoadOptions& options = {});
  ~Model();

  const ModelDescription& description() const;
  // The loaded function's inputs, outputs and states.
  const FunctionDescription& function() const;
  const std::string& path() const;
  size_t weight_bytes() const;

  // Classifiers (a function ending in a `classify` op): the class labels in class index
  // order, int64 labels written in decimal; empty for other models. The engine's tensors hold
  // neither strings nor dictionaries, so predict() returns classify's label output as the
  // winning class index (an int32 scalar) and its probabilities output as a float32 vector in
  // this order: Core ML's label is class_labels()[index] and its dictionary is
  // {class_labels()[i]: probabilities[i]}. The label output's feature kind (Int64 or String,
  // in function()) says which type the labels have.
  const std::vector<std::string>& class_labels() const;

  // String, dictionary and sequence input features (dictVectorizer, categoricalMapping,
  // oneHotEncoder over strings, itemSimilarityRecommender). The engine's tensors hold no
  // strings, so predict() takes such an input as numbers over the vocabulary of the op that
  // reads it, which this returns (integer keys in decimal, `integer_keys` set):
  //   a string:     an int64 scalar, the string's index in `entries`, or -1 when absent;
  //   a dictionary: a float64 vector of entries.size() values, the value of entries[i] at
  //                 place i, `absent_value` (0, or NaN for a recommender) where the dictionary
  //                 lacks the key (keys not in entries dropped);
  //   a sequence:   an int64 vector [m], each element's index in `entries`, -1 for one absent;
  //                 an optional sequence left out of predict() reaches its reader as the single
  //                 code kAbsentSequenceCode (a recommender's restriction or exclusion list not
  //                 given, which differs from an empty list).
  // Throws Error when `input` is not such a feature.
  using InputVocabulary = coremlrt::InputVocabulary;
  const InputVocabulary& input_vocabulary(const std::string& input) const;
  // String outputs other than a classifier's label (categoricalMapping from int64), and the
  // outputs of an itemSimilarityRecommender: predict() returns such an output as numbers over
  // the strings this returns (an empty list for any other output):
  //   a string:     an int64 scalar, an index into them;
  //   a sequence:   an int64 vector [K], indices into them (the recommended items, best first);
  //   a dictionary: a float64 vector of one value per string, NaN for a key it does not hold.
  const std::vector<std::string>& output_vocabulary(const std::string& output) const;

  // Checks every input against the function's declared names, dtypes and shapes, then
  // runs it. Throws Error for a missing, unknown or mistyped input; on error nothing is
  // returned and no state is changed. A function that declares states needs `state`
  // (from make_state() of this or a compatible model); the state is updated on success.
  NamedTensors predict(const NamedTensors& inputs, State* state = nullptr) const;

  // A zero-filled state for the loaded function's state declarations.
  std::shared_ptr<State> make_state() const;

  ModelStats stats() const;

  // Where each op of the loaded function runs (coremlrt info --plan), in program order.
  struct OpPlacement {
    std::string op_type;
    std::string op_name;
    std::string output;   // the op's first output
    std::string backend;  // "reference", a backend's name, "folded" (computed at load) or "packed"
    std::string reason;   // why it is not on a backend that was asked for; empty otherwise
    int region = -1;      // the backend region it belongs to; -1 on our kernels
  };
  std::vector<OpPlacement> placements() const;
  // The backend choice the model was loaded with ("auto", "reference", a name).
  const std::string& backend() const;

  struct Impl;

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What `coremlrt info` shows: a model's description and, per function, its op histogram
// and the ops this build cannot run. Works on models that Model::load rejects.
struct UnsupportedOp {
  std::string op_type;
  std::string op_name;
  std::string output;
  std::string reason;  // set where more than the missing kernel explains it (neuralNetwork layers)
};

struct FunctionReport {
  std::string name;
  std::string opset;
  std::map<std::string, int> op_counts;  // nested blocks included
  std::vector<UnsupportedOp> unsupported;
};

struct ModelReport {
  ModelDescription description;
  std::string problem;  // why the model as a whole cannot run here (its type, its input layout); else empty
  size_t weight_bytes = 0;
  std::vector<FunctionReport> functions;
};

ModelReport inspect_model(const std::string& path);

// The op types this build has kernels for, each with the iOS opset range it covers
// (max_ios 99 = every later opset) and the element types its kernel accepts for the op's
// main tensor input (any_dtype: elements of every dtype are moved without being read).
struct SupportedOp {
  std::string op_type;
  std::string family;  // the op family its kernel belongs to (docs/guide/adding-an-op.md)
  int min_ios = 15;
  int max_ios = 99;
  std::vector<DType> dtypes;  // empty when any_dtype
  bool any_dtype = false;
};
std::vector<SupportedOp> supported_ops();

// The `backend` choices this build accepts: "auto", "reference", then each backend's name.
std::vector<std::string> available_backends();

}  // namespace coremlrt
