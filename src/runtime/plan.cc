#include "runtime/plan.h"

#include <map>
#include <set>

#include "runtime/execute.h"

namespace coremlrt::runtime {

namespace {

// Ops whose result must not be computed at load even when every input is constant.
bool foldable(const ir::Operation& op) {
  static const std::set<std::string> kNever = {"read_state", "write_state", "random_uniform", "random_normal",
                                               "random_bernoulli", "random_categorical"};
  return op.blocks.empty() && !kNever.count(op.type);
}

class PlanBuilder;

class StepBuilder final : public ops::KernelBuilder {
 public:
  StepBuilder(PlanBuilder& plan, const ir::Operation& op) : plan_(plan), op_(op) {}
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
  bool is_constant(const std::string& param) const override;

  std::vector<int> input_slots;

 private:
  const std::vector<ir::Binding>* find(const std::string& param) const {
    auto it = op_.inputs.find(param);
    return it == op_.inputs.end() || it->second.empty() ? nullptr : &it->second;
  }
  int bind(const ir::Binding& binding, const std::string& param);

  PlanBuilder& plan_;
  const ir::Operation& op_;
};

class PlanBuilder {
 public:
  PlanBuilder(const ir::Function& function, const ops::KernelRegistry& registry)
      : function_(function), registry_(registry), plan_(std::make_unique<Plan>()) {
    plan_->function = &function;
  }

  std::unique_ptr<Plan> build() {
    for (const ir::NamedValue& input : function_.inputs) plan_->input_slots.push_back(define(input));
    for (const ir::Operation& op : function_.block.operations) add_step(op);
    for (const std::string& name : function_.block.outputs) plan_->output_slots.push_back(slot_of(name));
    compute_releases();
    return std::move(plan_);
  }

  const ir::Function& function() const { return function_; }
  Plan& plan() { return *plan_; }

  int slot_of(const std::string& name) const {
    auto it = slots_.find(name);
    COREMLRT_CHECK(it != slots_.end(), "function '", function_.name, "': value '", name, "' is not defined");
    return it->second;
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

 private:
  int new_slot(const std::string& name, const ir::ValueType& type) {
    plan_->slot_names.push_back(name);
    plan_->slot_types.push_back(type);
    plan_->constants.emplace_back();
    return static_cast<int>(plan_->slot_names.size() - 1);
  }
  int define(const ir::NamedValue& value) {
    int slot = new_slot(value.name, value.type);
    slots_[value.name] = slot;
    return slot;
  }
  void set_constant(int slot, std::shared_ptr<const ir::ConstValue> value) {
    if (value->tensor.storage) value->tensor.storage->freeze();
    plan_->constants[slot] = value->tensor;
    constant_values_[slot] = std::move(value);
  }

  void add_step(const ir::Operation& op) {
    if (op.type == "const") {
      auto val = op.attributes.find("val");
      COREMLRT_CHECK(val != op.attributes.end() && op.outputs.size() == 1, "function '", function_.name, "', ",
                     op.describe(), ": a const op needs a 'val' attribute and one output");
      int slot = define(op.outputs[0]);
      set_constant(slot, val->second);
      return;
    }
    const ops::KernelFactory* factory = registry_.find(op.type, function_.ios_version);
    COREMLRT_CHECK(factory != nullptr, "unsupported op: function '", function_.name, "', ", op.describe(),
                   ": this build has no kernel for op type '", op.type, "' in opset ", function_.opset);
    PlannedStep step;
    step.op = &op;
    StepBuilder builder(*this, op);
    step.kernel = (*factory)(builder);
    step.input_slots = std::move(builder.input_slots);
    for (const ir::NamedValue& out : op.outputs) step.output_slots.push_back(define(out));
    bool all_constant = foldable(op);
    for (int slot : step.input_slots) all_constant = all_constant && plan_->constants[slot].defined();
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
    plan_->steps.push_back(std::move(step));
  }

  // A value's buffer may be reused after the last step that reads it, unless it is a
  // function output, a constant or a state.
  void compute_releases() {
    std::vector<int> last_use(plan_->slot_count(), -1);
    for (size_t i = 0; i < plan_->steps.size(); ++i) {
      for (int slot : plan_->steps[i].input_slots) last_use[slot] = static_cast<int>(i);
      for (int slot : plan_->steps[i].output_slots)
        if (last_use[slot] < static_cast<int>(i)) last_use[slot] = static_cast<int>(i);
    }
    std::set<int> kept(plan_->output_slots.begin(), plan_->output_slots.end());
    for (size_t slot = 0; slot < last_use.size(); ++slot) {
      // States stay bound until the end: their final values are read after the last step.
      if (last_use[slot] < 0 || kept.count(static_cast<int>(slot)) || plan_->constants[slot].defined() ||
          plan_->slot_types[slot].kind == ir::TypeKind::State)
        continue;
      plan_->steps[last_use[slot]].release_slots.push_back(static_cast<int>(slot));
    }
  }

  const ir::Function& function_;
  const ops::KernelRegistry& registry_;
  std::unique_ptr<Plan> plan_;
  std::map<std::string, int> slots_;
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
    check(type.kind != ir::TypeKind::State || op_.type == "read_state" || op_.type == "write_state",
          "input '", param, "' is a state, which only read_state and write_state accept");
  }
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

const ir::ConstValue* StepBuilder::constant(const std::string& param) const {
  if (const std::vector<ir::Binding>* bindings = find(param)) {
    check(bindings->size() == 1, "parameter '", param, "' must be a single constant");
    const ir::Binding& b = (*bindings)[0];
    if (b.value) return b.value.get();
    auto value = plan_.constant_of(plan_.slot_of(b.name));
    check(value != nullptr, "parameter '", param, "' must be a compile-time constant, but is bound to '", b.name,
          "', which is computed at run time");
    return value.get();
  }
  auto attr = op_.attributes.find(param);
  if (attr != op_.attributes.end() && param != "name") return attr->second.get();
  return nullptr;
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

std::unique_ptr<Plan> build_plan(const ir::Function& function, const ops::KernelRegistry& registry) {
  return PlanBuilder(function, registry).build();
}

}  // namespace coremlrt::runtime
