// Bindings for compiled models and model structure (coremlrt/compile.h, coremlrt/structure.h):
// plain data out as dicts and lists. These are one-off file operations (no predictions), so
// they keep the GIL: releasing it would need module.cc's exit-safe without_gil (DESIGN.md law 3)
// for no gain.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "coremlrt/compile.h"
#include "coremlrt/memory_model.h"
#include "coremlrt/structure.h"

#include "named_values.h"

namespace nb = nanobind;
using namespace coremlrt;

namespace {

nb::dict type_dict(const StructureValueType& t) {
  nb::dict d;
  d["text"] = t.text;
  d["is_tensor"] = t.is_tensor;
  d["dtype"] = dtype_name(t.dtype);
  d["rank"] = t.rank;
  d["dims"] = t.dims;
  return d;
}

nb::list named_list(const std::vector<StructureNamedValue>& values) {
  return named_value_dicts(values, [](const auto& type) { return type_dict(type); });
}

nb::dict block_dict(const StructureBlock& block) {
  nb::dict d;
  d["inputs"] = named_list(block.inputs);
  d["output_names"] = block.output_names;
  nb::list operations;
  for (const auto& op : block.operations) {
    nb::dict o;
    o["type"] = op.type;
    o["name"] = op.name;
    nb::dict inputs;
    for (const auto& [param, bindings] : op.inputs) {
      nb::list list;
      for (const auto& b : bindings) {
        nb::dict bd;
        bd["name"] = b.is_constant ? nb::none() : nb::cast(b.name);
        bd["constant_type"] = b.is_constant ? nb::object(type_dict(b.constant_type)) : nb::none();
        list.append(bd);
      }
      inputs[param.c_str()] = list;
    }
    o["inputs"] = inputs;
    o["outputs"] = named_list(op.outputs);
    nb::list blocks;
    for (const auto& nested : op.blocks) blocks.append(block_dict(nested));
    o["blocks"] = blocks;
    o["macs"] = op.macs;
    o["elements"] = op.elements;
    o["evaluated_at_load"] = op.evaluated_at_load;
    operations.append(o);
  }
  d["operations"] = operations;
  return d;
}

nb::dict structure_dict(const ModelStructure& s) {
  nb::dict d;
  d["model_type"] = s.model_type;
  d["model_family"] = s.model_family;
  nb::list functions;
  for (const auto& f : s.functions) {
    nb::dict fd;
    fd["name"] = f.name;
    fd["opset"] = f.opset;
    fd["inputs"] = named_list(f.inputs);
    fd["block"] = block_dict(f.block);
    functions.append(fd);
  }
  d["functions"] = functions;
  nb::list layers;
  for (const auto& l : s.layers) {
    nb::dict ld;
    ld["type"] = l.type;
    ld["name"] = l.name;
    ld["output_names"] = l.output_names;
    layers.append(ld);
  }
  d["layers"] = layers;
  nb::list sub_models;
  for (const auto& sub : s.sub_models) sub_models.append(nb::make_tuple(sub.name, structure_dict(sub.structure)));
  d["sub_models"] = sub_models;
  return d;
}

}  // namespace

void bind_structure(nb::module_& m) {
  // A model given as bytes (MLModelAsset.from_memory): `path` names it while the object lives.
  nb::class_<MemoryModelHandle>(m, "MemoryModel")
      .def(
          "__init__",
          [](MemoryModelHandle* self, nb::bytes spec, nb::dict blobs) {
            std::map<std::string, std::string> copies;
            for (auto [key, value] : blobs) {
              if (!nb::isinstance<nb::bytes>(value)) throw nb::type_error("blob mapping values must be bytes");
              nb::bytes data = nb::borrow<nb::bytes>(value);
              copies[nb::cast<std::string>(key)] = std::string(data.c_str(), data.size());
            }
            new (self) MemoryModelHandle(std::string(spec.c_str(), spec.size()), copies);
          },
          nb::arg("spec"), nb::arg("blobs"))
      .def_prop_ro("path", &MemoryModelHandle::path);
  m.def(
      "compile_model",
      [](const std::string& source, const std::string& destination) { compile_model(source, destination); },
      nb::arg("source"), nb::arg("destination"));
  m.def(
      "model_structure",
      [](const std::string& path) { return structure_dict(read_model_structure(path)); },
      nb::arg("path"));
}
