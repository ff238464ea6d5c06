#pragma once
// The contract between the planner and op kernels.
//
// At load, the planner hands each operation to its kernel factory through a KernelBuilder:
// the factory reads constant parameters (axes, pad types, ...), checks them, asks for the
// indices of the runtime inputs it needs, and returns an immutable Kernel. At predict time
// the kernel's run() reads its inputs and writes its outputs through a KernelContext that
// belongs to one execution context, so one Kernel may run on many threads at once.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coremlrt/error.h"
#include "coremlrt/tensor.h"
#include "ir/param_reader.h"
#include "ir/program.h"
#include "ops/op_cost.h"

namespace coremlrt::ops {

// State a kernel keeps for one execution context between calls (an execution backend's infer
// request, say: src/backends/backend.h). Destroyed with the context, off the caller's thread
// when the context pool's reaper frees an idle context (src/runtime/context_pool.h).
class KernelState {
 public:
  virtual ~KernelState() = default;
};

// Implemented by the runtime for one step of one execution context.
class KernelContext {
 public:
  virtual ~KernelContext() = default;
  // The tensor bound to an input index that KernelBuilder returned.
  virtual const Tensor& input(int index) const = 0;
  // A fresh output buffer (from the context's pool), stored as output `output_index`.
  virtual Tensor& allocate_output(int output_index, DType dtype, Shape shape) = 0;
  // Stores a tensor produced otherwise (for example a reshaped view of an input).
  virtual void set_output(int output_index, Tensor tensor) = 0;
  // Runs nested block `block` (as returned by KernelBuilder::build_block) with its inputs
  // bound to `inputs`, and returns the values of its outputs.
  virtual std::vector<Tensor> run_block(int block, std::vector<Tensor> inputs) = 0;
  // Gives the state bound to input `index` a new value for the rest of this prediction
  // (write_state). The caller's state object takes it only if the whole prediction succeeds.
  virtual void replace_state(int index, Tensor value) = 0;
  // The state bound to input `index` when this step may write into its buffer in place: no
  // value of this prediction other than the state itself views that buffer, and nothing but
  // the caller's state object holds it. nullptr otherwise: the kernel then writes a copy and
  // hands it on with replace_state. A kernel that writes in place first records, with
  // on_failure, how to put back what it overwrites, so that a prediction that fails leaves the
  // state as it was (docs/design/architecture.md: a state changes only when a prediction succeeds).
  virtual Tensor* writable_state(int index) = 0;
  // Runs `undo` if this prediction fails, after the undos recorded after it (newest first),
  // when the state bound to input `index` is still the caller's buffer (the buffer a
  // writable_state() pointer pointed to stays alive until then).
  virtual void on_failure(int index, std::function<void()> undo) = 0;
  // Adds to the process-wide counts of state bytes copied and written by predictions
  // (coremlrt::state_traffic(), include/coremlrt/state.h).
  virtual void count_state_bytes(size_t copied, size_t written) = 0;
  // "function 'main', op 'x' (add) producing 'y'", for errors raised while running.
  virtual std::string where() const = 0;
  // This step's state in this execution context: empty until the kernel first fills it. Only
  // steps planned with a state slot have one (backend regions); others fail when they ask.
  virtual std::unique_ptr<KernelState>& kernel_state() = 0;

  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    coremlrt::fail(where(), ": ", std::forward<Parts>(parts)...);
  }
  template <class... Parts>
  [[noreturn]] void fail_as(ErrorKind kind, Parts&&... parts) const {
    coremlrt::fail_as(kind, where(), ": ", std::forward<Parts>(parts)...);
  }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void run(KernelContext& context) const = 0;
};

// Wraps a callable `void(KernelContext&)` as a Kernel.
template <class Fn>
std::unique_ptr<Kernel> make_kernel(Fn fn) {
  struct Lambda final : Kernel {
    explicit Lambda(Fn f) : fn(std::move(f)) {}
    void run(KernelContext& context) const override { fn(context); }
    Fn fn;
  };
  return std::make_unique<Lambda>(std::move(fn));
}

