// classConfidenceThresholding (Model field 560): class confidences [C] in, [2, C] out, row 0 the
// confidences and row 1 ones. The format says the model takes every class for now, whatever its
// precision-recall curves (one per class, which Core ML checks: present, of matching lengths,
// finite and not negative); a `class_confidence_thresholding` op (src/ops/feature_engineering.cc)
// writes that.
#include <cmath>

#include "classic_feature.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

namespace spec = CoreML::Specification;

namespace {

constexpr const char* kType = "classConfidenceThresholding";

void check_curve_part(const spec::FeatureFloatVector& values, const spec::FeatureFloatVector& thresholds, int curve,
                      const char* what) {
  COREMLRT_CHECK(values.vector_size() > 0 && values.vector_size() == thresholds.vector_size(), kType, ": curve ", curve,
                 " has ", values.vector_size(), " ", what, " values for ", thresholds.vector_size(), " thresholds");
  for (const auto* list : {&values, &thresholds})
    for (float v : list->vector())
      COREMLRT_CHECK(std::isfinite(v) && v >= 0.0f, kType, ": curve ", curve, " holds ", v, " among its ", what,
                     " numbers; they must be finite and not negative");
}

bool is_float_array(const FeatureDescription& f) {
  return f.kind == FeatureKind::MultiArray &&
         (f.dtype == DType::Float16 || f.dtype == DType::Float32 || f.dtype == DType::Float64);
}

}  // namespace

ir::Program read_class_confidence_thresholding(const std::string& serialized, const FunctionDescription& description) {
  spec::ClassConfidenceThresholding model;
  COREMLRT_CHECK(model.ParseFromString(serialized), kType, ": the message does not parse");
  COREMLRT_CHECK(model.precisionrecallcurves_size() > 0, kType, ": the model has no precision-recall curves");
  for (int i = 0; i < model.precisionrecallcurves_size(); ++i) {
    const spec::PrecisionRecallCurve& c = model.precisionrecallcurves(i);
    check_curve_part(c.precisionvalues(), c.precisionconfidencethresholds(), i, "precision");
    check_curve_part(c.recallvalues(), c.recallconfidencethresholds(), i, "recall");
  }
  COREMLRT_CHECK(description.inputs.size() == 1 && description.outputs.size() == 1, kType,
                 ": the model has one input and one output; the description declares ", description.inputs.size(),
                 " and ", description.outputs.size());
  const FeatureDescription& in = description.inputs.front();
  const FeatureDescription& out = description.outputs.front();
  for (const FeatureDescription* f : {&in, &out})
    COREMLRT_CHECK(is_float_array(*f), kType, ": feature '", f->name, "' must be a multi-array of fp16, fp32 or fp64");
  COREMLRT_CHECK(in.name != out.name, kType, ": the output has the name of the input");
  int64_t classes = -1;
  if (in.shape.size() == 1 && in.shape_range.empty() && in.enumerated_shapes.empty()) classes = in.shape[0];
  COREMLRT_CHECK(classes < 0 || classes == model.precisionrecallcurves_size(), kType, ": ",
                 model.precisionrecallcurves_size(), " precision-recall curves for ", classes, " classes");
  COREMLRT_CHECK(in.shape.size() <= 1, kType, ": input '", in.name, "' is declared with ", in.shape.size(),
                 " dims; the class confidences are [C]");

  ir::Function function;
  function.name = "main";
  function.opset = "CoreML5";  // the op means the same in every opset
  function.ios_version = ir::ios_version_of_opset(function.opset);
  function.inputs.push_back({in.name, tensor_type(in.dtype, {classes})});
  ir::Operation op;
  op.type = "class_confidence_thresholding";
  op.name = kType;
  op.inputs["x"] = {ir::Binding{in.name, nullptr}};
  op.outputs.push_back({out.name, tensor_type(out.dtype, {2, classes})});
  function.block.operations.push_back(std::move(op));
  function.block.outputs.push_back(out.name);
  ir::Program program;
  program.functions.emplace(function.name, std::move(function));
  return program;
}

}  // namespace coremlrt::format::classic
