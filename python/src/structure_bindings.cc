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

#include "py_dicts.h"

namespace nb = nanobind;
using namespace coremlrt;

using coremlrt::python::DictField;
using coremlrt::python::to_dict;
using coremlrt::python::to_python;

COREMLRT_DICT_FIELDS(StructureValueType, DictField{"text", &StructureValueType::text},
                     DictField{"is_tensor", &StructureValueType::is_tensor},
                     DictField{"dtype", &StructureValueType::dtype}, DictField{"rank", &StructureValueType::rank},
                     DictField{"dims", &StructureValueType::dims});
COREMLRT_DICT_FIELDS(StructureNamedValue, DictField{"name", &StructureNamedValue::name},
                     DictField{"type", &StructureNamedValue::type});
// A binding names a value, or is a constant of a type (None for the other).
COREMLRT_DICT_FIELDS(StructureBinding,
                     DictField{"name", [](const StructureBinding& b) { return b.is_constant ? nb::none() : nb::cast(b.name); }},
                     DictField{"constant_type", [](const StructureBinding& b) {
                                 return b.is_constant ? nb::object(to_dict(b.constant_type)) : nb::none();
                               }});
COREMLRT_DICT_FIELDS(StructureOperation, DictField{"type", &StructureOperation::type},
                     DictField{"name", &StructureOperation::name}, DictField{"inputs", &StructureOperation::inputs},
                     DictField{"outputs", &StructureOperation::outputs},
                     DictField{"blocks", &StructureOperation::blocks}, DictField{"macs", &StructureOperation::macs},
                     DictField{"elements", &StructureOperation::elements},
                     DictField{"evaluated_at_load", &StructureOperation::evaluated_at_load});
COREMLRT_DICT_FIELDS(StructureBlock, DictField{"inputs", &StructureBlock::inputs},
                     DictField{"output_names", &StructureBlock::output_names},
                     DictField{"operations", &StructureBlock::operations});
COREMLRT_DICT_FIELDS(StructureFunction, DictField{"name", &StructureFunction::name},
                     DictField{"opset", &StructureFunction::opset}, DictField{"inputs", &StructureFunction::inputs},
                     DictField{"block", &StructureFunction::block});
COREMLRT_DICT_FIELDS(StructureLayer, DictField{"type", &StructureLayer::type}, DictField{"name", &StructureLayer::name},
                     DictField{"output_names", &StructureLayer::output_names});
// A pipeline's sub-models as (name, structure) pairs.
COREMLRT_DICT_FIELDS(ModelStructure, DictField{"model_type", &ModelStructure::model_type},
                     DictField{"model_family", &ModelStructure::model_family},
                     DictField{"functions", &ModelStructure::functions},
                     DictField{"layers", &ModelStructure::layers},
                     DictField{"sub_models", [](const ModelStructure& s) {
                                 nb::list out;
                                 for (const auto& sub : s.sub_models)
                                   out.append(nb::make_tuple(sub.name, to_python(sub.structure)));
                                 return out;
                               }});

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
      [](const std::string& path) { return to_dict(read_model_structure(path)); },
      nb::arg("path"));
}
