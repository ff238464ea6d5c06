#include "ir/class_labels.h"

#include "coremlrt/error.h"

namespace coremlrt::ir {

namespace {

// Appends the labels of one tensor (scalar or 1-D) of strings or integers.
void add_labels(const ConstValue& v, ClassLabels& out, bool& seen_string, bool& seen_int, const std::string& where) {
  COREMLRT_CHECK(v.type.kind == TypeKind::Tensor && v.type.rank <= 1, where,
                 ": classes must hold string or int64 scalars, got ", v.type.str());
  if (v.type.dtype == DType::String) {
    seen_string = true;
    out.labels.insert(out.labels.end(), v.strings.begin(), v.strings.end());
    return;
  }
  COREMLRT_CHECK(v.tensor.dtype == DType::Int64 || v.tensor.dtype == DType::Int32, where,
                 ": class labels must be strings or int64, got ", dtype_name(v.tensor.dtype));
  seen_int = true;
  for (int64_t i = 0; i < v.tensor.numel(); ++i)
    out.labels.push_back(std::to_string(v.tensor.dtype == DType::Int64 ? v.tensor.ptr<int64_t>()[i]
                                                                       : int64_t{v.tensor.ptr<int32_t>()[i]}));
}

}  // namespace

ClassLabels read_class_labels(const ConstValue& classes, const std::string& where) {
  ClassLabels out;
  bool seen_string = false, seen_int = false;
  if (classes.type.kind == TypeKind::List || classes.type.kind == TypeKind::Tuple) {
    for (const ConstValue& item : classes.items) add_labels(item, out, seen_string, seen_int, where);
  } else {
    add_labels(classes, out, seen_string, seen_int, where);
  }
  COREMLRT_CHECK(!(seen_string && seen_int), where, ": classes mixes string and integer labels");
  COREMLRT_CHECK(!out.labels.empty(), where, ": classes is empty");
  out.integer = seen_int;
  return out;
}

}  // namespace coremlrt::ir
