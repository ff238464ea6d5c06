// The OpenVINO backend: which ops it takes (propose: each op's lowering, lowering.h), whether a
// region is worth running (the cost rule, cost_rule.h, and the memory rule, weight_memory.h), and
// compiling it (compile.h: region_builder.h, region_cache.h, region_kernel.h).
#include <algorithm>
#include <atomic>
#include <cctype>

#include "backends/openvino/compile.h"
#include "backends/openvino/cost_rule.h"
#include "backends/openvino/lowering.h"
#include "backends/openvino/openvino_backend.h"
#include "backends/openvino/weight_memory.h"

namespace coremlrt::backends::openvino {

namespace {

// Whether a value of `type` can cross into or out of an OpenVINO region: a tensor of known rank,
// non-empty, with an element type we map, and of static shape unless `any_dims` (the lowerings
// of lowering.h that read ranks only: OpenVINO then infers the dims at each prediction).
Verdict crossable(const ir::ValueType& type, bool any_dims) {
  if (type.kind != ir::TypeKind::Tensor)
    return Verdict::refuse("a value of type " + type.str() + " (not a tensor)");
  if (static_cast<int64_t>(type.dims.size()) != type.rank) return Verdict::refuse("a value of unknown rank " + type.str());
  if (!any_dims && !type.is_static()) return Verdict::refuse("a value of dynamic shape " + type.str());
  for (int64_t d : type.dims)
    if (d == 0) return Verdict::refuse("an empty tensor " + type.str());
  if (!element_type(type.dtype)) return Verdict::refuse("dtype " + std::string(dtype_name(type.dtype)));
  return Verdict::claim();
}

Verdict support(const ir::Operation& op, const ValueInfo& values, int ios_version) {
  auto it = lowerings().find(op.type);
  if (it == lowerings().end()) {
    auto why = unlowered_reasons().find(op.type);
    return Verdict::refuse("no lowering for op type '" + op.type + "'" +
                           (why == unlowered_reasons().end() ? std::string() : ": " + why->second));
  }
  const bool any_dims = it->second.any_dims;
  for (const ir::NamedValue& out : op.outputs) {
    Verdict why = crossable(out.type, any_dims);
    if (!why.claimed) return Verdict::refuse("output '" + out.name + "' is " + why.reason);
  }
  for (const auto& [param, bindings] : op.inputs)
    for (const ir::Binding& binding : bindings) {
      if (const ir::ConstValue* constant = values.constant(binding)) {
        if (!constant->packed) continue;
        Verdict why = packed_support(it->second, *constant->packed);
        if (!why.claimed) return Verdict::refuse("input '" + param + "' " + why.reason);
        continue;
      }
      Verdict why = crossable(values.type(binding), any_dims);
      if (!why.claimed) return Verdict::refuse("input '" + param + "' is " + why.reason);
    }
  if (!it->second.check) return Verdict::claim();
  try {
    return it->second.check(OpReader(op, values, ios_version));
  } catch (const Error& e) {
    return Verdict::refuse(e.what());
  }
}

class OpenVinoBackend final : public Backend {
 public:
  explicit OpenVinoBackend(const BackendOptions& options) : options_(options) {}

  const std::string& name() const override {
    static const std::string kName = "openvino";
    return kName;
  }

  std::vector<Verdict> propose(const FunctionView& view) const override {
    std::vector<Verdict> verdicts;
    for (const ir::Operation* op : view.ops) {
      // An op whose kernel of ours is as fast on fp32 weights, reading them where the file maps
      // them where OpenVINO holds copies (lstm: ops::OpCost::ours_on_fp32_weights). Not on fp16
      // weights (OpenVINO is faster there, and with bf16 in the low-precision mode).
      if (!options_.force && !options_.low_precision &&
          ours_on_fp32_weights(*op, view.values, view.function.ios_version)) {
        std::string kernel = op->type;  // "our LSTM kernel"
        std::transform(kernel.begin(), kernel.end(), kernel.begin(), [](unsigned char c) { return std::toupper(c); });
        verdicts.push_back(Verdict::refuse("our " + kernel + " kernel runs it as fast, reading the mapped fp32 "
                                           "weights where OpenVINO would copy them (backend=\"auto\"; "
                                           "backend=\"openvino\" forces it)"));
        continue;
      }
      verdicts.push_back(support(*op, view.values, view.function.ios_version));
    }
    return verdicts;
  }

  Verdict worth_running(const Region& region) const override {
    // Weights live once, forced or not (docs/design/compressed-weights.md): only the caller's
    // weight_copies_limit_bytes lets OpenVINO hold a copy per loaded function.
    if (options_.shares_weights)
      return Verdict::refuse("this function reads weights that other functions of its package read too: OpenVINO "
                             "would hold copies of them for each loaded function, and its runtime besides, where our "
                             "kernels read the one mapping they share (weight_copies_limit_bytes set lifts this)");
    if (options_.force) return Verdict::claim();
    if (Verdict pays = pays_for_a_call(region, options_); !pays.claimed) return pays;
    // The memory rule (docs/design/compressed-weights.md): OpenVINO's CPU plugin keeps weights in
    // copies of its own, repacked for its kernels, beside the weight file we map: fp32 copies of
    // fp16 weights, repacked int8 and int4 ones, convolution weights decoded for it. The regions
    // of one load may hold such copies up to a limit; past it a region stays on our kernels,
    // which read every weight as the file stores it.
    const uint64_t copies = weight_copy_bytes(region, options_);
    const uint64_t limit = options_.weight_copies_limit;
    if (copies == 0) return Verdict::claim();

    uint64_t used = copies_used_.load();
    while (used + copies <= limit && !copies_used_.compare_exchange_weak(used, used + copies)) {
    }
    if (used + copies <= limit) return Verdict::claim();
    return Verdict::refuse("OpenVINO would hold " + std::to_string(copies >> 20) +
                           " MiB of copies of the region's weights, past the limit of " + std::to_string(limit >> 20) +
                           " MiB of weight copies for this model (weight_copies_limit_bytes; backend=\"openvino\" "
                           "forces it)");
  }

  std::unique_ptr<ops::Kernel> compile(const Region& region) const override { return compile_region(region, options_); }

  std::vector<std::pair<const ir::ConstValue*, std::string>> decoded_constants(const Region& region) const override {
    return openvino::decoded_constants(region, name());
  }

 private:
  BackendOptions options_;
  mutable std::atomic<uint64_t> copies_used_{0};
};

}  // namespace

std::shared_ptr<const Backend> make_backend(const BackendOptions& options) {
  return std::make_shared<OpenVinoBackend>(options);
}

}  // namespace coremlrt::backends::openvino
