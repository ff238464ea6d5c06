// nonMaximumSuppression (Model field 610), an object detector's last pipeline stage: one
// `non_maximum_suppression_model` op (src/ops/detection.cc) over the confidence [B, C] and
// coordinates [B, 4] inputs, with the thresholds given as optional double inputs or taken from
// the message. docs/design/detection.md gives the algorithm and every choice the format leaves
// open.
#include <cmath>
#include <cstring>

#include "classic_detection.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

namespace spec = CoreML::Specification;

namespace {

constexpr const char* kType = "nonMaximumSuppression";

const FeatureDescription* find(const std::vector<FeatureDescription>& features, const std::string& name) {
  if (name.empty()) return nullptr;
  for (const FeatureDescription& f : features)
    if (f.name == name) return &f;
  return nullptr;
}

// The program type of the confidence or coordinates input: rank 2, a dim left open (-1) where
// the description declares no shape or a flexible one.
ir::ValueType box_array_type(const FeatureDescription& f, const char* role, int64_t columns) {
  COREMLRT_CHECK(f.kind == FeatureKind::MultiArray, kType, ": the ", role, " input '", f.name, "' is a ",
                 feature_kind_name(f.kind), " feature; it must be a multi-array");
  COREMLRT_CHECK(f.dtype == DType::Float32 || f.dtype == DType::Float64, kType, ": the ", role, " input '", f.name,
                 "' holds ", dtype_name(f.dtype), "; Core ML takes double or float32 here");
  std::vector<int64_t> dims{-1, columns};
  if (f.shape.size() == 2 && f.shape_range.empty() && f.enumerated_shapes.empty()) {
    dims = {f.shape[0], f.shape[1]};
    COREMLRT_CHECK(columns < 0 || dims[1] == columns, kType, ": the ", role, " input '", f.name,
                   "' is declared [", dims[0], ", ", dims[1], "]; it holds ", columns, " numbers per box");
  } else if (f.shape_range.size() == 2 && f.shape_range[1].first == f.shape_range[1].second) {
    dims[1] = f.shape_range[1].first;
  }
  return tensor_type(f.dtype, dims);
}

// How many rows the outputs have: at least `min`, at most `max` (-1: no limit). A fixed output
// shape pins both; a range gives both bounds; no shape leaves them open (the message's comments
// on confidenceOutputFeatureName).
struct RowBounds {
  int64_t min = 0;
  int64_t max = -1;
};

bool read_row_bounds(const FeatureDescription& f, RowBounds& out) {
  if (f.shape_range.size() == 2) {
    out = {f.shape_range[0].first, f.shape_range[0].second};
    return true;
  }
  if (f.shape.size() == 2 && f.enumerated_shapes.empty()) {
    out = {f.shape[0], f.shape[0]};
    return true;
  }
  COREMLRT_CHECK(f.shape.empty() && f.shape_range.empty() && f.enumerated_shapes.empty(), kType, ": output '",
                 f.name, "' must declare no shape, a shape of 2 dims or a range of 2 dims");
  return false;
}

Const f64_scalar(double value) { return f64_tensor({value}, {}); }

Const bool_scalar(bool value) {
  auto out = std::make_shared<ir::ConstValue>();
  out->type = tensor_type(DType::Bool, {});
  out->tensor = Tensor::empty(DType::Bool, {});
  *out->tensor.ptr<bool>() = value;
  return out;
}

Const i64_scalar(int64_t value) { return i64_tensor({value}, {}); }

spec::NonMaximumSuppression parse(const std::string& serialized) {
  spec::NonMaximumSuppression message;
  COREMLRT_CHECK(message.ParseFromString(serialized), kType, ": the message does not parse");
  return message;
}

}  // namespace

