#include "runtime/plan.h"

#include <map>
#include <set>

#include "ops/packed_weight.h"
#include "ops/state_update.h"
#include "runtime/execute.h"
#include "runtime/partition.h"
#include "runtime/state_update.h"

namespace coremlrt::runtime {

namespace {

// Ops whose result must not be computed at load even when every input is constant: those
// with nested blocks and those whose registry entry says so (src/ops/kernel.h, OpTraits).
bool foldable(const ir::Operation& op, const ops::OpTraits& traits) {
  return op.blocks.empty() && !traits.never_fold;
}

class PlanBuilder;

class StepBuilder final : public ops::KernelBuilder {
 public:
  StepBuilder(PlanBuilder& plan, const ir::Operation& op, bool binds_state)
      : plan_(plan), op_(op), binds_state_(binds_state) {}
  const ir::Operation& op() const override { return op_; }
  const ir::Function& function() const override;
  int input(const std::string& param) override {
    const std::vector<ir::Binding>* bindings = find(param);
    check(bindings != nullptr, "missing required input '", param, "'");
    check(bindings->size() == 1, "input '", param, "' has ", bindings->size(), " bindings; expected 1");
    return bind((*bindings)[0], param);
  }
  int optional_input(const std::string& param) override {
    const std::vector<ir::Binding>* bindings = find(param);
    if (!bindings) return -1;
    check(bindings->size() == 1, "input '", param, "' has ", bindings->size(), " bindings; expected 1");
    return bind((*bindings)[0], param);
  }
  std::vector<int> variadic_input(const std::string& param) override {
    const std::vector<ir::Binding>* bindings = find(param);
    check(bindings != nullptr, "missing required input '", param, "'");
    std::vector<int> out;
    for (const ir::Binding& b : *bindings) out.push_back(bind(b, param));
    return out;
  }
  bool has(const std::string& param) const override { return find(param) || op_.attributes.count(param); }
  const ir::ValueType& input_type(const std::string& param) const override;
  const ir::ConstValue* constant(const std::string& param) const override;
  const ir::ConstValue* stored_constant(const std::string& param) const override;
  bool is_constant(const std::string& param) const override;
  int build_block(size_t index) override;

  std::vector<int> input_slots;
  std::vector<std::unique_ptr<BlockPlan>> blocks;

 private:
  const std::vector<ir::Binding>* find(const std::string& param) const {
    auto it = op_.inputs.find(param);
    return it == op_.inputs.end() || it->second.empty() ? nullptr : &it->second;
  }
  int bind(const ir::Binding& binding, const std::string& param);
  // The value of a parameter known at load as stored (packed or not), with the slot it lives
  // in (-1 for an inline value or an attribute); nullptr when absent.
  const ir::ConstValue* lookup(const std::string& param, int* slot) const;

  PlanBuilder& plan_;
  const ir::Operation& op_;
  const bool binds_state_;
};

class PlanBuilder {
 public:
  PlanBuilder(const ir::Function& function, const ops::KernelRegistry& registry, const PlanOptions& options)
      : function_(function), registry_(registry), options_(options), plan_(std::make_unique<Plan>()) {
    plan_->function = &function;
  }

  std::unique_ptr<Plan> build(const std::vector<std::shared_ptr<const backends::Backend>>& backends) {
    scopes_.emplace_back();
    for (const ir::NamedValue& input : function_.inputs) plan_->input_slots.push_back(define(input));
    fill_block(plan_->body, function_.block, plan_->input_slots, &backends);
    return std::move(plan_);
  }

