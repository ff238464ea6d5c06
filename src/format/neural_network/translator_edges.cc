// The edges of a translated neuralNetwork (translator.h): the model's inputs declared as program
// inputs (arrays and images, framed for the blob layout), its outputs taken from their blobs, and
// a classifier's classify op.
#include "format/neural_network/translator.h"

#include "coremlrt/error.h"

namespace coremlrt::format::neural_network {

void Translator::declare_input(const std::string& name, std::optional<ir::ValueType> type) {
  reserved_.insert(name);
  if (!type) {
    blobs_[name] = std::nullopt;
    return;
  }
  if (rank5_ && sequence_unknown_) {
    require(type->rank == 1 || type->rank == 3, "input '", name, "' has rank ", type->rank,
            "; the rank-5 blob layout takes arrays of rank 1 or 3");
    const std::vector<int64_t>& d = type->dims;
    const ir::ValueType framed =
        tensor_type(type->dtype, type->rank == 1 ? std::vector<int64_t>{-1, 1, d[0], 1, 1}
                                                 : std::vector<int64_t>{-1, 1, d[0], d[1], d[2]});
    function_.inputs.push_back({name, framed});
    Value blob{name, nullptr, framed};
    if (framed.dtype == DType::Float64) blob = cast_to_fp32(blob);
    blobs_[name] = blob;
    return;
  }
  function_.inputs.push_back({name, *type});
  Value blob{name, nullptr, *type};
  // The layer graph computes in fp32; a double input is narrowed on entry, as Core ML does.
  if (type->dtype == DType::Float64) blob = cast_to_fp32(blob);
  if (!rank5_) {
    blobs_[name] = blob;
    return;
  }
  require(type->rank == 1 || type->rank == 3, "input '", name, "' has rank ", type->rank,
          "; the rank-5 blob layout takes arrays of rank 1 or 3");
  const std::vector<int64_t> axes = type->rank == 1 ? std::vector<int64_t>{0, 1, 3, 4} : std::vector<int64_t>{0, 1};
  std::vector<int64_t> dims = type->rank == 1 ? std::vector<int64_t>{1, 1, type->dims[0], 1, 1}
                                              : std::vector<int64_t>{1, 1, type->dims[0], type->dims[1], type->dims[2]};
  blobs_[name] = framing_op("expand_dims", blob, axes, tensor_type(DType::Float32, dims),
                            name + "#rank5");
}

void Translator::declare_image_input(const std::string& name, const ir::ValueType& type, const ImagePreprocessing* pre) {
  reserved_.insert(name);
  function_.inputs.push_back({name, type});
  Value blob{name, nullptr, type};
  if (type.dtype != DType::Float32) blob = cast_to_fp32(blob);
  if (pre && pre->scale) blob = entry_op("mul", {{"x", {blob}}, {"y", {float_scalar(*pre->scale)}}}, blob.type, name + "#scaled");
  if (pre && pre->bias) blob = entry_op("add", {{"x", {blob}}, {"y", {*pre->bias}}}, blob.type, name + "#biased");
  if (pre && pre->mean) blob = entry_op("sub", {{"x", {blob}}, {"y", {*pre->mean}}}, blob.type, name + "#centered");
  if (image_rank5_) {
    const auto& d = blob.type.dims;
    blob = framing_op("expand_dims", blob, {0}, tensor_type(DType::Float32, {1, d[0], d[1], d[2], d[3]}), name + "#rank5");
  }
  blobs_[name] = blob;
}

std::optional<std::string> Translator::output_value(const std::string& blob, const FeatureDescription& feature) {
  auto it = blobs_.find(blob);
  if (it == blobs_.end() || !it->second) return std::nullopt;
  const Value value = *it->second;  // a copy: rename_aside below renames blobs_ entries
  const auto& d = value.type.dims;
  std::vector<int64_t> axes, dims;
  if (rank5_ && value.type.rank == 5) {
    const bool vector = feature.shape.size() == 1 && d[3] == 1 && d[4] == 1;
    axes = vector ? std::vector<int64_t>{0, 1, 3, 4} : std::vector<int64_t>{0, 1};
    dims = vector ? std::vector<int64_t>{d[2]} : std::vector<int64_t>{d[2], d[3], d[4]};
  } else if (!rank5_ && !feature.shape.empty() && value.type.rank > static_cast<int64_t>(feature.shape.size())) {
    // In the rank-generic layout an output takes the rank its description declares (Core
    // ML's validator reads output ranks from there): a blob with more axes, such as a
    // [1, C, H, W] image blob declared [C, H, W], drops its leading axes when they are 1.
    const int64_t extra = value.type.rank - static_cast<int64_t>(feature.shape.size());
    for (int64_t i = 0; i < extra; ++i) {
      if (d[i] != 1) return value.name;
      axes.push_back(i);
    }
    dims.assign(d.begin() + extra, d.end());
  } else {
    return value.name;
  }
  // The block's output keeps the feature's name; the blob's own value is renamed aside.
  rename_aside(value.name, value.name + "#rank5");
  framing_op("squeeze", Value{value.name + "#rank5", nullptr, value.type}, axes, tensor_type(value.type.dtype, dims),
             value.name);
  return value.name;
}

std::optional<std::string> Translator::image_output_value(const std::string& blob, const FeatureDescription& feature) {
  auto it = blobs_.find(blob);
  if (it == blobs_.end() || !it->second) return std::nullopt;
  const Value value = *it->second;  // a copy: rename_aside below renames blobs_ entries
  const std::string& space = feature.color_space;
  require(space == "RGB" || space == "BGR" || space == "GRAYSCALE" || space == "GRAYSCALE_FLOAT16", "image output '",
          feature.name, "' has the color space ", space, ", which this build cannot make");
  const int64_t channels = space == "RGB" || space == "BGR" ? 3 : 1;
  const int64_t rank = value.type.rank;
  const auto& d = value.type.dims;
  require(rank >= 3, "image output '", feature.name, "' comes from the blob ", value.type.str(),
          "; an image is made from a blob's last three axes [C, H, W]");
  for (int64_t i = 0; i + 3 < rank; ++i)
    require(d[i] == 1, "image output '", feature.name, "' comes from the blob ", value.type.str(),
            ", whose axes before [C, H, W] are not all 1");
  require(d[rank - 3] == channels, "image output '", feature.name, "' is ", space, " (", channels,
          channels == 1 ? " channel" : " channels", ") but its blob ", value.type.str(), " has ",
          d[rank - 3] < 0 ? std::string("an unknown number of") : std::to_string(d[rank - 3]), " channels");
  const bool flexible = !feature.shape_range.empty() || !feature.enumerated_shapes.empty();
  if (!flexible)
    require(d[rank - 2] == feature.image_height && d[rank - 1] == feature.image_width, "image output '",
            feature.name, "' is ", feature.image_width, "x", feature.image_height, " (width x height) but its blob is ",
            value.type.str());
  const ir::ValueType image = tensor_type(DType::Float32, {1, channels, d[rank - 2], d[rank - 1]});
  const bool half = space == "GRAYSCALE_FLOAT16";
  if (rank == 4 && !half) return value.name;  // already [1, C, H, W]
  // The block's output keeps the feature's name; the blob's own value is renamed aside.
  rename_aside(value.name, value.name + "#blob");
  Value framed{value.name + "#blob", nullptr, value.type};
  const std::string framed_name = half ? value.name + "#image" : value.name;
  if (rank == 3) {
    framed = framing_op("expand_dims", framed, {0}, image, framed_name);
  } else if (rank > 4) {
    std::vector<int64_t> axes;
    for (int64_t i = 0; i < rank - 4; ++i) axes.push_back(i);
    framed = framing_op("squeeze", framed, axes, image, framed_name);
  }
  if (half) {
    ir::ValueType fp16 = image;
    fp16.dtype = DType::Float16;
    entry_op("cast", {{"x", {framed}}, {"dtype", {string_scalar("fp16")}}}, fp16, value.name);
  }
  return value.name;
}

std::vector<std::string> Translator::unread_blobs(const nn::NeuralNetwork& network) const {
  std::set<std::string> read;
  for (const auto& layer : network.layers()) read.insert(layer.input().begin(), layer.input().end());
  std::vector<std::string> out;
  for (const auto& [blob, count] : definitions_left_)
    if (!read.count(blob)) out.push_back(blob);
  return out;
}

void Translator::add_classify(const Value& probabilities, std::shared_ptr<const ir::ConstValue> classes,
                              DType label_dtype, const std::string& label_name,
                              const std::string& probabilities_name) {
  std::string input = probabilities.name;
  for (const std::string* name : {&label_name, &probabilities_name}) {
    if (!reserved_.count(*name)) continue;
    std::string aside;
    do aside = *name + "#" + std::to_string(fresh_++);
    while (reserved_.count(aside));
    reserved_.insert(aside);
    rename_aside(*name, aside);
    if (input == *name) input = aside;
  }
  ir::Operation op;
  op.type = "classify";
  op.name = "classify";
  op.inputs["probabilities"].push_back({input, nullptr});
  op.inputs["classes"].push_back({"", std::move(classes)});
  op.outputs.push_back({label_name, tensor_type(label_dtype, {})});
  ir::ValueType dictionary;
  dictionary.kind = ir::TypeKind::Dictionary;
  op.outputs.push_back({probabilities_name, dictionary});
  function_.block.operations.push_back(std::move(op));
  reserved_.insert(label_name);
  reserved_.insert(probabilities_name);
}

Value Translator::entry_op(const char* type, const OpInputs& inputs, const ir::ValueType& out, const std::string& name) {
  ir::Operation op;
  op.type = type;
  for (const auto& [param, values] : inputs)
    for (const Value& value : values) op.inputs[param].push_back({value.name, value.constant});
  op.outputs.push_back({name, out});
  function_.block.operations.push_back(std::move(op));
  reserved_.insert(name);
  return Value{name, nullptr, out};
}

void Translator::rename_aside(const std::string& name, const std::string& aside) {
  for (auto& op : function_.block.operations)
    for (auto& output : op.outputs)
      if (output.name == name) output.name = aside;
  for (auto& op : function_.block.operations)
    for (auto& [param, bindings] : op.inputs)
      for (auto& binding : bindings)
        if (binding.name == name) binding.name = aside;
  for (auto& [blob, value] : blobs_)
    if (value && value->name == name) value->name = aside;
}

}  // namespace coremlrt::format::neural_network
