#pragma once
// The class labels of a `classify` op's `classes` constant, read by its kernel (src/ops/classify.cc,
// to check them at load) and by format/ for the loaded model (src/format/feature_codes.h:
// Model::class_labels() turns the kernel's class index back into a label).
#include <string>
#include <vector>

#include "ir/program.h"

namespace coremlrt::ir {

struct ClassLabels {
  std::vector<std::string> labels;  // in class index order; int64 labels in decimal
  bool integer = false;             // int64 labels (else strings)
};

// Reads classify's `classes` constant: a list of string or int64 scalars (what coremltools
// writes) or a 1-D string or int64 tensor. Throws Error, prefixed with `where`, for anything
// else (other dtypes, mixed labels, no labels).
ClassLabels read_class_labels(const ConstValue& classes, const std::string& where);

}  // namespace coremlrt::ir