  // Compiles `block` into `out` in a new scope; `own_slots` are slots the block itself
  // binds (function or block inputs) whose buffers it may release after their last use.
  // The function's own block (and only it) is then partitioned among `backends`.
  void fill_block(BlockPlan& out, const ir::Block& block, std::vector<int> own_slots,
                  const std::vector<std::shared_ptr<const backends::Backend>>* backends = nullptr) {
    BlockPlan* saved = current_;
    current_ = &out;
    for (const ir::Operation& op : block.operations) add_step(op);
    for (const std::string& name : block.outputs) {
      const int slot = slot_of(name);
      if (plan_->packed[slot]) dense_slot(slot, "it is an output of the block");
      out.output_slots.push_back(slot);
    }
    std::vector<std::pair<const ir::Operation*, std::string>> fused;
    if (backends) fused = fuse_state_updates(out);
    if (backends && !backends->empty()) {
      Values values(*this);
      partition_body(*plan_, values, *backends, [this](const std::string& name) { return slot_of(name); });
    }
    for (Placement& p : plan_->placements)
      for (const auto& [op, why] : fused)
        if (p.op == op) p.reason = why;
    for (const PlannedStep& step : out.steps)
      own_slots.insert(own_slots.end(), step.output_slots.begin(), step.output_slots.end());
    compute_releases(out, own_slots);
    current_ = saved;
  }

  std::unique_ptr<BlockPlan> build_nested(const ir::Block& block) {
    auto nested = std::make_unique<BlockPlan>();
    scopes_.emplace_back();
    for (const ir::NamedValue& input : block.inputs) nested->input_slots.push_back(define(input));
    fill_block(*nested, block, nested->input_slots);
    scopes_.pop_back();
    return nested;
  }

  const ir::Function& function() const { return function_; }
  Plan& plan() { return *plan_; }

  int slot_of(const std::string& name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      auto it = scope->find(name);
      if (it != scope->end()) return it->second;
    }
    fail("function '", function_.name, "': value '", name, "' is not defined");
  }
  std::shared_ptr<const ir::ConstValue> constant_of(int slot) const {
    auto it = constant_values_.find(slot);
    return it == constant_values_.end() ? nullptr : it->second;
  }
  int add_constant(std::shared_ptr<const ir::ConstValue> value) {
    int slot = new_slot("<inline constant>", value->type);
    set_constant(slot, std::move(value));
    return slot;
  }

  // The decoded values of a packed constant (once per constant), for a reader that needs them
  // dense; `value` itself when it is not packed.
  const ir::ConstValue* dense_of(const ir::ConstValue* value) {
    if (!value || !value->packed) return value;
    auto it = dense_.find(value);
    if (it != dense_.end()) return it->second.get();
    auto dense = std::make_shared<ir::ConstValue>(*value);
    dense->packed = nullptr;
    dense->tensor = ops::decode_dense(*value->packed);
    dense->tensor.storage->freeze();
    return (dense_[value] = std::move(dense)).get();
  }

  // Replaces a packed slot's value by its decoded values, because `why` (a reader that reads it
  // densely); the constexpr op that produced it is then reported as folded.
  const ir::ConstValue* dense_slot(int slot, const std::string& why) {
    const ir::ConstValue* packed = constant_of(slot).get();
    if (!packed || !packed->packed) return packed;
    const ir::ConstValue* dense = dense_of(packed);
    std::shared_ptr<const ir::ConstValue> kept = dense_.at(packed);
    auto producer = packed_producers_.find(slot);
    if (producer != packed_producers_.end()) {
      Placement& p = plan_->placements[producer->second];
      p.backend = "folded";
      p.reason = "decoded into a dense constant at load: " + why;
      --plan_->packed_ops;
      ++plan_->folded_ops;
      packed_producers_.erase(producer);
    }
    retired_.push_back(constant_of(slot));  // dense_ is keyed by its address: keep it alive
    set_constant(slot, kept);
    return dense;
  }

 private:
  int new_slot(const std::string& name, const ir::ValueType& type) {
    plan_->slot_names.push_back(name);
    plan_->slot_types.push_back(type);
    plan_->constants.emplace_back();
    plan_->packed.emplace_back();
    return static_cast<int>(plan_->slot_names.size() - 1);
  }
  int define(const ir::NamedValue& value) {
    int slot = new_slot(value.name, value.type);
    scopes_.back()[value.name] = slot;
    return slot;
  }
  void set_constant(int slot, std::shared_ptr<const ir::ConstValue> value) {
    if (value->tensor.storage) value->tensor.storage->freeze();
    plan_->constants[slot] = value->tensor;
    plan_->packed[slot] = value->packed;
    constant_values_[slot] = std::move(value);
  }