class KernelBuilder : public ir::ParamReader {
 public:
  virtual const ir::Operation& op() const = 0;
  virtual const ir::Function& function() const = 0;
  int ios_version() const { return function().ios_version; }

  // Runtime (or constant) inputs, by parameter name. The returned index is what
  // KernelContext::input takes. `input` throws when the parameter is absent.
  virtual int input(const std::string& param) = 0;
  virtual int optional_input(const std::string& param) = 0;  // -1 when absent
  virtual std::vector<int> variadic_input(const std::string& param) = 0;
  bool has(const std::string& param) const override = 0;
  // Declared type of the (first) value bound to `param`.
  virtual const ir::ValueType& input_type(const std::string& param) const = 0;
  const ir::ValueType& output_type(int index) const;

  // Compile-time value of a parameter (input or attribute); nullptr when absent. Throws
  // when the parameter is bound to a value only known at run time.
  virtual const ir::ConstValue* constant(const std::string& param) const = 0;
  // True when `param` is present and known at load (so constant() would return it).
  virtual bool is_constant(const std::string& param) const = 0;
  // A parameter known at load as the planner keeps it: packed (its `packed` set, its tensor
  // without storage: src/ir/packed.h) when it is a compressed weight, else what constant()
  // returns. Kernels that read a weight packed (src/ops/packed_weight.h) ask for it this way;
  // constant() gives every other reader the decoded values. nullptr when absent.
  virtual const ir::ConstValue* stored_constant(const std::string& param) const = 0;
  // Compiles nested block `index` of the op (cond branches, while_loop condition and
  // body); the result is what KernelContext::run_block takes.
  virtual int build_block(size_t index) = 0;
  // const_int, const_ints, const_float, const_bool, const_bools, const_string: src/ir/param_reader.h.

  // Throws Error prefixed with the function and op description.
  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    coremlrt::fail("function '", function().name, "', ", op().describe(), ": ", std::forward<Parts>(parts)...);
  }
  template <class... Parts>
  void check(bool condition, Parts&&... parts) const {
    if (!condition) fail(std::forward<Parts>(parts)...);
  }

 protected:
  // constant() itself fails for a parameter known only at run time, naming the value it is bound to.
  const ir::ConstValue* known_value(const std::string& param) const override { return constant(param); }
  [[noreturn]] void param_error(const std::string& message) const override { fail(message); }
};

using KernelFactory = std::function<std::unique_ptr<Kernel>(KernelBuilder&)>;

// For a constexpr_* op whose inputs are all known at load: its outputs as packed constants that
// the kernels reading them decode as they run, instead of the dense tensors the op's kernel
// would fold (docs/design/compressed-weights.md); empty when this op's parameters have no
// packed form. Reads its inputs with KernelBuilder::stored_constant.
using PackedFactory = std::function<std::vector<std::shared_ptr<const ir::ConstValue>>(KernelBuilder&)>;

// The element types a kernel accepts for its main tensor input: the types its dtype switch
// handles (for ops that make a tensor from a shape, such as fill or random_uniform, the
// types it can produce). Kernels that only move elements (reshape, gather, concat, ...)
// accept any dtype. Declared next to each registration so that docs/reports/ops.md can list it.
class DTypeSet {
 public:
  constexpr DTypeSet(std::initializer_list<DType> dtypes) {
    for (DType dtype : dtypes) bits_ |= bit(dtype);
  }
  static constexpr DTypeSet any() {
    DTypeSet set{};
    set.any_ = true;
    return set;
  }
  constexpr bool is_any() const { return any_; }
  constexpr bool contains(DType dtype) const { return any_ || (bits_ & bit(dtype)) != 0; }
  constexpr DTypeSet operator|(DTypeSet other) const {
    DTypeSet set{};
    set.bits_ = bits_ | other.bits_;
    set.any_ = any_ || other.any_;
    return set;
  }
  // The members, floats first, then signed and unsigned integers, then bool (the order of
  // the MIL op tables); empty for any().
  std::vector<DType> list() const;

