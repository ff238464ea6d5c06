#include "runtime/execute.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "coremlrt/state.h"

namespace coremlrt::runtime {

Tensor BufferPool::allocate(DType dtype, Shape shape) {
  size_t bytes = 0;
  const int64_t numel = shape_numel(shape);
  if (numel < 0 || __builtin_mul_overflow(static_cast<size_t>(numel), dtype_size(dtype), &bytes))
    return Tensor::empty(dtype, std::move(shape));  // refuses the shape with an Error naming it
  auto it = free_.lower_bound(bytes);
  // Reuse a free buffer unless it is much larger than needed.
  if (it != free_.end() && it->first <= 2 * bytes + 4096) {
    Tensor t;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.storage = std::move(it->second);
    t.data = t.storage->data();
    pooled_bytes_ -= it->first;
    free_.erase(it);
    return t;
  }
  return Tensor::empty(dtype, std::move(shape));
}

void BufferPool::recycle(Tensor&& tensor) {
  std::shared_ptr<Storage> storage = std::move(tensor.storage);
  tensor = Tensor();
  if (!storage || !storage->engine_owned() || storage.use_count() != 1) return;
  pooled_bytes_ += storage->size();
  size_t size = storage->size();
  free_.emplace(size, std::move(storage));
}

void BufferPool::clear() {
  free_.clear();
  pooled_bytes_ = 0;
}

namespace {

// dtype and rank as declared. Dims are what the op computes, not the static dims the file
// declares: coremltools' type inference writes some wrongly (slice_by_size with a negative
// begin and size -1, a literal 0 from a reshape shape), and Core ML derives shapes itself when
// it compiles a program, so such models run there (docs/design/declared-shapes.md).
bool matches_declared(const Tensor& t, const ir::ValueType& type) {
  if (type.kind != ir::TypeKind::Tensor) return true;
  if (t.dtype != type.dtype) return false;
  return type.rank < 0 || t.rank() == type.rank;
}

using KernelStates = std::vector<std::unique_ptr<ops::KernelState>>;

}  // namespace

// What one run knows about its state inputs' buffers, and how to undo in-place writes into
// them if it fails (KernelContext::writable_state, on_failure).
struct RunJournal {
  // Per state input: the value bound (kept here, so its buffer outlives every undo) and the
  // references to its buffer other than this one when it was bound: the caller's state object
  // and the slot. A buffer nobody else holds may be written in place.
  std::map<int, std::pair<Tensor, long>> bound;
  std::vector<std::function<void()>> undos;
};

namespace {

void run_steps(const Plan& plan, const BlockPlan& block, std::vector<Tensor>& slots, BufferPool* pool,
               KernelStates* states, RunJournal* journal);

class StepContext final : public ops::KernelContext {
 public:
  StepContext(const Plan& plan, const PlannedStep& step, std::vector<Tensor>& slots, BufferPool* pool,
              KernelStates* states, RunJournal* journal)
      : plan_(plan), step_(step), slots_(slots), pool_(pool), states_(states), journal_(journal) {}