ir::Program read_non_maximum_suppression(const std::string& serialized, const FunctionDescription& description) {
  const spec::NonMaximumSuppression nms = parse(serialized);
  // PickTop is the format's only method; a message that sets none reads as PickTop without
  // perClass, proto3's default.
  const bool per_class = nms.has_picktop() && nms.picktop().perclass();
  COREMLRT_CHECK(nms.iouthreshold() >= 0.0 && nms.iouthreshold() <= 1.0, kType, ": iouThreshold is ",
                 nms.iouthreshold(), "; it must lie in [0, 1]");
  COREMLRT_CHECK(nms.confidencethreshold() >= 0.0, kType, ": confidenceThreshold is ", nms.confidencethreshold(),
                 "; it must not be negative");

  const FeatureDescription* confidence = find(description.inputs, nms.confidenceinputfeaturename());
  const FeatureDescription* coordinates = find(description.inputs, nms.coordinatesinputfeaturename());
  COREMLRT_CHECK(confidence, kType, ": no input '", nms.confidenceinputfeaturename(),
                 "' (confidenceInputFeatureName) in the model description");
  COREMLRT_CHECK(coordinates, kType, ": no input '", nms.coordinatesinputfeaturename(),
                 "' (coordinatesInputFeatureName) in the model description");
  // A threshold input the message names but the description does not declare is not read: the
  // message's own threshold serves (a pipeline stage reads its pipeline's input of that name:
  // format/spec_reader.cc adds it to the stage's description).
  const FeatureDescription* iou_input = find(description.inputs, nms.iouthresholdinputfeaturename());
  const FeatureDescription* confidence_input = find(description.inputs, nms.confidencethresholdinputfeaturename());
  for (const FeatureDescription* f : {iou_input, confidence_input})
    COREMLRT_CHECK(!f || f->kind == FeatureKind::Double, kType, ": the threshold input '", f ? f->name : "",
                   "' is a ", f ? feature_kind_name(f->kind) : "", " feature; it must be a double");
  for (const FeatureDescription& f : description.inputs)
    COREMLRT_CHECK(&f == confidence || &f == coordinates || &f == iou_input || &f == confidence_input, kType,
                   ": input '", f.name, "' is none of the features the message names");

  const FeatureDescription* confidence_out = find(description.outputs, nms.confidenceoutputfeaturename());
  const FeatureDescription* coordinates_out = find(description.outputs, nms.coordinatesoutputfeaturename());
  COREMLRT_CHECK(confidence_out, kType, ": no output '", nms.confidenceoutputfeaturename(),
                 "' (confidenceOutputFeatureName) in the model description");
  COREMLRT_CHECK(coordinates_out, kType, ": no output '", nms.coordinatesoutputfeaturename(),
                 "' (coordinatesOutputFeatureName) in the model description");
  COREMLRT_CHECK(confidence_out != coordinates_out, kType, ": the confidence and coordinates outputs are both '",
                 confidence_out->name, "'");
  for (const FeatureDescription& f : description.outputs)
    COREMLRT_CHECK(&f == confidence_out || &f == coordinates_out, kType, ": output '", f.name,
                   "' is neither the confidence nor the coordinates output");
  for (const FeatureDescription* f : {confidence_out, coordinates_out})
    COREMLRT_CHECK(f->kind == FeatureKind::MultiArray && f->dtype == confidence->dtype, kType, ": output '", f->name,
                   "' must be a multi-array of the confidence input's type (", dtype_name(confidence->dtype), ")");

  const ir::ValueType confidence_type = box_array_type(*confidence, "confidence", -1);
  const ir::ValueType coordinates_type = box_array_type(*coordinates, "coordinates", 4);
  COREMLRT_CHECK(coordinates_type.dtype == confidence_type.dtype, kType, ": confidence holds ",
                 dtype_name(confidence_type.dtype), " but coordinates hold ", dtype_name(coordinates_type.dtype),
                 "; Core ML wants one element type");

  RowBounds rows, other;
  const bool bounded = read_row_bounds(*confidence_out, rows);
  if (read_row_bounds(*coordinates_out, other)) {
    COREMLRT_CHECK(!bounded || (rows.min == other.min && rows.max == other.max), kType,
                   ": the confidence and coordinates outputs bound their rows differently");
    rows = other;
  }
  COREMLRT_CHECK(rows.min >= 0 && (rows.max < 0 || rows.max >= rows.min), kType, ": the outputs' rows are bounded ",
                 "by [", rows.min, ", ", rows.max, "], which is no range of counts");

  ir::Function function;
  function.name = "main";
  function.opset = "CoreML5";  // the op means the same in every opset
  function.ios_version = ir::ios_version_of_opset(function.opset);
  ir::Operation op;
  op.type = "non_maximum_suppression_model";
  op.name = "non_maximum_suppression";
  for (const FeatureDescription& f : description.inputs) {
    const ir::ValueType type = &f == confidence    ? confidence_type
                               : &f == coordinates ? coordinates_type
                                                   : tensor_type(DType::Float64, {});
    function.inputs.push_back({f.name, type});
    const char* param = &f == confidence    ? "confidence"
                        : &f == coordinates ? "coordinates"
                        : &f == iou_input   ? "iou_threshold"
                                            : "confidence_threshold";
    op.inputs[param] = {ir::Binding{f.name, nullptr}};
  }
  op.inputs["default_iou_threshold"] = {ir::Binding{"", f64_scalar(nms.iouthreshold())}};
  op.inputs["default_confidence_threshold"] = {ir::Binding{"", f64_scalar(nms.confidencethreshold())}};
  op.inputs["per_class"] = {ir::Binding{"", bool_scalar(per_class)}};
  op.inputs["min_boxes"] = {ir::Binding{"", i64_scalar(rows.min)}};
  op.inputs["max_boxes"] = {ir::Binding{"", i64_scalar(rows.max)}};
  // Output values take the description's names, or fresh ones where an input has that name (a
  // pipeline stage may write the feature names it reads; format/pipeline_splicer.h renames).
  auto value_name = [&](const std::string& name, const char* stem) {
    return find(description.inputs, name) ? std::string(stem) + "_kept" : name;
  };
  const std::string confidence_value = value_name(confidence_out->name, "confidence");
  const std::string coordinates_value = value_name(coordinates_out->name, "coordinates");
  op.outputs.push_back({confidence_value, tensor_type(confidence_type.dtype, {-1, confidence_type.dims[1]})});
  op.outputs.push_back({coordinates_value, tensor_type(confidence_type.dtype, {-1, 4})});
  function.block.operations.push_back(std::move(op));
  for (const FeatureDescription& f : description.outputs)
    function.block.outputs.push_back(&f == confidence_out ? confidence_value : coordinates_value);
  ir::Program out;
  out.functions.emplace(function.name, std::move(function));
  return out;
}

std::vector<RoleDefault> non_maximum_suppression_defaults(const std::string& serialized) {
  spec::NonMaximumSuppression nms;
  if (!nms.ParseFromString(serialized)) return {};  // read_non_maximum_suppression reports it
  std::vector<RoleDefault> out;
  if (!nms.iouthresholdinputfeaturename().empty())
    out.push_back({nms.iouthresholdinputfeaturename(), FeatureKind::Double, nms.iouthreshold()});
  if (!nms.confidencethresholdinputfeaturename().empty())
    out.push_back({nms.confidencethresholdinputfeaturename(), FeatureKind::Double, nms.confidencethreshold()});
  return out;
}

}  // namespace coremlrt::format::classic
