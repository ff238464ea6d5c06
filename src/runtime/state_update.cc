#include "runtime/state_update.h"

#include <map>

namespace coremlrt::runtime {

namespace {

class Matcher {
 public:
  Matcher(const Plan& plan, const BlockPlan& block, const backends::ValueInfo& values,
          const std::function<int(const std::string&)>& slot_of)
      : plan_(plan), block_(block), values_(values), slot_of_(slot_of) {
    for (size_t i = 0; i < block.steps.size(); ++i) {
      for (int slot : block.steps[i].output_slots) producer_[slot] = static_cast<int>(i);
      std::vector<int> reads;
      collect_reads(block.steps[i], reads);
      for (int slot : reads) ++reads_[slot];
    }
    for (int slot : block.output_slots) ++reads_[slot];
  }

  bool match(int write, StateUpdateChain& chain) const {
    const PlannedStep& w = block_.steps[write];
    if (!is(w, "write_state")) return false;
    const int state = param_slot(w, "input"), data = param_slot(w, "data");
    if (state < 0 || data < 0 || plan_.slot_types[state].kind != ir::TypeKind::State || !plan_.slot_types[state].element)
      return false;
    const DType state_dtype = plan_.slot_types[state].element->dtype;
    chain.write = write;
    chain.state_slot = state;
    int updated = data;  // the slice_update's result, cast or not
    int p = single_use_producer(data);
    if (p >= 0 && is(block_.steps[p], "cast")) {
      if (state_dtype != DType::Float16 || cast_target(p) != "fp16") return false;
      chain.narrow = p;
      updated = param_slot(block_.steps[p], "x");
      if (updated < 0 || plan_.slot_types[updated].dtype != DType::Float32) return false;
      p = single_use_producer(updated);
    }
    if (p < 0) return false;
    chain.scatter = is(block_.steps[p], "scatter_nd");
    if (!(chain.scatter ? const_string(p, "mode") == "update" : is(block_.steps[p], "slice_update"))) return false;
    chain.update = p;
    int source = param_slot(block_.steps[p], chain.scatter ? "data" : "x");
    const int update_value = param_slot(block_.steps[p], chain.scatter ? "updates" : "update");
    if (source < 0 || update_value < 0) return false;
    // The update must have the state's dtype, or be fp32 beside casts (written rounded to fp16).
    const DType update_dtype = plan_.slot_types[update_value].dtype;
    if (update_dtype != (chain.narrow >= 0 ? DType::Float32 : state_dtype)) return false;
    if (chain.narrow >= 0) {
      // The widened cache may have other readers too (the attention that the next layer's
      // write follows): then the cast stays, and the update no longer needs its result.
      auto widen = producer_.find(source);
      if (widen == producer_.end()) return false;
      p = widen->second;
      if (!is(block_.steps[p], "cast") || cast_target(p) != "fp32") return false;
      chain.widen = single_use_producer(source) == p ? p : -1;
      source = param_slot(block_.steps[p], "x");
      if (source < 0 || plan_.slot_types[source].dtype != DType::Float16) return false;
    }
    // The value read may have other readers as well: then the read_state stays. Readers that run after the update
    // still see the old contents: the update writes into a copy while another value views the
    // state's buffer (KernelContext::writable_state).
    auto reader = producer_.find(source);
    if (reader == producer_.end()) return false;
    const int read = reader->second;
    if (!is(block_.steps[read], "read_state") || param_slot(block_.steps[read], "input") != state) return false;
    // A cast that stays still reads the value, so its read_state stays too.
    const bool widen_stays = chain.narrow >= 0 && chain.widen < 0;
    chain.read = !widen_stays && single_use_producer(source) == read ? read : -1;
    // The value read must be the one the write replaces: no other write to the state between.
    for (int i = read + 1; i < write; ++i)
      if (is(block_.steps[i], "write_state") && param_slot(block_.steps[i], "input") == state) return false;
    return true;
  }

 private:
  static bool is(const PlannedStep& step, const char* type) {
    const OpStep* op_step = step.as_op();
    return op_step && op_step->op->type == type;
  }

  // The slot bound to a parameter by name; -1 when inline, absent or variadic.
  int param_slot(const PlannedStep& step, const char* param) const {
    const ir::Operation& op = step.op();
    auto it = op.inputs.find(param);
    if (it == op.inputs.end() || it->second.size() != 1 || it->second[0].value) return -1;
    return slot_of_(it->second[0].name);
  }

  // The step that produces `slot` when that step's outputs are all read exactly once (by the
  // chain) and none is a block output; -1 otherwise.
  int single_use_producer(int slot) const {
    auto it = producer_.find(slot);
    if (it == producer_.end()) return -1;
    const PlannedStep& step = block_.steps[it->second];
    for (int out : step.output_slots) {
      auto r = reads_.find(out);
      if (r == reads_.end() || r->second != 1) return -1;
    }
    return it->second;
  }

  std::string cast_target(int index) const { return const_string(index, "dtype"); }

  // A string parameter known at load (an input or an attribute); empty when not.
  std::string const_string(int index, const char* param) const {
    const ir::Operation& op = block_.steps[index].op();
    const ir::ConstValue* value = nullptr;
    if (auto it = op.inputs.find(param); it != op.inputs.end() && it->second.size() == 1)
      value = values_.constant(it->second[0]);
    else if (auto attr = op.attributes.find(param); attr != op.attributes.end())
      value = attr->second.get();
    return value && value->strings.size() == 1 ? value->strings[0] : std::string();
  }

  const Plan& plan_;
  const BlockPlan& block_;
  const backends::ValueInfo& values_;
  const std::function<int(const std::string&)>& slot_of_;
  std::map<int, int> producer_;  // slot -> step index
  std::map<int, int> reads_;     // slot -> number of reads (block outputs count)
};

}  // namespace

std::vector<StateUpdateChain> find_state_update_chains(const Plan& plan, const BlockPlan& block,
                                                       const backends::ValueInfo& values,
                                                       const std::function<int(const std::string&)>& slot_of) {
  Matcher matcher(plan, block, values, slot_of);
  std::vector<StateUpdateChain> chains;
  for (size_t i = 0; i < block.steps.size(); ++i) {
    StateUpdateChain chain;
    if (matcher.match(static_cast<int>(i), chain)) chains.push_back(chain);
  }
  return chains;
}

}  // namespace coremlrt::runtime
