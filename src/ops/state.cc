// State ops of the iOS18 opset (docs/design/coreml-format.md, "State ops"). A state input is bound to the
// state's current value; tensors are immutable, so read_state hands that value on without
// a copy, and write_state gives the state a new value rather than writing into the old one.
#include "ops/register.h"

namespace coremlrt::ops {

void register_state_kernels(KernelRegistry& registry) {
  registry.add("read_state", kAnyDType, [](KernelBuilder& b) {
    b.check(b.input_type("input").kind == ir::TypeKind::State, "input must be a state");
    const int state = b.input("input");
    return make_kernel([state](KernelContext& ctx) { ctx.set_output(0, ctx.input(state)); });
  }, 18).traits = {.never_fold = true, .binds_state = true};

  registry.add("write_state", kAnyDType, [](KernelBuilder& b) {
    const ir::ValueType& type = b.input_type("input");
    b.check(type.kind == ir::TypeKind::State && type.element, "input must be a state");
    const ir::ValueType wrapped = *type.element;
    b.check(b.input_type("data").dtype == wrapped.dtype, "data is ", dtype_name(b.input_type("data").dtype),
            " but the state holds ", dtype_name(wrapped.dtype));
    const int state = b.input("input");
    const int data = b.input("data");
    return make_kernel([state, data](KernelContext& ctx) {
      const Tensor& current = ctx.input(state);
      const Tensor& value = ctx.input(data);
      if (value.shape != current.shape || value.dtype != current.dtype)
        ctx.fail("writes ", dtype_name(value.dtype), " ", shape_str(value.shape), " into a state of ",
                 dtype_name(current.dtype), " ", shape_str(current.shape));
      // A whole new value: every byte of the state passed through another buffer.
      if (value.storage != current.storage) ctx.count_state_bytes(value.nbytes(), value.nbytes());
      ctx.replace_state(state, value);
    });
  }, 18).traits = {.never_fold = true, .binds_state = true};
}

}  // namespace coremlrt::ops