  // The function's values as backends see them (src/backends/backend.h).
  class Values final : public backends::ValueInfo {
   public:
    explicit Values(const PlanBuilder& builder) : builder_(builder) {}
    const ir::ValueType& type(const std::string& name) const override {
      return builder_.plan_->slot_types[builder_.slot_of(name)];
    }
    const ir::ConstValue* constant(const std::string& name) const override {
      return builder_.constant_of(builder_.slot_of(name)).get();
    }
    using backends::ValueInfo::constant;
    using backends::ValueInfo::type;

   private:
    const PlanBuilder& builder_;
  };

  void add_step(const ir::Operation& op) {
    if (op.type == "const") {
      auto val = op.attributes.find("val");
      COREMLRT_CHECK(val != op.attributes.end() && op.outputs.size() == 1, "function '", function_.name, "', ",
                     op.describe(), ": a const op needs a 'val' attribute and one output");
      int slot = define(op.outputs[0]);
      set_constant(slot, val->second);
      return;
    }
    const ops::KernelRegistry::Entry* entry = registry_.find_entry(op.type, function_.ios_version);
    COREMLRT_CHECK_AS(ErrorKind::Unsupported, entry != nullptr, "unsupported op: function '", function_.name, "', ", op.describe(),
                   ": this build has no kernel for op type '", op.type, "' in opset ", function_.opset);
    if (entry->packed && options_.packed_weights && foldable(op, entry->traits) && keep_packed(op, *entry)) return;
    PlannedStep step;
    step.kind = OpStep{&op, entry->traits};
    StepBuilder builder(*this, op, entry->traits.binds_state);
    step.kernel = entry->factory(builder);
    step.input_slots = std::move(builder.input_slots);
    step.blocks = std::move(builder.blocks);
    for (const ir::NamedValue& out : op.outputs) step.output_slots.push_back(define(out));
    bool all_constant = foldable(op, entry->traits);
    for (int slot : step.input_slots) all_constant = all_constant && plan_->constants[slot].defined();
    if (current_ == &plan_->body)
      plan_->placements.push_back({&op, op.type, op.name, op.outputs.empty() ? "" : op.outputs[0].name,
                                   all_constant ? "folded" : "reference", "", -1});
    if (all_constant) {
      std::vector<Tensor> outputs = run_step_once(*plan_, step);
      for (size_t i = 0; i < outputs.size(); ++i) {
        auto value = std::make_shared<ir::ConstValue>();
        value->type = op.outputs[i].type;
        value->tensor = std::move(outputs[i]);
        set_constant(step.output_slots[i], std::move(value));
      }
      ++plan_->folded_ops;
      return;
    }
    current_->steps.push_back(std::move(step));
  }

  // A constexpr_* op whose inputs are all known at load and whose result has a packed form:
  // its outputs become packed constants (src/ir/packed.h), which the kernels that read them
  // decode as they run; a reader that cannot read them packed decodes them (dense_slot).
  // Returns false when the op is to be folded as any other op.
  bool keep_packed(const ir::Operation& op, const ops::KernelRegistry::Entry& entry) {
    for (const auto& [param, bindings] : op.inputs)
      for (const ir::Binding& b : bindings)
        if (!b.value && !constant_of(slot_of(b.name))) return false;
    StepBuilder builder(*this, op, false);
    std::vector<std::shared_ptr<const ir::ConstValue>> outputs = entry.packed(builder);
    if (outputs.empty()) return false;
    COREMLRT_CHECK(outputs.size() == op.outputs.size(), "function '", function_.name, "', ", op.describe(), ": ",
                   outputs.size(), " packed outputs for ", op.outputs.size(), " outputs");
    std::string forms;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const int slot = define(op.outputs[i]);
      if (outputs[i]->packed) {
        forms += (forms.empty() ? "" : "; ") + outputs[i]->packed->form();
        if (current_ == &plan_->body) packed_producers_[slot] = plan_->placements.size();
      }
      set_constant(slot, std::move(outputs[i]));
    }
    if (current_ == &plan_->body)
      plan_->placements.push_back({&op, op.type, op.name, op.outputs.empty() ? "" : op.outputs[0].name, "packed",
                                   "kept packed (" + forms + "): the kernels that read it decode it as they run", -1});
    ++plan_->packed_ops;
    return true;
  }

