// Engine structs as plain Python data: the binding's one way to build the dicts it returns
// (module.cc, structure_bindings.cc, program_bindings.cc). A struct names its keys once, in a
// DictFields specialisation; to_python converts it and, recursively, what its fields hold:
//
//   COREMLRT_DICT_FIELDS(ModelStats, DictField{"contexts_created", &ModelStats::contexts_created}, ...);
//   return to_dict(model->stats());
//
// A field reads a member (a member pointer) or computes its value (a function of the struct,
// returning anything to_python takes, nb::object included). Values convert as follows:
// described structs to dicts, vectors to lists, string-keyed maps to dicts, pairs to tuples,
// optionals and shared pointers to the value or None, DType and FeatureKind to their names,
// anything else as nanobind casts it.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "coremlrt/description.h"
#include "coremlrt/tensor.h"

namespace coremlrt::python {

template <class Getter>
struct DictField {
  const char* key;
  Getter get;
};
template <class Getter>
DictField(const char*, Getter) -> DictField<Getter>;

// Specialised once per struct the binding returns (COREMLRT_DICT_FIELDS), before its first use.
template <class T>
struct DictFields {};

template <class T>
concept Described = requires { DictFields<T>::fields; };

template <class T>
nanobind::object to_python(const T& value);

template <Described T>
nanobind::dict to_dict(const T& value) {
  nanobind::dict out;
  std::apply([&](const auto&... field) { ((out[field.key] = to_python(std::invoke(field.get, value))), ...); },
             DictFields<T>::fields);
  return out;
}

template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};
template <class T>
struct IsStringMap : std::false_type {};
template <class V>
struct IsStringMap<std::map<std::string, V>> : std::true_type {};
template <class T>
struct IsPair : std::false_type {};
template <class A, class B>
struct IsPair<std::pair<A, B>> : std::true_type {};
template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <class T>
struct IsSharedPtr : std::false_type {};
template <class T>
struct IsSharedPtr<std::shared_ptr<T>> : std::true_type {};

template <class T>
nanobind::object to_python(const T& value) {
  if constexpr (Described<T>) {
    return to_dict(value);
  } else if constexpr (std::is_base_of_v<nanobind::handle, T>) {
    return nanobind::borrow(value);
  } else if constexpr (std::is_same_v<T, DType>) {
    return nanobind::str(dtype_name(value));
  } else if constexpr (std::is_same_v<T, FeatureKind>) {
    return nanobind::str(feature_kind_name(value));
  } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
    nanobind::list out;
    for (bool item : value) out.append(item);
    return out;
  } else if constexpr (IsVector<T>::value) {
    nanobind::list out;
    for (const auto& item : value) out.append(to_python(item));
    return out;
  } else if constexpr (IsStringMap<T>::value) {
    nanobind::dict out;
    for (const auto& [key, item] : value) out[key.c_str()] = to_python(item);
    return out;
  } else if constexpr (IsPair<T>::value) {
    return nanobind::make_tuple(to_python(value.first), to_python(value.second));
  } else if constexpr (IsOptional<T>::value || IsSharedPtr<T>::value) {
    return value ? to_python(*value) : nanobind::none();
  } else {
    return nanobind::cast(value);
  }
}

}  // namespace coremlrt::python

// Names the dict keys of `Type` (at namespace scope): COREMLRT_DICT_FIELDS(Type, DictField{"key", getter}, ...).
#define COREMLRT_DICT_FIELDS(Type, ...)                                             \
  template <>                                                                       \
  struct coremlrt::python::DictFields<Type> {                                       \
    static inline const auto fields = std::make_tuple(__VA_ARGS__);                 \
  }
