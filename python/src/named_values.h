// The list of {"name", "type"} dicts that the structure and program bindings both return for
// inputs and outputs (structure_bindings.cc, program_bindings.cc): their value types differ
// (coremlrt/structure.h, coremlrt/program.h), the dicts do not.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

template <class NamedValues, class TypeDict>
nanobind::list named_value_dicts(const NamedValues& values, TypeDict type_dict) {
  nanobind::list out;
  for (const auto& v : values) {
    nanobind::dict d;
    d["name"] = v.name;
    d["type"] = type_dict(v.type);
    out.append(d);
  }
  return out;
}
