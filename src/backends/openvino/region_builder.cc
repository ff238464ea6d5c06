#include "backends/openvino/region_builder.h"

#include <openvino/op/constant.hpp>
#include <openvino/op/convert.hpp>
#include <openvino/op/logical_and.hpp>
#include <openvino/op/parameter.hpp>
#include <openvino/op/result.hpp>

#include "backends/openvino/weight_memory.h"
#include "format/blob_file.h"
#include "ops/packed_weight.h"
#include "ops/util.h"

namespace ov {
// Exported by libopenvino (transformations/rt_info/decompression.hpp, not among the SDK's
// headers): marks a Convert of a constant as weight decompression.
void mark_as_decompression(const std::shared_ptr<Node>& node);
}  // namespace ov

namespace coremlrt::backends::openvino {

namespace {

// fp16 constants of at least this many elements reach an fp32 region as fp16 views
// (RegionBuilder::dense_constant); smaller ones are widened, which costs nothing worth a node.
constexpr int64_t kDecompressedElements = 1024;

}  // namespace

std::shared_ptr<ov::Model> RegionBuilder::build(std::vector<Tensor>& kept_constants) {
  ov::ParameterVector parameters;
  for (const ir::NamedValue& input : region_.inputs) {
    const ov::element::Type type = *element_type(input.type.dtype);
    auto parameter = std::make_shared<ov::op::v0::Parameter>(
        type, ov::PartialShape(std::vector<ov::Dimension>(input.type.dims.begin(), input.type.dims.end())));
    parameter->set_friendly_name(input.name);
    parameters.push_back(parameter);
    Value value = parameter->output(0);
    if (compute_type(input.type.dtype) != type) value = std::make_shared<ov::op::v0::Convert>(value, compute_type(input.type.dtype));
    graph_[input.name] = value;
  }
  for (const ir::Operation* op : region_.ops) lower(*op);
  ov::ResultVector results;
  for (const ir::NamedValue& output : region_.outputs) {
    Value value = graph_.at(output.name);
    const ov::element::Type type = *element_type(output.type.dtype);
    if (value.get_element_type() != type) value = std::make_shared<ov::op::v0::Convert>(value, type);
    results.push_back(std::make_shared<ov::op::v0::Result>(value));
  }
  // The conditions of Lowerer::require, all in one boolean scalar after the region's outputs
  // (region_kernel.h).
  guarded_ = !guards_.empty();
  if (guarded_) {
    Value all = guards_[0];
    for (size_t i = 1; i < guards_.size(); ++i) all = std::make_shared<ov::op::v1::LogicalAnd>(all, guards_[i]);
    results.push_back(std::make_shared<ov::op::v0::Result>(all));
  }
  kept_constants = std::move(kept_);
  return std::make_shared<ov::Model>(results, parameters, region_.function.name);
}

Value RegionBuilder::value_of(const ir::Binding& binding) {
  if (!binding.value) {
    auto it = graph_.find(binding.name);
    if (it != graph_.end()) return it->second;
  }
  const ir::ConstValue* constant = region_.values.constant(binding);
  if (!constant) fail("value '", binding.name, "' is neither computed in the region nor an input of it");
  Value node;
  if (constant->packed && reaches_plugin_decoded(*constant->packed, read_decoded(*constant))) {
    // Decoded here: OpenVINO has no kernels for its form, or reads it in an op whose lowering
    // decodes packed inputs (a convolution: PackedInputs::kDecoded). As a dense constant (the
    // program's dtype) it reaches the plugin as a stored fp16 weight does (dense_constant: behind
    // a Convert marked as weight decompression); the decompression pattern, or an unmarked
    // Convert, was folded by the plugin into an fp32 copy that lived beside its repacked one
    // (docs/design/compressed-weights.md; docs/reports/performance.md).
    node = dense_constant(decoded_for_plugin(*constant->packed), binding.name);
  } else if (constant->packed) {
    node = packed_constant(*constant->packed, compute_type(constant->packed->dtype), kept_);
  } else {
    node = dense_constant(constant->tensor, binding.name);
  }
  if (!binding.value) graph_[binding.name] = node;
  return node;
}

Tensor RegionBuilder::decoded_for_plugin(const ir::PackedTensor& packed) {
  const Shape shape = packed.value_shape();
  const size_t bytes = dtype_size(packed.dtype) * static_cast<size_t>(shape_numel(shape));
  std::shared_ptr<format::BlobFile> file = format::BlobFile::spill(spill_dir_, bytes, [&](uint8_t* data) {
    ops::decode_dense_into(packed, Tensor::view(packed.dtype, shape, data, nullptr));
  });
  Tensor decoded = file ? file->read_raw(0, packed.dtype, shape) : ops::decode_dense(packed);
  if (file) spilled_.push_back(decoded);
  // The codes were read once, here: their pages need not stay while the region compiles (a
  // later reader maps them again from the weight file).
  if (release_sources_)
    for (const Tensor* t : {&packed.codes.data, &packed.offset.data, &packed.mask, &packed.table, &packed.scale})
      if (t->defined()) format::BlobFile::release_pages(t->data, t->nbytes());
  return decoded;
}

bool RegionBuilder::read_decoded(const ir::ConstValue& constant) const {
  for (const ir::Operation* op : region_.ops) {
    if (!reads_packed_decoded(*op)) continue;
    for (const auto& [param, bindings] : op->inputs)
      for (const ir::Binding& binding : bindings)
        if (region_.values.constant(binding) == &constant) return true;
  }
  return false;
}

Value RegionBuilder::dense_constant(const Tensor& t, const std::string& name) {
  std::optional<ov::element::Type> type = element_type(t.dtype);
  if (!type || !t.defined()) fail("constant '", name, "' has dtype ", dtype_name(t.dtype), ", which has no OpenVINO type");
  Value node;
  if (compute_type(t.dtype) != *type && t.numel() >= kDecompressedElements) {
    // A large fp16 constant computed in fp32: a view of it (in the mapped weight file),
    // widened by a Convert marked as weight decompression, as OpenVINO's IR reader marks
    // fp16-compressed weights. Unmarked, the plugin folded the Convert into an fp32 copy that
    // lived as long as the compiled model, beside its own repacked weights (docs/reports/performance.md,
    // "Measurements behind code choices"). The plugin folds the marks it does not use itself.
    ov::Tensor view(*type, ov::Shape(t.shape.begin(), t.shape.end()), t.data);
    kept_.push_back(t);
    auto convert = std::make_shared<ov::op::v0::Convert>(std::make_shared<ov::op::v0::Constant>(view), ov::element::f32);
    ov::mark_as_decompression(convert);
    node = convert;
  } else if (compute_type(t.dtype) != *type) {
    // fp16 computed in fp32: the constant widened once, here, with the vectorized conversion
    // (an element-by-element loop took most of a cached load: docs/reports/performance.md).
    auto widened = std::make_shared<ov::op::v0::Constant>(ov::element::f32, ov::Shape(t.shape.begin(), t.shape.end()));
    half_to_float(t.ptr<half>(), const_cast<float*>(widened->get_data_ptr<float>()), t.numel());
    node = widened;
  } else {
    // A view of the plan's constant (weights stay in the memory-mapped weight file); the
    // kernel keeps the tensor, and so its storage, alive as long as the compiled model.
    ov::Tensor view(*type, ov::Shape(t.shape.begin(), t.shape.end()), t.data);
    node = std::make_shared<ov::op::v0::Constant>(view);
    kept_.push_back(t);
  }
  return node;
}

Value RegionBuilder::stored(const ir::Binding& binding) {
  const ir::ConstValue* constant = region_.values.constant(binding);
  if (!constant || constant->packed || !constant->tensor.defined() || constant->tensor.dtype != DType::Float16 ||
      compute_type(DType::Float16) == ov::element::f16)
    return value_of(binding);
  const std::string key = binding.value ? std::string() : binding.name;
  if (!key.empty()) {
    auto it = stored_.find(key);
    if (it != stored_.end()) return it->second;
  }
  const Tensor& t = constant->tensor;
  ov::Tensor view(ov::element::f16, ov::Shape(t.shape.begin(), t.shape.end()), t.data);
  kept_.push_back(t);
  Value node = std::make_shared<ov::op::v0::Constant>(view);
  if (!key.empty()) stored_[key] = node;
  return node;
}

void RegionBuilder::lower(const ir::Operation& op) {
  const OpLowering& lowering = lowerings().at(op.type);
  OpLowerer lowerer(op, *this);
  std::vector<Value> outputs = lowering.lower(lowerer);
  COREMLRT_CHECK(outputs.size() == op.outputs.size(), op.describe(), ": lowered to ", outputs.size(),
                 " outputs; the op has ", op.outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const ir::ValueType& declared = op.outputs[i].type;
    const ov::PartialShape& shape = outputs[i].get_partial_shape();
    const ov::element::Type type = outputs[i].get_element_type();
    // The lowering must give exactly what the program declares; otherwise its semantics
    // differ from our kernel's and the region stays ours. A dim the program knows only at
    // prediction may be anything here; one OpenVINO knows only then is checked by the region
    // kernel at each prediction (region_kernel.cc).
    bool same = shape.rank().is_static() && type == compute_type(declared.dtype) &&
                shape.rank().get_length() == static_cast<int64_t>(declared.dims.size());
    for (size_t d = 0; same && d < declared.dims.size(); ++d)
      same = declared.dims[d] < 0 || shape[d].is_dynamic() || shape[d].get_length() == declared.dims[d];
    COREMLRT_CHECK(same, op.describe(), ": lowered to ", type.get_type_name(), " ", shape.to_string(),
                   " but the program declares ", declared.str());
    graph_[op.outputs[i].name] = outputs[i];
  }
}

}  // namespace coremlrt::backends::openvino