  // Replaces each KV-cache chain of `block` (src/runtime/state_update.h) by one step that
  // updates the state's buffer in place, at the chain's write_state. Returns the chain's ops
  // with the reason their placement reports.
  std::vector<std::pair<const ir::Operation*, std::string>> fuse_state_updates(BlockPlan& block) {
    Values values(*this);
    std::vector<StateUpdateChain> chains =
        find_state_update_chains(*plan_, block, values, [this](const std::string& name) { return slot_of(name); });
    std::vector<std::pair<const ir::Operation*, std::string>> fused;
    if (chains.empty()) return fused;
    std::vector<bool> removed(block.steps.size(), false);
    for (const StateUpdateChain& chain : chains) {
      PlannedStep& update = block.steps[chain.update];
      PlannedStep& write = block.steps[chain.write];
      PlannedStep step;
      step.kind = OpStep{&update.op(), write.op_step().traits};  // binds a state: no backend takes it
      StepBuilder builder(*this, update.op(), false);
      builder.input_slots.push_back(chain.state_slot);
      step.kernel = chain.scatter ? ops::in_place_state_scatter_nd(builder, 0)
                                  : ops::in_place_state_slice_update(builder, 0);
      step.input_slots = std::move(builder.input_slots);
      const std::string why = "with the read_state, casts and write_state around it, one update of state '" +
                              plan_->slot_names[chain.state_slot] + "' in place (src/runtime/state_update.h)";
      for (int index : {chain.read, chain.widen, chain.update, chain.narrow, chain.write}) {
        if (index < 0) continue;
        fused.emplace_back(&block.steps[index].op(), why);
        removed[index] = true;
      }
      removed[chain.write] = false;
      write = std::move(step);
    }
    std::vector<PlannedStep> kept;
    for (size_t i = 0; i < block.steps.size(); ++i)
      if (!removed[i]) kept.push_back(std::move(block.steps[i]));
    block.steps = std::move(kept);
    return fused;
  }

  // Every slot a step reads, its nested blocks included.
  static void collect_reads(const PlannedStep& step, std::vector<int>& out) {
    out.insert(out.end(), step.input_slots.begin(), step.input_slots.end());
    for (const auto& block : step.blocks) {
      for (const PlannedStep& nested : block->steps) collect_reads(nested, out);
      out.insert(out.end(), block->output_slots.begin(), block->output_slots.end());
    }
  }

  // A value the block owns may have its buffer reused after the last step that reads it
  // (reads inside nested blocks count as reads by the op holding them), unless it is a
  // block output, a constant or a state.
  void compute_releases(BlockPlan& block, const std::vector<int>& own_slots) {
    std::map<int, int> last_use;
    for (int slot : own_slots) last_use[slot] = -1;
    for (size_t i = 0; i < block.steps.size(); ++i) {
      std::vector<int> reads;
      collect_reads(block.steps[i], reads);
      for (int slot : reads)
        if (last_use.count(slot)) last_use[slot] = static_cast<int>(i);
      for (int slot : block.steps[i].output_slots)
        if (last_use[slot] < static_cast<int>(i)) last_use[slot] = static_cast<int>(i);
    }
    std::set<int> kept(block.output_slots.begin(), block.output_slots.end());
    for (auto [slot, step] : last_use) {
      // States stay bound until the end: their final values are read after the last step.
      if (step < 0 || kept.count(slot) || plan_->constants[slot].defined() ||
          plan_->slot_types[slot].kind == ir::TypeKind::State)
        continue;
      block.steps[step].release_slots.push_back(slot);
    }
  }

  const ir::Function& function_;
  const ops::KernelRegistry& registry_;
  const PlanOptions options_;
  std::unique_ptr<Plan> plan_;
  std::map<const ir::ConstValue*, std::shared_ptr<const ir::ConstValue>> dense_;  // decoded packed constants
  std::map<int, size_t> packed_producers_;  // packed slot -> placement of the constexpr op that made it
  std::vector<std::shared_ptr<const ir::ConstValue>> retired_;  // packed values replaced by dense ones
  std::vector<std::map<std::string, int>> scopes_;  // innermost last
  BlockPlan* current_ = nullptr;                     // the block steps are added to
  std::map<int, std::shared_ptr<const ir::ConstValue>> constant_values_;
};