  const Tensor& input(int index) const override {
    if (index < 0 || index >= static_cast<int>(step_.input_slots.size()))
      fail("kernel asked for input #", index, ", which it did not request at load");
    int slot = step_.input_slots[index];
    const Tensor& constant = plan_.constants[slot];
    return constant.defined() ? constant : slots_[slot];
  }
  Tensor& allocate_output(int output_index, DType dtype, Shape shape) override {
    Tensor& out = output_slot(output_index);
    out = pool_ ? pool_->allocate(dtype, std::move(shape)) : Tensor::empty(dtype, std::move(shape));
    return out;
  }
  void set_output(int output_index, Tensor tensor) override { output_slot(output_index) = std::move(tensor); }
  std::vector<Tensor> run_block(int index, std::vector<Tensor> inputs) override {
    if (index < 0 || index >= static_cast<int>(step_.blocks.size())) fail("has no compiled block #", index);
    const BlockPlan& block = *step_.blocks[index];
    if (inputs.size() != block.input_slots.size())
      fail("block #", index, " takes ", block.input_slots.size(), " inputs; got ", inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) slots_[block.input_slots[i]] = std::move(inputs[i]);
    run_steps(plan_, block, slots_, pool_, states_, journal_);
    std::vector<Tensor> outputs;
    for (int slot : block.output_slots) {
      const Tensor& constant = plan_.constants[slot];
      outputs.push_back(constant.defined() ? constant : slots_[slot]);
    }
    return outputs;
  }
  void replace_state(int index, Tensor value) override {
    if (index < 0 || index >= static_cast<int>(step_.input_slots.size()))
      fail("kernel replaced input #", index, ", which it did not request at load");
    const int slot = step_.input_slots[index];
    if (plan_.slot_types[slot].kind != ir::TypeKind::State) fail("input #", index, " is not a state");
    slots_[slot] = std::move(value);
  }
  Tensor* writable_state(int index) override {
    if (!journal_ || index < 0 || index >= static_cast<int>(step_.input_slots.size())) return nullptr;
    const int slot = step_.input_slots[index];
    if (plan_.slot_types[slot].kind != ir::TypeKind::State) return nullptr;
    Tensor& t = slots_[slot];
    const Storage* storage = t.storage.get();
    if (!storage || !storage->engine_owned() || t.data != storage->data() || storage->size() < t.nbytes()) return nullptr;
    // Writable when the only holders are the ones it had when bound (the caller's state object
    // and this slot), or, for a buffer made during this run, this slot alone: then no other
    // value of the prediction (a read_state result still to be read, a view of one) sees it.
    const long allowed = bound_buffer(slot) ? journal_->bound[slot].second + 1 : 1;
    return t.storage.use_count() <= allowed ? &t : nullptr;
  }
  void on_failure(int index, std::function<void()> undo) override {
    if (!journal_ || index < 0 || index >= static_cast<int>(step_.input_slots.size()))
      fail("recorded an undo outside a prediction");
    // A buffer made during this run is dropped with it if the run fails: nothing to undo.
    if (bound_buffer(step_.input_slots[index])) journal_->undos.push_back(std::move(undo));
  }
  void count_state_bytes(size_t copied, size_t written) override { add_state_traffic(copied, written); }
  std::string where() const override { return "function '" + plan_.function->name + "', " + step_.describe(); }
  std::unique_ptr<ops::KernelState>& kernel_state() override {
    if (step_.kernel_state < 0 || !states_ || step_.kernel_state >= static_cast<int>(states_->size()))
      fail("asked for a per-context kernel state, which this step was not planned with");
    return (*states_)[step_.kernel_state];
  }

  // Every output set, with the dtype and rank the program declares.
  void check_outputs() const {
    for (size_t i = 0; i < step_.output_slots.size(); ++i) {
      const int slot = step_.output_slots[i];
      const Tensor& t = slots_[slot];
      const ir::ValueType& declared = plan_.slot_types[slot];
      const std::string& name = plan_.slot_names[slot];
      if (!t.defined()) fail("kernel did not produce output '", name, "'");
      // A class label (classify) is declared int64-or-string, and its dictionary is not a
      // tensor type and so is not checked. Tensors hold no strings, so the kernel returns the
      // winning class index as an int32 scalar for either label type (ops/classify.cc; the
      // labels are Model::class_labels()). Check that encoding instead of the declared dtype.
      const OpStep* op_step = step_.as_op();
      if (op_step && op_step->traits.class_index_label && i == 0) {
        if (t.dtype != DType::Int32 || t.rank() != 0)
          fail("output '", name, "' is ", dtype_name(t.dtype), " ", shape_str(t.shape),
               " but a class label must be encoded as an int32 class index scalar");
        continue;
      }
      if (!matches_declared(t, declared))
        fail("output '", name, "' is ", dtype_name(t.dtype), " ", shape_str(t.shape), " but the program declares ",
             declared.str());
    }
  }

