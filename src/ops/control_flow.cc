// Control flow and lists (docs/design/coreml-format.md, "Control flow blocks" and "Control flow, lists,
// identity and select"): cond, while_loop, make_list, list_length, list_read, list_write,
// list_gather, list_scatter.
//
// Branches and loop blocks are compiled at load into nested block plans and run through
// KernelContext::run_block. A list value travels through slots like a tensor: its storage
// is a ListStorage holding the element tensors. Lists are immutable like tensors, so
// list_write returns a new list that shares the untouched elements with the old one.
#include <cstring>

#include "coremlrt/limits.h"
#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

class ListStorage final : public Storage {
 public:
  ListStorage(std::vector<Tensor> items, DType dtype, Shape elem_shape, bool dynamic)
      : items(std::move(items)), dtype(dtype), elem_shape(std::move(elem_shape)), dynamic(dynamic) {}
  std::vector<Tensor> items;  // undefined entries were never written
  DType dtype;
  Shape elem_shape;           // dims of -1: taken from the first element written
  bool dynamic;               // may grow past its length on write
};

Tensor make_list_value(std::vector<Tensor> items, const ListStorage& like, Shape elem_shape) {
  Tensor t;
  t.dtype = like.dtype;
  t.storage = std::make_shared<ListStorage>(std::move(items), like.dtype, std::move(elem_shape), like.dynamic);
  return t;  // rank 0 and no data: only list ops look inside
}

const ListStorage& list_of(const KernelContext& ctx, const Tensor& t) {
  auto* list = dynamic_cast<const ListStorage*>(t.storage.get());
  if (!list) ctx.fail("expects a list value");
  return *list;
}

int64_t scalar_index(const KernelContext& ctx, const Tensor& t) {
  if (t.numel() != 1 || t.dtype != DType::Int32) ctx.fail("index must be an int32 scalar");
  return t.ptr<int32_t>()[0];
}

bool scalar_bool(const KernelContext& ctx, const Tensor& t) {
  if (t.numel() != 1) ctx.fail("condition must be a scalar, got shape ", shape_str(t.shape));
  bool value = false;
  dispatch_all(t.dtype, "condition", [&](auto tag) {
    using T = typename decltype(tag)::type;
    value = static_cast<compute_t<T>>(t.ptr<T>()[0]) != 0;
  });
  return value;
}

// An element that was never written reads as zeros of the element shape, when known.
Tensor element_or_zeros(const KernelContext& ctx, const ListStorage& list, int64_t index) {
  if (index < static_cast<int64_t>(list.items.size()) && list.items[index].defined()) return list.items[index];
  for (int64_t d : list.elem_shape)
    if (d < 0) ctx.fail("list element ", index, " was never written and its shape is not known");
  Tensor zeros = Tensor::empty(list.dtype, list.elem_shape);
  if (zeros.nbytes()) std::memset(zeros.data, 0, zeros.nbytes());
  return zeros;
}

std::vector<Tensor> written(const KernelContext& ctx, const ListStorage& list, int64_t index, const Tensor& value) {
  if (index < 0) ctx.fail("list index ", index, " is negative");
  if (value.dtype != list.dtype) ctx.fail("writes ", dtype_name(value.dtype), " into a list of ", dtype_name(list.dtype));
  if (value.rank() != static_cast<int64_t>(list.elem_shape.size())) ctx.fail("element rank does not match the list");
  for (size_t d = 0; d < list.elem_shape.size(); ++d)
    if (list.elem_shape[d] >= 0 && list.elem_shape[d] != value.shape[d])
      ctx.fail("writes an element of shape ", shape_str(value.shape), " into a list of ", shape_str(list.elem_shape));
  std::vector<Tensor> items = list.items;
  if (index >= static_cast<int64_t>(items.size())) {
    if (!list.dynamic) ctx.fail("index ", index, " is past the end of a fixed-length list of ", items.size());
    items.resize(static_cast<size_t>(index) + 1);
  }
  items[index] = value;
  return items;
}