 private:
  static constexpr uint32_t bit(DType dtype) { return uint32_t{1} << static_cast<unsigned>(dtype); }
  static_assert(static_cast<unsigned>(DType::String) < 32, "DTypeSet keeps one bit per dtype");
  uint32_t bits_ = 0;
  bool any_ = false;
};

// The type sets of the MIL op tables (docs/design/coreml-format.md, "MIL ops") that kernels share.
inline constexpr DTypeSet kFloat{DType::Float16, DType::Float32};                     // F
inline constexpr DTypeSet kFloatInt{DType::Float16, DType::Float32, DType::Int32};    // FI
inline constexpr DTypeSet kBool{DType::Bool};
// Every dtype that util.h's dispatch_all handles.
inline constexpr DTypeSet kPlainDTypes{DType::Float16, DType::Float32, DType::Float64, DType::Int8,
                                       DType::Int16,   DType::Int32,   DType::Int64,   DType::UInt8,
                                       DType::UInt16,  DType::UInt32,  DType::UInt64,  DType::Bool};
inline constexpr DTypeSet kAnyDType = DTypeSet::any();

// Facts about an op that the planner, the executor and every execution backend must respect.
// They live on the registry entry, beside the kernel, so that no layer above tests op names
// (src/runtime/plan.cc, src/runtime/execute.cc, src/runtime/partition.cc read them).
struct OpTraits {
  // Never evaluated at load even when every input is constant (random ops, state ops).
  bool never_fold = false;
  // Takes a state input (read_state, write_state); other ops may not be bound to a state.
  bool binds_state = false;
  // Output 0 is a class label that the engine encodes as an int32 class index scalar
  // (classify: tensors hold no strings; ops/classify.cc). The executor checks that encoding
  // instead of the declared int64-or-string type, and the partitioner keeps the op ours.
  bool class_index_label = false;
  // Its inputs are constants by definition and it runs once, when the model loads (constexpr_*):
  // it costs a prediction nothing, and a compiled region's cache key skips it.
  bool evaluated_at_load = false;
};

// Op type (+ opset range) -> kernel factory. Filled once by register_cpu_kernels().
class KernelRegistry {
 public:
  struct Entry {
    std::string op_type;
    std::string family;  // the src/ops file of its kernel (register.h)
    int min_ios;
    int max_ios;
    DTypeSet dtypes;
    KernelFactory factory;
    OpTraits traits;
    PackedFactory packed;  // constexpr_* ops only
    OpCost cost;           // ops/op_cost.h
  };
  // Registers `factory` for `op_type` in iOS opsets [min_ios, max_ios], accepting `dtypes`.
  // A second registration overlapping the same range is a programming error. The returned
  // entry is where a registration sets the op's traits.
  Entry& add(const std::string& op_type, DTypeSet dtypes, KernelFactory factory, int min_ios = 15, int max_ios = 99);
  const KernelFactory* find(const std::string& op_type, int ios_version) const;
  // The entry serving `op_type` at `ios_version`; nullptr when none does.
  const Entry* find_entry(const std::string& op_type, int ios_version) const;
  // Runs `add` (one family's register_<family>_kernels, register.h) with every entry it adds
  // marked as of `family`.
  void add_family(const std::string& family, void (*add)(KernelRegistry&));
  const std::vector<Entry>& entries() const { return entries_; }

  // The registry of every CPU kernel in this build.
  static const KernelRegistry& cpu();

 private:
  std::vector<Entry> entries_;
  std::string family_;  // add_family's while it runs
};

}  // namespace coremlrt::ops