 private:
  // Whether the state in `slot` still has the buffer the caller bound (kept alive by the journal).
  bool bound_buffer(int slot) const {
    auto it = journal_->bound.find(slot);
    return it != journal_->bound.end() && it->second.first.storage == slots_[slot].storage;
  }
  Tensor& output_slot(int index) {
    if (index < 0 || index >= static_cast<int>(step_.output_slots.size()))
      fail("kernel wrote output #", index, ", which the op does not have");
    return slots_[step_.output_slots[index]];
  }
  const Plan& plan_;
  const PlannedStep& step_;
  std::vector<Tensor>& slots_;
  BufferPool* pool_;
  KernelStates* states_;
  RunJournal* journal_;
};

void run_steps(const Plan& plan, const BlockPlan& block, std::vector<Tensor>& slots, BufferPool* pool,
               KernelStates* states, RunJournal* journal) {
  for (const PlannedStep& step : block.steps) {
    StepContext context(plan, step, slots, pool, states, journal);
    try {
      step.kernel->run(context);
    } catch (const Error& e) {
      // Shared helpers (broadcasting, dispatch) do not know which op called them.
      const std::string where = context.where();
      if (std::string(e.what()).rfind(where, 0) == 0) throw;
      fail_like(e, where, ": ", e.what());
    }
    context.check_outputs();
    for (int slot : step.release_slots) {
      if (pool) pool->recycle(std::move(slots[slot]));
      else slots[slot] = Tensor();
    }
  }
}

}  // namespace

ExecutionContext::Result ExecutionContext::run(std::vector<Tensor> inputs) {
  COREMLRT_CHECK(inputs.size() == plan_.input_slots.size(), "function '", plan_.function->name, "' takes ",
                 plan_.input_slots.size(), " inputs; got ", inputs.size());
  RunJournal journal;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int slot = plan_.input_slots[i];
    slots_[slot] = std::move(inputs[i]);
    // A state the caller's state object and this slot share (two holders) may be written in
    // place; one anybody else also holds may not.
    if (plan_.slot_types[slot].kind == ir::TypeKind::State && slots_[slot].storage)
      journal.bound[slot] = {slots_[slot], std::min<long>(slots_[slot].storage.use_count(), 2)};
  }
  struct ClearSlots {  // whatever happens, no caller tensor stays referenced after run()
    std::vector<Tensor>& slots;
    BufferPool& pool;
    ~ClearSlots() {
      for (Tensor& t : slots)
        if (t.defined()) pool.recycle(std::move(t));
    }
  } clear{slots_, pool_};
  try {
    run_steps(plan_, plan_.body, slots_, &pool_, &kernel_states_, &journal);
  } catch (...) {
    // Put back what steps wrote into the caller's state buffers, newest first: a failed
    // prediction leaves its state as it was.
    for (auto undo = journal.undos.rbegin(); undo != journal.undos.rend(); ++undo) (*undo)();
    throw;
  }
  // Results that view memory the caller does not own outright (its inputs, constants)
  // are copied.
  auto owned = [](Tensor t, bool constant) {
    bool exclusive = t.storage && t.storage->engine_owned() && !constant;
    return exclusive ? t : t.clone();
  };
  Result result;
  for (int slot : plan_.body.output_slots) {
    const Tensor& constant = plan_.constants[slot];
    Tensor out = owned(constant.defined() ? constant : slots_[slot], constant.defined());
    // Each output is the caller's own array: outputs sharing a buffer (a value and a
    // reshape of it, say) must not alias each other.
    for (const Tensor& earlier : result.outputs)
      if (earlier.storage == out.storage) out = out.clone();
    result.outputs.push_back(std::move(out));
  }
  for (size_t i = 0; i < plan_.input_slots.size(); ++i) {
    const int slot = plan_.input_slots[i];
    if (plan_.slot_types[slot].kind != ir::TypeKind::State) continue;
    Tensor value = slots_[slot];
    // A state keeps its value past this call: never share a buffer with an output.
    for (const Tensor& out : result.outputs)
      if (out.storage == value.storage) value = value.clone();
    result.states.push_back(owned(std::move(value), false));
  }
  return result;
}

std::vector<Tensor> run_step_once(const Plan& plan, const PlannedStep& step) {
  std::vector<Tensor> slots(plan.slot_count());
  StepContext context(plan, step, slots, nullptr, nullptr, nullptr);
  step.kernel->run(context);
  context.check_outputs();
  std::vector<Tensor> outputs;
  for (int slot : step.output_slots) outputs.push_back(std::move(slots[slot]));
  return outputs;
}

}  // namespace coremlrt::runtime
