// coremlrt._core.LoadOptions: include/coremlrt/model.h's LoadOptions, one read/write property per
// option. The properties, their docstrings, the keyword constructor and pickling all come from
// for_each_load_option there, so an option added to LoadOptions needs nothing here; only a member
// of a type no option has yet needs a case in python_value / assign below.
//
// Python values: str, bool, int (not bool) and, for durations, float seconds. A value of the
// wrong type raises TypeError; each assignment then runs LoadOptions::validate, the one check of
// the values (src/runtime/model_load.cc), and raises ValueError with its message, leaving the
// options as they were. Pickles as {name: value}: MLModel.__reduce__ (python/coremlrt/model.py)
// sends the options to Dask and Ray workers so.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <chrono>
#include <cmath>
#include <concepts>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "coremlrt/model.h"

namespace nb = nanobind;
using namespace coremlrt;

namespace {

[[noreturn]] void wrong_type(const char* name, const char* expected, nb::handle value) {
  throw nb::type_error(("load option \"" + std::string(name) + "\" takes " + expected + ", not " +
                        nb::cast<std::string>(nb::type_name(value.type())))
                           .c_str());
}

nb::object python_value(const std::string& value) { return nb::str(value.c_str(), value.size()); }
nb::object python_value(bool value) { return nb::bool_(value); }
template <std::integral T>
nb::object python_value(T value) {
  return nb::int_(value);
}
nb::object python_value(std::chrono::milliseconds value) { return nb::float_(value.count() / 1000.0); }

void assign(std::string& out, nb::handle value, const char* name) {
  if (!nb::isinstance<nb::str>(value)) wrong_type(name, "a str", value);
  out = nb::cast<std::string>(value);
}

void assign(bool& out, nb::handle value, const char* name) {
  if (!PyBool_Check(value.ptr())) wrong_type(name, "a bool", value);
  out = value.ptr() == Py_True;
}

// Any integer (numpy's too), not a bool; a value the member's type cannot hold is out of range.
template <std::integral T>
void assign(T& out, nb::handle value, const char* name) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr())) wrong_type(name, "an int", value);
  nb::object number = nb::steal(PyNumber_Index(value.ptr()));
  if (!number) throw nb::python_error();
  int overflow = 0;
  const long long wide = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
  if (std::is_unsigned_v<T> && overflow > 0) {
    const unsigned long long big = PyLong_AsUnsignedLongLong(number.ptr());
    if (!PyErr_Occurred() && big <= std::numeric_limits<T>::max()) {
      out = static_cast<T>(big);
      return;
    }
    PyErr_Clear();
  }
  if (overflow || !std::in_range<T>(wide)) {
    const std::string range = std::is_unsigned_v<T> ? "at least 0" : "within " + std::to_string(std::numeric_limits<T>::min()) + ".." +
                                                                    std::to_string(std::numeric_limits<T>::max());
    throw nb::value_error(("load option \"" + std::string(name) + "\" must be " + range + ", got " +
                           nb::cast<std::string>(nb::repr(value)))
                              .c_str());
  }
  out = static_cast<T>(wide);
}

// Seconds, as an int or a float; negative: -1 ms (LoadOptions::context_linger's "keep").
void assign(std::chrono::milliseconds& out, nb::handle value, const char* name) {
  if (PyBool_Check(value.ptr()) || !(PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr())))
    wrong_type(name, "a number of seconds", value);
  const double seconds = nb::cast<double>(value);
  if (std::isnan(seconds)) throw nb::value_error(("load option \"" + std::string(name) + "\" is NaN").c_str());
  out = std::chrono::milliseconds(seconds < 0 ? -1 : static_cast<int64_t>(std::min(seconds * 1000, 9.2e18)));
}

struct OptionAccess {
  const char* name;
  const char* doc;
  std::function<nb::object(const LoadOptions&)> get;
  std::function<void(LoadOptions&, nb::handle)> set;  // assigns, then validates
};

const std::vector<OptionAccess>& options_table() {
  static const std::vector<OptionAccess> table = [] {
    std::vector<OptionAccess> out;
    for_each_load_option([&](const char* name, auto member, const char* doc) {
      out.push_back({name, doc, [member](const LoadOptions& options) { return python_value(options.*member); },
                     [member, name](LoadOptions& options, nb::handle value) {
                       LoadOptions changed = options;
                       assign(changed.*member, value, name);
                       try {
                         changed.validate();
                       } catch (const Error& e) {
                         throw nb::value_error(e.what());
                       }
                       options = std::move(changed);
                     }});
    });
    return out;
  }();
  return table;
}

void assign_all(LoadOptions& options, const nb::dict& values) {
  for (auto [key, value] : values) {
    const std::string name = nb::cast<std::string>(key);
    const OptionAccess* found = nullptr;
    for (const OptionAccess& option : options_table())
      if (name == option.name) found = &option;
    if (!found) {
      std::string known;
      for (const OptionAccess& option : options_table()) known += (known.empty() ? "" : ", ") + std::string(option.name);
      throw nb::type_error(("LoadOptions has no option \"" + name + "\"; its options are " + known).c_str());
    }
    found->set(options, value);
  }
}

nb::dict as_dict(const LoadOptions& options) {
  nb::dict out;
  for (const OptionAccess& option : options_table()) out[option.name] = option.get(options);
  return out;
}

}  // namespace

void bind_load_options(nb::module_& m) {
  nb::class_<LoadOptions> options(m, "LoadOptions",
                                  "How a model is loaded (include/coremlrt/model.h, LoadOptions). "
                                  "LoadOptions(**options) sets the options named; the others keep their defaults.");
  options
      .def(
          "__init__",
          [](LoadOptions* self, nb::kwargs values) {
            new (self) LoadOptions();
            assign_all(*self, values);
          })
      .def("__getstate__", &as_dict)
      .def("__setstate__",
           [](LoadOptions& self, const nb::dict& state) {
             new (&self) LoadOptions();
             assign_all(self, state);
           })
      .def("__eq__",
           [](const LoadOptions& self, nb::handle other) -> nb::object {
             if (!nb::isinstance<LoadOptions>(other)) return nb::borrow(Py_NotImplemented);
             return nb::bool_(as_dict(self).equal(as_dict(nb::cast<const LoadOptions&>(other))));
           })
      .def("__repr__", [](const LoadOptions& self) {
        std::string text = "coremlrt.LoadOptions(";
        bool first = true;
        for (const OptionAccess& option : options_table()) {
          text += (first ? "" : ", ") + std::string(option.name) + "=" + nb::cast<std::string>(nb::repr(option.get(self)));
          first = false;
        }
        return text + ")";
      });
  options.attr("__hash__") = nb::none();  // options change in place
  for (const OptionAccess& option : options_table())
    options.def_prop_rw(option.name, option.get, option.set, nb::for_getter(option.doc),
                        nb::for_setter(nb::arg("value").none()));  // None gets assign's TypeError
}