void register_lists(KernelRegistry& registry) {
  // Elements of any dtype are stored and copied as they are.
  registry.add("make_list", kAnyDType, [](KernelBuilder& b) {
    const ir::ValueType& type = b.output_type(0);
    b.check(type.kind == ir::TypeKind::List && type.element, "output must be a list");
    const DType dtype = type.element->dtype;
    const Shape elem_shape(type.element->dims.begin(), type.element->dims.end());
    const int length = b.optional_input("init_length");
    const bool dynamic = b.const_bool("dynamic_length", true);
    return make_kernel([=](KernelContext& ctx) {
      int64_t n = length >= 0 ? scalar_index(ctx, ctx.input(length)) : 1;
      if (n < 0) ctx.fail("init_length ", n, " is negative");
      ctx.set_output(0, make_list_value(std::vector<Tensor>(static_cast<size_t>(n)),
                                        ListStorage({}, dtype, elem_shape, dynamic), elem_shape));
    });
  });

  registry.add("list_length", kAnyDType, [](KernelBuilder& b) {
    const int ls = b.input("ls");
    return make_kernel([ls](KernelContext& ctx) {
      Tensor& out = ctx.allocate_output(0, DType::Int32, {});
      out.ptr<int32_t>()[0] = static_cast<int32_t>(list_of(ctx, ctx.input(ls)).items.size());
    });
  });

  registry.add("list_read", kAnyDType, [](KernelBuilder& b) {
    const int ls = b.input("ls"), index = b.input("index");
    return make_kernel([=](KernelContext& ctx) {
      const ListStorage& list = list_of(ctx, ctx.input(ls));
      const int64_t i = scalar_index(ctx, ctx.input(index));
      if (i < 0 || i >= static_cast<int64_t>(list.items.size()))
        ctx.fail("index ", i, " is out of range for a list of ", list.items.size());
      ctx.set_output(0, element_or_zeros(ctx, list, i));
    });
  });

  registry.add("list_write", kAnyDType, [](KernelBuilder& b) {
    const int ls = b.input("ls"), index = b.input("index"), value = b.input("value");
    return make_kernel([=](KernelContext& ctx) {
      const ListStorage& list = list_of(ctx, ctx.input(ls));
      std::vector<Tensor> items = written(ctx, list, scalar_index(ctx, ctx.input(index)), ctx.input(value));
      Shape elem_shape = list.elem_shape;
      for (size_t d = 0; d < elem_shape.size(); ++d) elem_shape[d] = ctx.input(value).shape[d];
      ctx.set_output(0, make_list_value(std::move(items), list, std::move(elem_shape)));
    });
  });

  registry.add("list_gather", kAnyDType, [](KernelBuilder& b) {
    const int ls = b.input("ls"), indices = b.input("indices");
    return make_kernel([=](KernelContext& ctx) {
      const ListStorage& list = list_of(ctx, ctx.input(ls));
      const Tensor& idx = ctx.input(indices);
      if (idx.dtype != DType::Int32) ctx.fail("indices must be int32");
      std::vector<Tensor> parts;
      for (int64_t k = 0; k < idx.numel(); ++k) {
        const int64_t i = idx.ptr<int32_t>()[k];
        if (i < 0 || i >= static_cast<int64_t>(list.items.size()))
          ctx.fail("index ", i, " is out of range for a list of ", list.items.size());
        parts.push_back(element_or_zeros(ctx, list, i));
      }
      Shape elem = parts.empty() ? list.elem_shape : parts[0].shape;
      for (int64_t d : elem)
        if (d < 0) ctx.fail("gathers no element from a list whose element shape is not known");
      Shape shape{idx.numel()};
      shape.insert(shape.end(), elem.begin(), elem.end());
      Tensor& out = ctx.allocate_output(0, list.dtype, shape);
      const size_t bytes = static_cast<size_t>(shape_numel(elem)) * dtype_size(list.dtype);
      for (size_t k = 0; k < parts.size(); ++k) {
        if (parts[k].shape != elem) ctx.fail("list elements have different shapes");
        if (bytes) std::memcpy(static_cast<char*>(out.data) + k * bytes, parts[k].data, bytes);
      }
    });
  });

  registry.add("list_scatter", kAnyDType, [](KernelBuilder& b) {
    const int ls = b.input("ls"), indices = b.input("indices"), value = b.input("value");
    return make_kernel([=](KernelContext& ctx) {
      const ListStorage& list = list_of(ctx, ctx.input(ls));
      const Tensor& idx = ctx.input(indices);
      const Tensor& values = ctx.input(value);
      if (idx.dtype != DType::Int32) ctx.fail("indices must be int32");
      if (values.rank() < 1 || values.shape[0] != idx.numel())
        ctx.fail("value must have one leading row per index: ", shape_str(values.shape), " for ", idx.numel(), " indices");
      Shape elem(values.shape.begin() + 1, values.shape.end());
      const size_t bytes = static_cast<size_t>(shape_numel(elem)) * dtype_size(values.dtype);
      ListStorage current(list.items, list.dtype, list.elem_shape, list.dynamic);
      for (int64_t k = 0; k < idx.numel(); ++k) {
        Tensor row = Tensor::empty(values.dtype, elem);
        if (bytes) std::memcpy(row.data, static_cast<const char*>(values.data) + k * bytes, bytes);
        current.items = written(ctx, current, idx.ptr<int32_t>()[k], row);
      }
      ctx.set_output(0, make_list_value(std::move(current.items), list, elem));
    });
  });
}

}  // namespace

