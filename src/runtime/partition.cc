#include "runtime/partition.h"

#include <map>
#include <optional>
#include <set>

namespace coremlrt::runtime {

namespace {

// Why an op step stays on our kernels whatever a backend proposes; nullopt when a backend may
// take it. Partitioning sees the body before any region exists: every step is an op step.
std::optional<std::string> kept_ours_because(const PlannedStep& step) {
  const OpStep& op_step = step.op_step();
  if (!step.blocks.empty()) return "has nested blocks, which run on our kernels";
  if (op_step.traits.binds_state) return "binds a state, which our MLState owns";
  if (op_step.traits.class_index_label) return "encodes a class label, which only our kernel does";
  if (op_step.traits.never_fold) return "draws random numbers, which only our kernel does";
  return std::nullopt;
}

struct RegionSlots {
  std::vector<int> inputs;
  std::vector<int> outputs;
};

// The slots a run of steps [first, last] reads from outside and the ones read after it.
RegionSlots region_slots(const Plan& plan, const std::vector<PlannedStep>& steps, size_t first, size_t last,
                         const std::function<int(const std::string&)>& slot_of) {
  RegionSlots slots;
  std::set<int> produced, seen_inputs;
  for (size_t i = first; i <= last; ++i) {
    const ir::Operation& op = steps[i].op();
    for (const auto& [param, bindings] : op.inputs)
      for (const ir::Binding& binding : bindings) {
        if (binding.value) continue;
        const int slot = slot_of(binding.name);
        if (produced.count(slot) || plan.known_at_load(slot) || seen_inputs.count(slot)) continue;
        seen_inputs.insert(slot);
        slots.inputs.push_back(slot);
      }
    produced.insert(steps[i].output_slots.begin(), steps[i].output_slots.end());
  }
  std::set<int> read_later(plan.body.output_slots.begin(), plan.body.output_slots.end());
  for (size_t i = last + 1; i < steps.size(); ++i) {
    std::vector<int> reads;
    collect_reads(steps[i], reads);
    read_later.insert(reads.begin(), reads.end());
  }
  for (size_t i = first; i <= last; ++i)
    for (int slot : steps[i].output_slots)
      if (read_later.count(slot)) slots.outputs.push_back(slot);
  return slots;
}

std::vector<ir::NamedValue> named(const Plan& plan, const std::vector<int>& slots) {
  std::vector<ir::NamedValue> out;
  for (int slot : slots) out.push_back({plan.slot_names[slot], plan.slot_types[slot]});
  return out;
}

std::string region_label(const std::string& backend, int index, const std::vector<const ir::Operation*>& ops) {
  std::string label = backend + " region #" + std::to_string(index) + " (" + std::to_string(ops.size()) + " op" +
                      (ops.size() == 1 ? "" : "s") + ": " + ops.front()->describe();
  if (ops.size() > 1) label += " .. " + ops.back()->describe();
  return label + ")";
}

}  // namespace

void partition_body(Plan& plan, const backends::ValueInfo& values,
                    const std::vector<std::shared_ptr<const backends::Backend>>& backends,
                    const std::function<int(const std::string&)>& slot_of) {
  std::vector<PlannedStep>& steps = plan.body.steps;
  std::map<const ir::Operation*, Placement*> placement_of;
  for (Placement& p : plan.placements) placement_of[p.op] = &p;
  const size_t n = steps.size();
  std::vector<int> owner(n, -1);  // index into `backends`, -1 = our kernels
  std::vector<bool> locked(n, false);
  std::vector<std::string> reason(n);
  for (size_t i = 0; i < n; ++i)
    if (std::optional<std::string> why = kept_ours_because(steps[i])) {
      locked[i] = true;
      reason[i] = std::move(*why);
    }

  backends::FunctionView view{*plan.function, {}, values};
  for (const PlannedStep& step : steps) view.ops.push_back(&step.op());
  for (size_t b = 0; b < backends.size(); ++b) {
    std::vector<backends::Verdict> verdicts = backends[b]->propose(view);
    COREMLRT_CHECK(verdicts.size() == n, "backend '", backends[b]->name(), "' returned ", verdicts.size(),
                   " verdicts for ", n, " ops");
    for (size_t i = 0; i < n; ++i) {
      if (owner[i] >= 0 || locked[i]) continue;
      if (verdicts[i].claimed) {
        owner[i] = static_cast<int>(b);
        reason[i].clear();
      } else if (reason[i].empty()) {
        reason[i] = backends[b]->name() + ": " + verdicts[i].reason;
      }
    }
  }

  std::vector<PlannedStep> result;
  int regions = 0;
  for (size_t first = 0; first < n;) {
    size_t last = first;
    while (owner[first] >= 0 && last + 1 < n && owner[last + 1] == owner[first]) ++last;
    if (owner[first] < 0) {
      if (Placement* p = placement_of[&steps[first].op()]) p->reason = reason[first];
      result.push_back(std::move(steps[first]));
      first = last + 1;
      continue;
    }
    const backends::Backend& backend = *backends[owner[first]];
    RegionSlots slots = region_slots(plan, steps, first, last, slot_of);
    std::vector<const ir::Operation*> ops;
    for (size_t i = first; i <= last; ++i) ops.push_back(&steps[i].op());
    backends::Region region{*plan.function, ops, named(plan, slots.inputs), named(plan, slots.outputs), values};
    const backends::Verdict worth = backend.worth_running(region);
    std::string why = worth.reason;
    std::unique_ptr<ops::Kernel> kernel;
    if (worth.claimed) {
      try {
        kernel = backend.compile(region);
      } catch (const Error& e) {
        why = std::string("could not compile the region: ") + e.what();
      }
    }
    if (!kernel) {
      for (size_t i = first; i <= last; ++i) {
        if (Placement* p = placement_of[&steps[i].op()]) p->reason = backend.name() + ": " + why;
        result.push_back(std::move(steps[i]));
      }
      first = last + 1;
      continue;
    }
    PlannedStep step;
    // The region's own steps stay in the plan as nested block 0, on our kernels: the compiled
    // kernel runs them when its inputs turn out not to have the shapes it was compiled for
    // (src/backends/backend.h). Their intermediate buffers are freed when the prediction ends.
    auto fallback = std::make_unique<BlockPlan>();
    for (size_t i = first; i <= last; ++i) fallback->steps.push_back(std::move(steps[i]));
    fallback->output_slots = slots.outputs;
    step.blocks.push_back(std::move(fallback));
    step.kind = RegionStep{ops, region_label(backend.name(), regions, ops)};
    step.kernel = std::move(kernel);
    step.kernel_state = plan.kernel_state_count++;
    step.input_slots = slots.inputs;
    step.output_slots = slots.outputs;
    for (const ir::Operation* op : ops)
      if (Placement* p = placement_of[op]) {
        p->backend = backend.name();
        p->reason.clear();
        p->region = regions;
      }
    // The packed weights the region holds decoded: their constexpr ops' placements say so.
    const std::string region_name = backend.name() + " region #" + std::to_string(regions);
    for (const auto& [constant, note] : backend.decoded_constants(region))
      for (Placement& p : plan.placements)
        if (p.backend == "packed" && values.constant(p.output) == constant &&
            p.reason.find(region_name + " ") == std::string::npos)
          p.reason += "; " + region_name + " reads it " + note;
    ++regions;
    result.push_back(std::move(step));
    first = last + 1;
  }
  steps = std::move(result);
}

}  // namespace coremlrt::runtime