const ir::Function& StepBuilder::function() const { return plan_.function(); }

int StepBuilder::bind(const ir::Binding& binding, const std::string& param) {
  int slot;
  if (binding.value) {
    slot = plan_.add_constant(binding.value);
  } else {
    slot = plan_.slot_of(binding.name);
    const ir::ValueType& type = plan_.plan().slot_types[slot];
    check(type.kind != ir::TypeKind::State || binds_state_, "input '", param,
          "' is a state, which only ops that bind states (read_state, write_state) accept");
  }
  // A kernel that reads the value at run time reads a tensor: a packed constant is decoded.
  if (plan_.plan().packed[slot]) plan_.dense_slot(slot, op_.describe() + " reads it as input '" + param + "'");
  input_slots.push_back(slot);
  return static_cast<int>(input_slots.size() - 1);
}

const ir::ValueType& StepBuilder::input_type(const std::string& param) const {
  const std::vector<ir::Binding>* bindings = find(param);
  check(bindings != nullptr, "missing required input '", param, "'");
  const ir::Binding& b = (*bindings)[0];
  if (b.value) return b.value->type;
  return plan_.plan().slot_types[plan_.slot_of(b.name)];
}

const ir::ConstValue* StepBuilder::lookup(const std::string& param, int* slot) const {
  *slot = -1;
  if (const std::vector<ir::Binding>* bindings = find(param)) {
    check(bindings->size() == 1, "parameter '", param, "' must be a single constant");
    const ir::Binding& b = (*bindings)[0];
    if (b.value) return b.value.get();
    *slot = plan_.slot_of(b.name);
    auto value = plan_.constant_of(*slot);
    check(value != nullptr, "parameter '", param, "' must be a compile-time constant, but is bound to '", b.name,
          "', which is computed at run time");
    return value.get();
  }
  auto attr = op_.attributes.find(param);
  if (attr != op_.attributes.end() && param != "name") return attr->second.get();
  return nullptr;
}

const ir::ConstValue* StepBuilder::stored_constant(const std::string& param) const {
  int slot;
  return lookup(param, &slot);
}

const ir::ConstValue* StepBuilder::constant(const std::string& param) const {
  int slot;
  const ir::ConstValue* value = lookup(param, &slot);
  if (!value || !value->packed) return value;
  if (slot >= 0) return plan_.dense_slot(slot, op_.describe() + " reads parameter '" + param + "' densely");
  return plan_.dense_of(value);
}

int StepBuilder::build_block(size_t index) {
  check(index < op_.blocks.size(), "has no block #", index);
  blocks.push_back(plan_.build_nested(op_.blocks[index]));
  return static_cast<int>(blocks.size() - 1);
}

bool StepBuilder::is_constant(const std::string& param) const {
  if (const std::vector<ir::Binding>* bindings = find(param)) {
    for (const ir::Binding& b : *bindings)
      if (!b.value && !plan_.constant_of(plan_.slot_of(b.name))) return false;
    return true;
  }
  return op_.attributes.count(param) && param != "name";
}

}  // namespace

const OpStep& PlannedStep::op_step() const {
  const OpStep* step = as_op();
  COREMLRT_CHECK(step != nullptr, "internal error: ", describe(), " is a backend region, not an op step");
  return *step;
}

std::string PlannedStep::describe() const {
  if (const OpStep* step = as_op()) return step->op->describe();
  return as_region()->label;
}

void collect_reads(const PlannedStep& step, std::vector<int>& out) {
  out.insert(out.end(), step.input_slots.begin(), step.input_slots.end());
  for (const auto& block : step.blocks) {
    for (const PlannedStep& nested : block->steps) collect_reads(nested, out);
    out.insert(out.end(), block->output_slots.begin(), block->output_slots.end());
  }
}

std::unique_ptr<Plan> build_plan(const ir::Function& function, const ops::KernelRegistry& registry,
                                 const std::vector<std::shared_ptr<const backends::Backend>>& backends,
                                 const PlanOptions& options) {
  return PlanBuilder(function, registry, options).build(backends);
}

}  // namespace coremlrt::runtime
