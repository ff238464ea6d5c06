// Binding for the ONNX exporter (python/coremlrt/onnx_export/): a model's typed program as plain
// data (coremlrt/program.h: the IR that format/ reads every model type into, ML programs,
// neuralNetwork layers, classic models and pipelines spliced into one function, before any
// planning). The exporter is a second consumer of the IR beside the OpenVINO lowering; it reads,
// never changes, it.
//
// Constants come out as numpy arrays that own a copy: an export is a one-off file operation, and
// a copy keeps no view into the model's memory-mapped weight files once the dict is returned.
// A constant the weight file stores bit-packed (a sub-byte integer blob) comes out as one int8 or
// uint8 per element with its dtype named ("int4", "uint4"...), so the exporter can write it back
// as ONNX's own 4-bit types where they exist. The GIL is kept, as structure_bindings.cc says.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "coremlrt/error.h"
#include "coremlrt/program.h"

#include "py_dicts.h"

namespace nb = nanobind;
using namespace coremlrt;

nb::dict description_dict(const ModelDescription& desc);  // module.cc

namespace {

const char* kind_name(ProgramTypeKind kind) {
  switch (kind) {
    case ProgramTypeKind::Tensor: return "tensor";
    case ProgramTypeKind::List: return "list";
    case ProgramTypeKind::Tuple: return "tuple";
    case ProgramTypeKind::Dictionary: return "dictionary";
    case ProgramTypeKind::State: return "state";
  }
  return "?";
}

}  // namespace

using coremlrt::python::DictField;
using coremlrt::python::to_dict;

COREMLRT_DICT_FIELDS(ProgramValueType,
                     DictField{"kind", [](const ProgramValueType& t) { return std::string(kind_name(t.kind)); }},
                     DictField{"dtype", &ProgramValueType::dtype}, DictField{"rank", &ProgramValueType::rank},
                     DictField{"dims", &ProgramValueType::dims}, DictField{"text", &ProgramValueType::text},
                     DictField{"element", &ProgramValueType::element},
                     DictField{"members", &ProgramValueType::members});
COREMLRT_DICT_FIELDS(ProgramNamedValue, DictField{"name", &ProgramNamedValue::name},
                     DictField{"type", &ProgramNamedValue::type});

