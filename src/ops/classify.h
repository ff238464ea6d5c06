#pragma once
// The class labels of a `classify` op, read by its kernel (to check them at load) and by
// Model (to turn the kernel's class index back into a label: Model::class_labels()).
#include <string>
#include <vector>

#include "ir/program.h"

namespace coremlrt::ops {

struct ClassLabels {
  std::vector<std::string> labels;  // in class index order; int64 labels in decimal
  bool integer = false;             // int64 labels (else strings)
};

// Reads classify's `classes` constant: a list of string or int64 scalars (what coremltools
// writes) or a 1-D string or int64 tensor. Throws Error, prefixed with `where`, for anything
// else (other dtypes, mixed labels, no labels).
ClassLabels read_class_labels(const ir::ConstValue& classes, const std::string& where);

}  // namespace coremlrt::ops
