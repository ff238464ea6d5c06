#include "coremlrt/program.h"

#include <set>

#include "format/package.h"
#include "format/spec_reader.h"
#include "ops/kernel.h"
#include "ops/packed_weight.h"
#include "runtime/plan.h"

namespace coremlrt {

namespace {

ProgramTypeKind program_kind(ir::TypeKind kind) {
  switch (kind) {
    case ir::TypeKind::Tensor: return ProgramTypeKind::Tensor;
    case ir::TypeKind::List: return ProgramTypeKind::List;
    case ir::TypeKind::Tuple: return ProgramTypeKind::Tuple;
    case ir::TypeKind::Dictionary: return ProgramTypeKind::Dictionary;
    case ir::TypeKind::State: return ProgramTypeKind::State;
  }
  fail("unknown value type kind ", static_cast<int>(kind));
}

ProgramValueType program_type(const ir::ValueType& t) {
  ProgramValueType out;
  out.kind = program_kind(t.kind);
  out.dtype = t.dtype;
  out.rank = t.rank;
  out.dims = t.dims;
  out.text = t.str();
  if (t.element) out.element = std::make_shared<const ProgramValueType>(program_type(*t.element));
  for (const ir::ValueType& m : t.members) out.members.push_back(program_type(m));
  return out;
}

// A packed constant is decoded: a program view holds plain tensors.
ProgramConstant program_constant(const ir::ConstValue& value) {
  ProgramConstant out;
  out.type = program_type(value.type);
  if (value.type.kind == ir::TypeKind::Tensor) {
    if (value.type.dtype == DType::String) {
      out.strings = value.strings;
    } else if (value.packed) {
      ops::check_packed(*value.packed);
      out.tensor = ops::decode_dense(*value.packed);
    } else {
      out.tensor = value.tensor;
    }
  }
  for (const ir::ConstValue& item : value.items) out.items.push_back(program_constant(item));
  return out;
}

std::vector<ProgramNamedValue> program_values(const std::vector<ir::NamedValue>& values) {
  std::vector<ProgramNamedValue> out;
  for (const ir::NamedValue& v : values) out.push_back({v.name, program_type(v.type)});
  return out;
}

ProgramBlock program_block(const ir::Block& block);

ProgramOperation program_operation(const ir::Operation& op) {
  ProgramOperation out;
  out.type = op.type;
  out.name = op.name;
  out.description = op.describe();
  for (const auto& [param, bindings] : op.inputs) {
    std::vector<ProgramBinding>& list = out.inputs[param];
    for (const ir::Binding& b : bindings)
      list.push_back({b.value ? std::string() : b.name,
                      b.value ? std::make_shared<const ProgramConstant>(program_constant(*b.value)) : nullptr});
  }
  for (const auto& [name, value] : op.attributes) out.attributes.emplace(name, program_constant(*value));
  out.outputs = program_values(op.outputs);
  for (const ir::Block& nested : op.blocks) out.blocks.push_back(program_block(nested));
  return out;
}

ProgramBlock program_block(const ir::Block& block) {
  ProgramBlock out;
  out.inputs = program_values(block.inputs);
  out.outputs = block.outputs;
  for (const ir::Operation& op : block.operations) out.operations.push_back(program_operation(op));
  return out;
}

const char* code_map_name(ir::CodeMap map) {
  switch (map) {
    case ir::CodeMap::kIdentity: return "identity";
    case ir::CodeMap::kLut: return "lut";
    case ir::CodeMap::kShiftScale: return "shift_scale";
    case ir::CodeMap::kAffine: return "affine";
  }
  return "?";
}

// The elements of a packed array, one byte each (int4 sign-extended), in `shape`: codes and
// offsets may be bit-packed (src/ir/packed.h, PackedArray).
Tensor unpacked_bytes(const ir::PackedArray& array, const Shape& shape) {
  ir::PackedTensor codes;
  codes.dtype = array.dtype;
  codes.shape = shape;
  codes.codes = array;
  codes.groups = Shape(shape.size(), 1);
  return ops::decode_dense(codes);
}

std::shared_ptr<const PackedWeight> packed_weight_view(std::shared_ptr<const ir::PackedTensor> t) {
  auto out = std::make_shared<PackedWeight>();
  out->dtype = t->dtype;
  out->shape = t->shape;
  out->map = code_map_name(t->map);
  out->form = t->form();
  out->groups = t->groups;
  out->codes_dtype = t->codes.dtype;
  out->sparse = t->mask.defined();
  out->nonzero_only = t->nonzero_only;
  const bool affine = t->map == ir::CodeMap::kAffine || t->map == ir::CodeMap::kShiftScale;
  if (affine && !t->mask.defined()) out->codes = unpacked_bytes(t->codes, t->shape);
  out->scale = t->scale;
  if (t->offset.defined()) {
    out->offset = unpacked_bytes(t->offset, {t->offset.count});
    out->offset_dtype = t->offset.dtype;
  }
  out->decode = [t] { return ops::decode_dense(*t); };
  return out;
}

// Names of the values `const` ops define, in `block` and the blocks nested in it.
void collect_program_consts(const ir::Block& block, std::set<std::string>& out) {
  for (const ir::Operation& op : block.operations) {
    if (op.type == "const")
      for (const ir::NamedValue& v : op.outputs) out.insert(v.name);
    for (const ir::Block& nested : op.blocks) collect_program_consts(nested, out);
  }
}

// The values the planner knows at load (runtime/plan.h) beyond the const ops' own, which the
// program already carries: results of ops computed from constants alone (folded), and
// compressed weights kept packed. Tensors only: a folded list (make_list and list_write of
// constants) is not one array, and string values are left out, as a Tensor holds no strings.
std::vector<KnownValue> values_known_at_load(const ir::Function& function) {
  std::set<std::string> consts;
  collect_program_consts(function.block, consts);
  runtime::PlanOptions options;
  options.packed_weights = true;
  const std::unique_ptr<runtime::Plan> plan = runtime::build_plan(function, ops::KernelRegistry::cpu(), {}, options);
  std::vector<KnownValue> out;
  for (size_t slot = 0; slot < plan->slot_count(); ++slot) {
    const std::string& name = plan->slot_names[slot];
    if (consts.count(name) && !plan->packed[slot]) continue;
    if (plan->packed[slot])
      out.push_back({name, Tensor(), packed_weight_view(plan->packed[slot])});
    else if (plan->constants[slot].defined() && plan->slot_types[slot].kind == ir::TypeKind::Tensor &&
             plan->slot_types[slot].dtype != DType::String)
      out.push_back({name, plan->constants[slot], nullptr});
  }
  return out;
}

}  // namespace

ModelProgram read_model_program(const std::string& path, bool known) try {
  const format::LoadedModel loaded = format::read_model(format::locate_model(path));
  ModelProgram out;
  out.description = loaded.description;
  out.problem = loaded.problem;
  out.network_problem = loaded.network.problem;
  for (const auto& [name, function] : loaded.program.functions) {
    ProgramFunction f;
    f.name = function.name;
    f.opset = function.opset;
    f.ios_version = function.ios_version;
    f.inputs = program_values(function.inputs);
    f.block = program_block(function.block);
    if (known) f.known = values_known_at_load(function);
    out.functions.emplace(name, std::move(f));
  }
  return out;
} catch (...) {
  rethrow_as(ErrorKind::BadModel);  // what it reads is a model: coremlrt/error.h
}

}  // namespace coremlrt