void register_control_flow_kernels(KernelRegistry& registry) {
  registry.add("cond", kAnyDType, [](KernelBuilder& b) {
    b.check(b.op().blocks.size() == 2, "needs a true and a false block, has ", b.op().blocks.size());
    const int pred = b.input("pred");
    const int when_true = b.build_block(0), when_false = b.build_block(1);
    return make_kernel([=](KernelContext& ctx) {
      std::vector<Tensor> outs = ctx.run_block(scalar_bool(ctx, ctx.input(pred)) ? when_true : when_false, {});
      for (size_t i = 0; i < outs.size(); ++i) ctx.set_output(static_cast<int>(i), std::move(outs[i]));
    });
  });

  registry.add("while_loop", kAnyDType, [](KernelBuilder& b) {
    b.check(b.op().blocks.size() == 2, "needs a condition and a body block, has ", b.op().blocks.size());
    const std::vector<int> vars = b.variadic_input("loop_vars");
    b.check(b.op().blocks[0].inputs.size() == vars.size() && b.op().blocks[1].inputs.size() == vars.size(),
            "condition and body must take one input per loop variable");
    const int condition = b.build_block(0), body = b.build_block(1);
    return make_kernel([=](KernelContext& ctx) {
      std::vector<Tensor> values;
      for (int v : vars) values.push_back(ctx.input(v));
      const ResourceLimits* limits = active_limits();
      const int64_t cap = limits ? limits->max_loop_iterations : kDefaultMaxLoopIterations;
      for (int64_t iteration = 0;; ++iteration) {
        std::vector<Tensor> keep_going = ctx.run_block(condition, values);
        if (keep_going.size() != 1) ctx.fail("condition block must return one value");
        if (!scalar_bool(ctx, keep_going[0])) break;
        // A condition that never turns false must not hang a prediction (coremlrt/limits.h).
        if (iteration == cap)
          ctx.fail_as(ErrorKind::ResourceLimit, "ran ", cap, " iterations without its condition turning false (the loop iteration cap, ",
                   "max_loop_iterations)");
        values = ctx.run_block(body, values);
        if (values.size() != vars.size()) ctx.fail("body block returned ", values.size(), " values for ", vars.size(), " loop variables");
      }
      for (size_t i = 0; i < values.size(); ++i) ctx.set_output(static_cast<int>(i), std::move(values[i]));
    });
  });

  register_lists(registry);
}

}  // namespace coremlrt::ops