// Constants, packed weights and values known at load are built by hand: each carries the place it
// came from into the error its array copy may raise.
namespace {

// The numpy dtype a tensor of `dtype` is copied into: sub-byte integers take a byte each.
nb::dlpack::dtype storage_dtype(DType dtype, const std::string& where) {
  using Code = nb::dlpack::dtype_code;
  switch (dtype) {
    case DType::Float32: return nb::dtype<float>();
    case DType::Float16: return {static_cast<uint8_t>(Code::Float), 16, 1};
    case DType::Float64: return nb::dtype<double>();
    case DType::Int32: return nb::dtype<int32_t>();
    case DType::Int64: return nb::dtype<int64_t>();
    case DType::Int16: return nb::dtype<int16_t>();
    case DType::UInt16: return nb::dtype<uint16_t>();
    case DType::UInt32: return nb::dtype<uint32_t>();
    case DType::UInt64: return nb::dtype<uint64_t>();
    case DType::Int8:
    case DType::Int4: return nb::dtype<int8_t>();
    case DType::UInt8:
    case DType::UInt1:
    case DType::UInt2:
    case DType::UInt3:
    case DType::UInt4:
    case DType::UInt6: return nb::dtype<uint8_t>();
    case DType::Bool: return nb::dtype<bool>();
    default: fail_as(ErrorKind::Unsupported, where, ": a constant of dtype ", dtype_name(dtype), " cannot be exported");
  }
}

nb::object copy_to_numpy(const Tensor& tensor, const std::string& where) {
  const nb::dlpack::dtype dtype = storage_dtype(tensor.dtype, where);
  const size_t bytes = static_cast<size_t>(tensor.numel()) * (dtype.bits / 8);
  auto* storage = new uint8_t[bytes > 0 ? bytes : 1];
  if (bytes > 0) std::memcpy(storage, tensor.data, bytes);
  nb::capsule owner(storage, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
  std::vector<size_t> shape(tensor.shape.begin(), tensor.shape.end());
  return nb::cast(nb::ndarray<nb::numpy, nb::c_contig, nb::device::cpu>(storage, shape.size(), shape.data(), owner,
                                                                         nullptr, dtype));
}

nb::dict const_dict(const ProgramConstant& value, const std::string& where) {
  nb::dict d;
  d["type"] = to_dict(value.type);
  if (value.type.kind == ProgramTypeKind::Tensor) {
    if (value.type.dtype == DType::String) d["strings"] = value.strings;
    // A tensor without storage (an item of a folded list that no op wrote, which the list ops
    // read as zeros) has no array to give.
    else d["array"] = value.tensor.defined() ? copy_to_numpy(value.tensor, where) : nb::none();
  }
  nb::list items;
  for (const auto& item : value.items) items.append(const_dict(item, where));
  d["items"] = items;
  return d;
}

nb::dict block_dict(const ProgramBlock& block);

nb::dict operation_dict(const ProgramOperation& op) {
  const std::string& where = op.description;
  nb::dict o;
  o["type"] = op.type;
  o["name"] = op.name;
  nb::dict inputs;
  for (const auto& [param, bindings] : op.inputs) {
    nb::list list;
    for (const auto& b : bindings) {
      nb::dict bd;
      bd["name"] = b.value ? nb::none() : nb::cast(b.name);
      bd["value"] = b.value ? nb::object(const_dict(*b.value, where + ", input '" + param + "'")) : nb::none();
      list.append(bd);
    }
    inputs[param.c_str()] = list;
  }
  o["inputs"] = inputs;
  nb::dict attributes;
  for (const auto& [name, value] : op.attributes)
    attributes[name.c_str()] = const_dict(value, where + ", attribute '" + name + "'");
  o["attributes"] = attributes;
  o["outputs"] = coremlrt::python::to_python(op.outputs);
  nb::list blocks;
  for (const auto& nested : op.blocks) blocks.append(block_dict(nested));
  o["blocks"] = blocks;
  return o;
}

nb::dict block_dict(const ProgramBlock& block) {
  nb::dict d;
  d["inputs"] = coremlrt::python::to_python(block.inputs);
  d["outputs"] = block.outputs;
  nb::list operations;
  for (const auto& op : block.operations) operations.append(operation_dict(op));
  d["operations"] = operations;
  return d;
}

// A weight the planner keeps packed (docs/design/compressed-weights.md): its parts, so the exporter
// can write a DequantizeLinear of the same codes and scales, and `decode()` for its dense values.
nb::dict packed_dict(const std::shared_ptr<const PackedWeight>& t, const std::string& where) {
  nb::dict d;
  d["dtype"] = dtype_name(t->dtype);
  d["shape"] = t->shape;
  d["map"] = t->map;
  d["form"] = t->form;
  d["groups"] = t->groups;
  d["codes_dtype"] = dtype_name(t->codes_dtype);
  d["sparse"] = t->sparse;
  d["nonzero_only"] = t->nonzero_only;
  d["codes"] = t->codes.defined() ? copy_to_numpy(t->codes, where) : nb::none();
  d["scale"] = t->scale.defined() ? copy_to_numpy(t->scale, where) : nb::none();
  d["offset"] = t->offset.defined() ? copy_to_numpy(t->offset, where) : nb::none();
  d["offset_dtype"] = t->offset.defined() ? nb::cast(std::string(dtype_name(t->offset_dtype))) : nb::none();
  d["decode"] = nb::cpp_function([t, where] { return copy_to_numpy(t->decode(), where); });
  return d;
}

// The values the planner knows at load beyond the const ops' own, by value name.
nb::dict known_dict(const ProgramFunction& function) {
  nb::dict out;
  for (const KnownValue& value : function.known) {
    const std::string where = "function '" + function.name + "', value '" + value.name + "'";
    nb::dict d;
    if (value.packed) d["packed"] = packed_dict(value.packed, where);
    else d["array"] = copy_to_numpy(value.dense, where);
    out[value.name.c_str()] = d;
  }
  return out;
}

nb::dict read_program(const std::string& path, bool known) {
  const ModelProgram program = read_model_program(path, known);
  nb::dict d;
  d["description"] = description_dict(program.description);
  d["problem"] = program.problem;
  d["network_problem"] = program.network_problem;
  nb::dict functions;
  for (const auto& [name, function] : program.functions) {
    nb::dict fd;
    fd["name"] = function.name;
    fd["opset"] = function.opset;
    fd["ios_version"] = function.ios_version;
    fd["inputs"] = coremlrt::python::to_python(function.inputs);
    fd["block"] = block_dict(function.block);
    fd["known"] = known ? nb::object(known_dict(function)) : nb::none();
    functions[name.c_str()] = fd;
  }
  d["functions"] = functions;
  return d;
}

}  // namespace

void bind_program(nb::module_& m) {
  m.def("read_program", &read_program, nb::arg("path"), nb::arg("known") = true,
        "The model's typed program as plain data (functions, blocks, ops, constants as numpy arrays);\n"
        "with known=True, each function's values known at load (folded or kept packed) by name.");
}
