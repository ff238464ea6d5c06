#include "ir/program.h"

#include <cstring>
#include <set>
#include <sstream>

#include "coremlrt/error.h"

namespace coremlrt::ir {

ValueType tensor_type(DType dtype, std::vector<int64_t> dims) {
  ValueType type;
  type.dtype = dtype;
  type.rank = static_cast<int64_t>(dims.size());
  type.dims = std::move(dims);
  return type;
}

std::shared_ptr<ConstValue> make_constant(DType dtype, const void* values, size_t count, std::vector<int64_t> dims) {
  auto out = std::make_shared<ConstValue>();
  out->type = tensor_type(dtype, dims);
  out->tensor = Tensor::empty(dtype, Shape(dims.begin(), dims.end()));
  COREMLRT_CHECK(static_cast<int64_t>(count) == out->tensor.numel(), "constant of ", count, " values for shape ",
                 out->type.str());
  if (count) std::memcpy(out->tensor.data, values, count * dtype_size(dtype));
  return out;
}

bool ValueType::is_static() const {
  if (kind != TypeKind::Tensor) return false;
  if (rank < 0) return false;
  for (int64_t d : dims)
    if (d < 0) return false;
  return true;
}

static const char* mil_type_name(DType dtype) {
  switch (dtype) {
    case DType::Float16: return "fp16";
    case DType::Float32: return "fp32";
    case DType::Float64: return "fp64";
    default: return dtype_name(dtype);
  }
}

std::string ValueType::str() const {
  std::ostringstream out;
  switch (kind) {
    case TypeKind::Tensor:
      out << "tensor<" << mil_type_name(dtype) << ", ";
      if (rank < 0) {
        out << "*";
      } else {
        out << "[";
        for (size_t i = 0; i < dims.size(); ++i) {
          out << (i ? ", " : "");
          if (dims[i] < 0) out << "?"; else out << dims[i];
        }
        out << "]";
      }
      out << ">";
      break;
    case TypeKind::State:
      out << "state<" << (element ? element->str() : "?") << ">";
      break;
    case TypeKind::List:
      out << "list<" << (element ? element->str() : "?") << ">";
      break;
    case TypeKind::Tuple:
      out << "tuple";
      break;
    case TypeKind::Dictionary:
      out << "dict";
      break;
  }
  return out.str();
}

std::string Operation::describe() const {
  std::ostringstream out;
  out << "op '" << (name.empty() ? "<unnamed>" : name) << "' (" << type << ")";
  if (!outputs.empty()) out << " producing '" << outputs[0].name << "'";
  return out.str();
}

int ios_version_of_opset(const std::string& opset) {
  static const std::pair<const char*, int> kOpsets[] = {
      {"CoreML5", 15}, {"CoreML6", 16}, {"CoreML7", 17}, {"CoreML8", 18}, {"CoreML9", 19}};
  for (auto& [name, version] : kOpsets)
    if (opset == name) return version;
  return 0;
}

namespace {

void validate_block(const Function& function, const Block& block, std::vector<std::set<std::string>>& scopes) {
  scopes.emplace_back();
  for (const NamedValue& input : block.inputs) scopes.back().insert(input.name);
  auto visible = [&](const std::string& name) {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it)
      if (it->count(name)) return true;
    return false;
  };
  for (const Operation& op : block.operations) {
    for (const auto& [param, bindings] : op.inputs)
      for (const Binding& binding : bindings)
        COREMLRT_CHECK(binding.value || visible(binding.name), "function '", function.name, "': ",
                       op.describe(), " reads '", binding.name, "' (parameter '", param,
                       "') before it is defined");
    for (const Block& nested : op.blocks) validate_block(function, nested, scopes);
    for (const NamedValue& out : op.outputs) {
      COREMLRT_CHECK(!out.name.empty(), "function '", function.name, "': ", op.describe(),
                     " has an unnamed output");
      COREMLRT_CHECK(scopes.back().insert(out.name).second, "function '", function.name,
                     "': value '", out.name, "' is defined twice");
    }
  }
  for (const std::string& out : block.outputs)
    COREMLRT_CHECK(visible(out), "function '", function.name, "': block output '", out,
                   "' is not defined");
  scopes.pop_back();
}

}  // namespace

void validate_function(const Function& function) {
  COREMLRT_CHECK(function.ios_version != 0, "function '", function.name, "' has opset '",
                 function.opset, "'; expected one of CoreML5 .. CoreML9");
  std::vector<std::set<std::string>> scopes(1);
  for (const NamedValue& input : function.inputs)
    COREMLRT_CHECK(scopes[0].insert(input.name).second, "function '", function.name,
                   "' declares input '", input.name, "' twice");
  validate_block(function, function.block, scopes);
}

}  // namespace coremlrt::ir
