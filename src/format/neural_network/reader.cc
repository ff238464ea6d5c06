// The layer loop of the neuralNetwork translator: declares the model's inputs, hands each
// layer to its kind's translator (layer_table.cc) through a LayerContext, and names the
// values so that a blob's last definition carries the blob's own name (the model's outputs
// refer to blobs by name).
#include "format/neural_network/reader.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <set>

#include "coremlrt/error.h"
#include "format/neural_network/image_inputs.h"
#include "format/neural_network/layer_translator.h"
#include "nn_classifier.pb.h"
#include "nn_control_flow.pb.h"

namespace coremlrt::format {

using namespace neural_network;
using google::protobuf::internal::WireFormatLite;

namespace {

// The layer kind (its oneof member's field number, 100 and up) and the member's bytes.
// NeuralNetworkLayer leaves the member unparsed (proto/NeuralNetwork.proto), so it is read
// from the unknown fields the parse kept.
// The field number of NeuralNetworkLayer's `copy` (proto/NeuralNetwork.proto).
constexpr int kCopyLayer = 600;

struct LayerKind {
  int field = 0;
  std::string params;
};

LayerKind layer_kind(const nn::NeuralNetworkLayer& layer) {
  const std::string bytes = layer.SerializeAsString();
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                             static_cast<int>(bytes.size()));
  while (uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    if (field >= 100) {
      LayerKind out{field, ""};
      if (WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        uint32_t size = 0;
        if (!in.ReadVarint32(&size) || !in.ReadString(&out.params, static_cast<int>(size))) out.params.clear();
      }
      return out;
    }
    if (!WireFormatLite::SkipField(&in, tag)) break;
  }
  return {};
}

// The networks nested in a branch (605) or loop (615) layer; none for other kinds.
std::vector<nn::NeuralNetwork> nested_networks(const nn::NeuralNetworkLayer& layer) {
  const LayerKind kind = layer_kind(layer);
  if (kind.field == 605) {
    nn::BranchLayerParams params;
    if (params.ParseFromString(kind.params)) return {params.ifbranch(), params.elsebranch()};
  } else if (kind.field == 615) {
    nn::LoopLayerParams params;
    if (params.ParseFromString(kind.params)) return {params.conditionnetwork(), params.bodynetwork()};
  }
  return {};
}

// The blobs a layer defines: its outputs and, for a control-flow layer, every blob its nested
// networks write (Core ML makes those visible after the layer).
// loopBreak and loopContinue write the pseudo-blobs of their loop (layer_translator.h), which
// a loop layer keeps to itself.
void collect_written(const nn::NeuralNetworkLayer& layer, std::set<std::string>& out) {
  out.insert(layer.output().begin(), layer.output().end());
  const int kind = layer_kind(layer).field;
  if (kind == 620) out.insert({kLoopExitBlob, kLoopBreakBlob});
  if (kind == 625) out.insert(kLoopExitBlob);
  std::set<std::string> nested_out;
  for (const auto& network : nested_networks(layer))
    for (const auto& nested : network.layers()) collect_written(nested, nested_out);
  if (kind == 615) {
    nested_out.erase(kLoopExitBlob);
    nested_out.erase(kLoopBreakBlob);
  }
  out.insert(nested_out.begin(), nested_out.end());
}

// A branch layer on kLoopExitBlob whose elseBranch is layers [first, end) of `network`: the
// rest of a loop body after a layer that may end the iteration runs only when it did not.
nn::NeuralNetworkLayer rest_of_body(const nn::NeuralNetwork& network, int first, const std::string& after) {
  nn::BranchLayerParams params;
  params.mutable_ifbranch();
  for (int i = first; i < network.layers_size(); ++i) *params.mutable_elsebranch()->add_layers() = network.layers(i);
  nn::NeuralNetworkLayer frame;
  frame.set_name(after + "#rest");
  frame.add_input(kLoopExitBlob);
  std::string bytes = frame.SerializeAsString();
  const std::string member = params.SerializeAsString();
  google::protobuf::io::StringOutputStream sink(&bytes);
  {
    google::protobuf::io::CodedOutputStream out(&sink);
    out.WriteTag(WireFormatLite::MakeTag(605, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    out.WriteVarint32(static_cast<uint32_t>(member.size()));
    out.WriteString(member);
  }
  nn::NeuralNetworkLayer layer;
  require(layer.ParseFromString(bytes), "the rest of a loop body does not serialize");
  return layer;
}

std::set<std::string> written_by(const nn::NeuralNetworkLayer& layer) {
  std::set<std::string> out;
  collect_written(layer, out);
  return out;
}

std::string kind_name(int field) { return field ? network_layer_type_name(field) : "none"; }

std::string runnable_kinds() {
  std::string out;
  for (const auto& [field, translate] : layer_table()) out += (out.empty() ? "" : ", ") + network_layer_type_name(field);
  return out;
}

[[noreturn]] void refuse_kind(int field) {
  refuse("this build cannot run neuralNetwork layers of type '", kind_name(field), "' (it runs ", runnable_kinds(), ")");
}

class Translator final : public LayerContext {
 public:
  // `sequence_unknown`: in the rank-5 layout, array inputs take the blob [Seq, 1, C, H, W]
  // with Seq known only at prediction (read_neural_network's second attempt).
  Translator(const nn::NeuralNetwork& network, bool has_image_inputs, ir::Function& function, bool sequence_unknown)
      : function_(function), sequence_unknown_(sequence_unknown) {
    // RANK4_IMAGE_MAPPING puts a network with image inputs in Core ML's rank-generic mode even
    // when the array mapping is left at RANK5 (allowed only without multi-array inputs, which
    // read_neural_network checks).
    image_rank5_ = network.imageinputshapemapping() != nn::RANK4_IMAGE_MAPPING;
    rank5_ = network.arrayinputshapemapping() != nn::EXACT_ARRAY_MAPPING && (image_rank5_ || !has_image_inputs);
    for (const auto& layer : network.layers())
      for (const auto& blob : written_by(layer)) {
        ++definitions_left_[blob];
        reserved_.insert(blob);
      }
  }

  // An input without a type cannot run; layers reading it are still judged by their kind.
  // In the rank-5 layout a [C] or [C, H, W] array becomes the blob [1, 1, C, 1, 1] or
  // [1, 1, C, H, W] (the mapping NeuralNetwork.proto's arrayInputShapeMapping describes).
  // With sequence_unknown_ the program input itself is that rank-5 blob, [-1, 1, C, H, W]
  // (or [-1, 1, C, 1, 1]); the runtime views an array fed with the declared shape as Seq 1
  // (src/runtime/model.cc, bind_rank5_sequence).
  void declare_input(const std::string& name, std::optional<ir::ValueType> type) {
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

  // An image input: the [1, C, H, W] array of image_inputs.h, in fp32, preprocessed
  // (y = scale * x + bias, or y = x - mean), and framed as the image mapping says:
  // RANK5_IMAGE_MAPPING adds the [Seq, Batch] axes ([1, 1, C, H, W]), RANK4_IMAGE_MAPPING
  // keeps [1, C, H, W] (NeuralNetwork.proto's imageInputShapeMapping).
  void declare_image_input(const std::string& name, const ir::ValueType& type, const ImagePreprocessing* pre) {
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

  // The value a model output takes from its blob: in the rank-5 layout the blob's [Seq,
  // Batch] axes (and, for an output declared as [C], the H and W axes) are dropped, which
  // needs them to be 1; in the rank-generic layout, leading axes beyond the declared rank.
  std::optional<std::string> output_value(const std::string& blob, const FeatureDescription& feature) {
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

  // The value an image output takes from its blob. Core ML makes the image from the blob's
  // last three axes [C, H, W] (C = 3 for RGB and BGR, 1 for grayscale; the leading axes must
  // be 1); the program output is the [1, C, H, W] array an image input arrives as
  // (image_inputs.h), fp16 for GRAYSCALE_FLOAT16, which python/coremlrt/model.py turns into
  // the image. A fixed-size image must have the blob's H and W as its size.
  std::optional<std::string> image_output_value(const std::string& blob, const FeatureDescription& feature) {
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

  // The current value of a blob; nullopt when no input or layer made it, or its layer
  // could not run.
  std::optional<Value> blob_value(const std::string& blob) const {
    auto it = blobs_.find(blob);
    return it == blobs_.end() ? std::nullopt : it->second;
  }

  // The blobs some layer writes and no layer reads (the network's dangling outputs).
  std::vector<std::string> unread_blobs(const nn::NeuralNetwork& network) const {
    std::set<std::string> read;
    for (const auto& layer : network.layers()) read.insert(layer.input().begin(), layer.input().end());
    std::vector<std::string> out;
    for (const auto& [blob, count] : definitions_left_)
      if (!read.count(blob)) out.push_back(blob);
    return out;
  }

  // Ends a classifier: classify(`probabilities`) defines the label output `label_name` and the
  // dictionary `probabilities_name`. A blob value already holding either name is renamed aside.
  void add_classify(const Value& probabilities, std::shared_ptr<const ir::ConstValue> classes, DType label_dtype,
                    const std::string& label_name, const std::string& probabilities_name) {
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

  // Adds the layer's ops and returns true, or throws LayerRefused. A layer that reads the
  // output of a refused layer is judged by its kind alone and returns false.
  bool translate(const nn::NeuralNetworkLayer& layer) {
    return translate_into(layer, function_.block.operations);
  }

  bool translate_into(const nn::NeuralNetworkLayer& layer, std::vector<ir::Operation>& sink) {
    layer_ = &layer;
    const LayerKind kind = layer_kind(layer);
    params_ = &kind.params;
    ops_.clear();
    inputs_.clear();
    outputs_set_.assign(layer.output_size(), false);
    try {
      auto entry = layer_table().find(kind.field);
      if (entry == layer_table().end()) {
        auto refusal = refusal_table().find(kind.field);
        if (refusal != refusal_table().end()) refusal->second(*this);  // throws its own reason
        refuse_kind(kind.field);
      }
      bool inputs_known = true;
      for (const auto& name : layer.input()) {
        if (auto hidden = hidden_.find(name); hidden != hidden_.end()) refuse("reads blob '", name, "', ", hidden->second);
        auto blob = blobs_.find(name);
        if (blob == blobs_.end()) refuse("reads blob '", name, "', which no input or earlier layer produces");
        if (!blob->second) inputs_known = false;
        inputs_.push_back(blob->second ? *blob->second : Value{});
      }
      for (const auto& output : layer.output())
        for (const auto& model_input : function_.inputs) {
          if (model_input.name != output) continue;
          // A torch model that returns its input, converted to a neuralNetwork, copies the input
          // blob aside and back (copy x -> x_tmp, copy x_tmp -> x): the blob keeps the value it
          // holds, and the model's output of that name is its input.
          if (kind.field == kCopyLayer && depth_ == 0 && inputs_.size() == 1 && inputs_known &&
              copies_of_input(inputs_[0].name, output)) {
            --definitions_left_[output];
            return true;
          }
          // The program's values have one name each: the input and a different value written
          // over it cannot both be called so.
          refuse("overwrites the model input '", output, "' with a value other than the input itself (a computed, "
                 "cast or reshaped value), which the program cannot call by the input's name");
        }
      if (!inputs_known) {
        for (const auto& blob : written_by(layer)) define_unknown(blob);
        return false;
      }
      entry->second(*this);
      for (int i = 0; i < layer.output_size(); ++i)
        if (!outputs_set_[i]) refuse("its translation does not define output '", layer.output(i), "'");
    } catch (const LayerRefused&) {
      for (const auto& blob : written_by(layer)) define_unknown(blob);
      throw;
    }
    for (auto& op : ops_) sink.push_back(std::move(op));
    for (auto& [blob, value] : pending_) {
      hidden_.erase(blob);
      blobs_[blob] = std::move(value);
    }
    pending_.clear();
    return true;
  }


  // Whether the value `name` is the model input `input`, or a chain of copies (identity ops
  // of this function's block) of it.
  bool copies_of_input(std::string name, const std::string& input) const {
    const auto& ops = function_.block.operations;
    for (auto op = ops.rbegin(); op != ops.rend() && name != input; ++op) {
      if (op->outputs.size() != 1 || op->outputs[0].name != name) continue;
      auto x = op->inputs.find("x");
      if (op->type != "identity" || x == op->inputs.end() || x->second.size() != 1 || x->second[0].value) return false;
      name = x->second[0].name;
    }
    return name == input;
  }

  // LayerContext
  const nn::NeuralNetworkLayer& layer() const override { return *layer_; }
  const std::string& params() const override { return *params_; }
  bool rank5_layout() const override { return rank5_; }
  const Value& input(int index) const override {
    require(index >= 0 && index < static_cast<int>(inputs_.size()), "has no input ", index);
    return inputs_[index];
  }

  std::vector<Value> emit(const std::string& op_type, const OpInputs& inputs,
                          const std::vector<ir::ValueType>& output_types) override {
    ir::Operation op;
    op.type = op_type;
    op.name = layer_->name();
    for (const auto& [param, values] : inputs)
      for (const Value& value : values) op.inputs[param].push_back({value.name, value.constant});
    std::vector<Value> out;
    for (const ir::ValueType& type : output_types) {
      std::string name;
      do name = layer_->name() + "#" + std::to_string(fresh_++);
      while (reserved_.count(name));
      reserved_.insert(name);
      op.outputs.push_back({name, type});
      out.push_back({name, nullptr, type});
    }
    ops_.push_back(std::move(op));
    return out;
  }

  void set_output(int index, const Value& value) override {
    require(index >= 0 && index < layer_->output_size() && !outputs_set_[index], "defines output ", index, " twice or out of range");
    outputs_set_[index] = true;
    define_blob(layer_->output(index), value);
  }

  // The last definition of a blob of the outer network carries the blob's name; the values a
  // nested network gives its blobs live inside blocks and take fresh names.
  void define_blob(const std::string& blob, const Value& value) override {
    std::string target;
    if (depth_ > 0) {
      target = fresh_name();
    } else {
      const int left = --definitions_left_[blob];
      target = left == 0 ? blob : blob + "@" + std::to_string(left);
    }
    bool renamed = false;
    if (!value.name.empty())
      for (auto& op : ops_)
        for (auto& output : op.outputs)
          if (output.name == value.name) {
            output.name = target;
            renamed = true;
          }
    if (renamed) {
      for (auto& op : ops_)
        for (auto& [param, bindings] : op.inputs)
          for (auto& binding : bindings)
            if (binding.name == value.name) binding.name = target;
    } else {
      ir::Operation copy;
      copy.type = "identity";
      copy.name = layer_->name();
      copy.inputs["x"].push_back({value.name, value.constant});
      copy.outputs.push_back({target, value.type});
      ops_.push_back(std::move(copy));
    }
    pending_.emplace_back(blob, Value{target, nullptr, value.type});
  }

  NestedNetwork translate_network(const nn::NeuralNetwork& network, const std::map<std::string, Value>& bindings,
                                  const std::string& where) override {
    require(depth_ < 16, "nests control-flow layers more than 16 deep");
    // The enclosing layer's state, restored when the nested layers are done.
    const nn::NeuralNetworkLayer* layer = layer_;
    const std::string* params = params_;
    std::vector<Value> inputs = inputs_;
    std::vector<ir::Operation> ops = std::move(ops_);
    auto pending = std::move(pending_);
    std::vector<bool> outputs_set = outputs_set_;
    const auto blobs = blobs_;
    const auto hidden = hidden_;
    for (const auto& [blob, value] : bindings) {
      blobs_[blob] = value;
      hidden_.erase(blob);
    }
    ++depth_;
    NestedNetwork out;
    auto restore = [&] {
      --depth_;
      layer_ = layer;
      params_ = params;
      inputs_ = std::move(inputs);
      ops_ = std::move(ops);
      pending_ = std::move(pending);
      outputs_set_ = std::move(outputs_set);
      blobs_ = blobs;
      hidden_ = hidden;
    };
    try {
      std::set<std::string> written;
      for (int i = 0; i < network.layers_size(); ++i) {
        const auto& nested = network.layers(i);
        if (i > 0 && written.count(kLoopExitBlob)) {
          // An earlier layer may have ended the iteration (loopBreak, loopContinue).
          const nn::NeuralNetworkLayer rest = rest_of_body(network, i, network.layers(i - 1).name());
          if (!translate_into(rest, out.ops)) refuse("the layers of its ", where, " after '", network.layers(i - 1).name(), "' read a blob made by a layer that cannot run");
          collect_written(rest, written);
          break;
        }
        const std::string label = "layer '" + nested.name() + "' (" + kind_name(layer_kind(nested).field) + ") of its " + where;
        try {
          if (!translate_into(nested, out.ops)) refuse(label, " reads a blob made by a layer that cannot run");
        } catch (const LayerRefused& refused) {
          if (refused.reason.rfind("layer '", 0) == 0) throw;
          refuse(label, ": ", refused.reason);
        }
        collect_written(nested, written);
      }
      for (const auto& blob : written) {
        if (auto reason = hidden_.find(blob); reason != hidden_.end()) {
          out.hidden.emplace(blob, reason->second);
          continue;
        }
        auto value = blobs_.find(blob);
        require(value != blobs_.end() && value->second, "its ", where, " leaves blob '", blob, "' undefined");
        out.written.emplace(blob, *value->second);
      }
    } catch (...) {
      restore();
      throw;
    }
    restore();
    return out;
  }

  std::optional<Value> blob(const std::string& name) const override {
    if (hidden_.count(name)) return std::nullopt;
    return blob_value(name);
  }

  std::vector<std::string> blobs_written(const nn::NeuralNetwork& network) const override {
    std::set<std::string> out;
    for (const auto& layer : network.layers()) collect_written(layer, out);
    return {out.begin(), out.end()};
  }

  std::string fresh_name() override {
    std::string name;
    do name = layer_->name() + "#" + std::to_string(fresh_++);
    while (reserved_.count(name));
    reserved_.insert(name);
    return name;
  }

  void emit_op(ir::Operation op) override { ops_.push_back(std::move(op)); }

  void hide_blob(const std::string& blob, const std::string& reason) override {
    if (depth_ == 0) --definitions_left_[blob];
    hidden_[blob] = reason;
  }

 private:
  // An op outside any layer: the framing of inputs and outputs, an input's preprocessing.
  Value entry_op(const char* type, const OpInputs& inputs, const ir::ValueType& out, const std::string& name) {
    ir::Operation op;
    op.type = type;
    for (const auto& [param, values] : inputs)
      for (const Value& value : values) op.inputs[param].push_back({value.name, value.constant});
    op.outputs.push_back({name, out});
    function_.block.operations.push_back(std::move(op));
    reserved_.insert(name);
    return Value{name, nullptr, out};
  }

  Value framing_op(const char* type, const Value& x, const std::vector<int64_t>& axes, const ir::ValueType& out,
                   const std::string& name) {
    return entry_op(type, {{"x", {x}}, {"axes", {int_vector(axes)}}}, out, name);
  }

  // The layer graph computes in fp32: a double input is narrowed on entry, as Core ML does,
  // and a GRAYSCALE_FLOAT16 image widened.
  Value cast_to_fp32(const Value& x) {
    ir::ValueType fp32 = x.type;
    fp32.dtype = DType::Float32;
    return entry_op("cast", {{"x", {x}}, {"dtype", {string_scalar("fp32")}}}, fp32, x.name + "#fp32");
  }

  // Renames a value of the function already built, where it is made and wherever it is read.
  void rename_aside(const std::string& name, const std::string& aside) {
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

  void define_unknown(const std::string& blob) {
    if (depth_ == 0) --definitions_left_[blob];
    blobs_[blob] = std::nullopt;
  }

  ir::Function& function_;
  bool sequence_unknown_ = false;
  bool rank5_ = false;
  bool image_rank5_ = true;
  std::map<std::string, int> definitions_left_;
  std::set<std::string> reserved_;                        // every blob name, and fresh names given out
  std::map<std::string, std::optional<Value>> blobs_;     // nullopt: made by a layer that cannot run
  std::map<std::string, std::string> hidden_;             // blobs later layers may not read, and why
  int depth_ = 0;                                         // how many control-flow layers enclose the layer
  // The layer being translated.
  const nn::NeuralNetworkLayer* layer_ = nullptr;
  const std::string* params_ = nullptr;
  std::vector<Value> inputs_;
  std::vector<ir::Operation> ops_;                            // added to the function on success
  std::vector<std::pair<std::string, Value>> pending_;       // blob definitions made on success
  std::vector<bool> outputs_set_;
  int fresh_ = 0;
};

// The program input type of a float32 multi-array feature; flexible dims are unknown (-1).
ir::ValueType input_type(const FeatureDescription& feature) {
  if (feature.kind != FeatureKind::MultiArray) refuse("input '", feature.name, "' is a ", feature_kind_name(feature.kind),
                                                  "; this build runs neuralNetwork models on multi-array and image inputs only");
  if (feature.dtype != DType::Float32 && feature.dtype != DType::Float64)
    refuse("input '", feature.name, "' is ", dtype_name(feature.dtype), "; this build runs neuralNetwork models on float32 and double inputs only");
  if (feature.shape.empty()) refuse("input '", feature.name, "' declares no shape");
  std::vector<int64_t> dims(feature.shape.begin(), feature.shape.end());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i < feature.shape_range.size() && feature.shape_range[i].first != feature.shape_range[i].second) dims[i] = -1;
    for (const Shape& shape : feature.enumerated_shapes)
      if (shape.size() != dims.size() || shape[i] != feature.shape[i]) dims[i] = -1;
  }
  return tensor_type(feature.dtype, std::move(dims));
}

// The outputs a classifier's `classify` op defines (its label and probabilities features).
struct ClassifierOutputs {
  std::string label, probabilities;
};

// Reads the classifier's labels and probabilities blob and adds its `classify` op. The label
// and dictionary outputs are the description's predicted feature and probabilities names, or
// else its outputs of kind int64/string and dictionary (as for the classic classifiers,
// src/format/classic/predictor.cc).
ClassifierOutputs classifier_outputs(const std::string& serialized, const nn::NeuralNetwork& network,
                                     const FunctionDescription& description, Translator& translator) {
  nn::NeuralNetworkClassifierHead head;
  require(head.ParseFromString(serialized), "the neuralNetworkClassifier message does not parse");
  std::shared_ptr<ir::ConstValue> classes = std::make_shared<ir::ConstValue>();
  DType label_dtype = DType::String;
  int64_t count = 0;
  if (head.has_int64classlabels()) {
    const auto& labels = head.int64classlabels().vector();
    count = labels.size();
    label_dtype = DType::Int64;
    classes->type = tensor_type(DType::Int64, {count});
    classes->tensor = Tensor::empty(DType::Int64, {count});
    std::copy(labels.begin(), labels.end(), classes->tensor.ptr<int64_t>());
  } else if (head.has_stringclasslabels()) {
    const auto& labels = head.stringclasslabels().vector();
    count = labels.size();
    classes->type = tensor_type(DType::String, {count});
    classes->tensor = Tensor::empty(DType::String, {count});
    classes->strings.assign(labels.begin(), labels.end());
  }
  require(count > 0, "the classifier has no class labels");

  ClassifierOutputs out{description.predicted_feature_name, description.predicted_probabilities_name};
  for (const auto& feature : description.outputs) {
    if (out.label.empty() && (feature.kind == FeatureKind::Int64 || feature.kind == FeatureKind::String))
      out.label = feature.name;
    if (out.probabilities.empty() && feature.kind == FeatureKind::Dictionary) out.probabilities = feature.name;
  }
  require(!out.label.empty(), "the description names no predicted label output");
  bool label_declared = false;
  for (const auto& feature : description.outputs) {
    if (feature.name == out.label) {
      label_declared = true;
      require(feature.kind == (label_dtype == DType::Int64 ? FeatureKind::Int64 : FeatureKind::String), "output '",
              feature.name, "' is a ", feature_kind_name(feature.kind), " feature but the class labels are ",
              label_dtype == DType::Int64 ? "int64" : "strings");
    } else if (feature.name == out.probabilities) {
      require(feature.kind == FeatureKind::Dictionary, "output '", feature.name, "' is a ",
              feature_kind_name(feature.kind), " feature; class probabilities are a dictionary");
    }
  }
  require(label_declared, "the description has no output '", out.label, "'");
  // With no probabilities output declared, the dictionary is still made, under a name of its own.
  if (out.probabilities.empty()) out.probabilities = out.label + "#probabilities";

  // An empty labelProbabilityLayerName means the network's one dangling output blob, as Core
  // ML reads models written before the field existed.
  std::string blob = head.labelprobabilitylayername();
  if (blob.empty()) {
    const std::vector<std::string> unread = translator.unread_blobs(network);
    require(unread.size() == 1, "labelProbabilityLayerName is empty and the network has ", unread.size(),
            " output blobs, so which holds the class probabilities is not known");
    blob = unread.front();
  }
  std::optional<Value> probabilities = translator.blob_value(blob);
  require(probabilities.has_value(), "labelProbabilityLayerName names blob '", blob, "', which no layer produces");
  const ir::ValueType& type = probabilities->type;
  if (type.is_static()) {
    int64_t values = 1;
    for (int64_t d : type.dims) values *= d;
    require(values == count, "the probabilities blob '", blob, "' ", type.str(), " holds ", values, " values for ",
            count, " class labels");
  }
  translator.add_classify(*probabilities, classes, label_dtype, out.label, out.probabilities);
  return out;
}

}  // namespace

namespace {

NeuralNetworkReading translate_network(const std::string& serialized, const nn::NeuralNetwork& network,
                                       const FunctionDescription& description, NetworkRole role,
                                       bool sequence_unknown) {
  NeuralNetworkReading out;
  for (const auto& layer : network.layers())
    out.layers.push_back({kind_name(layer_kind(layer).field), layer.name(), layer.output_size() ? layer.output(0) : "", ""});

  ir::Function function;
  function.name = "main";
  function.opset = "CoreML5";  // the translated ops mean the same in every opset; take the first
  function.ios_version = ir::ios_version_of_opset(function.opset);
  bool has_image_inputs = false;
  for (const FeatureDescription& feature : description.inputs) has_image_inputs |= feature.kind == FeatureKind::Image;
  Translator translator(network, has_image_inputs, function, sequence_unknown);
  std::map<std::string, ImagePreprocessing> preprocessing;
  try {
    preprocessing = read_image_preprocessing(network, description);
    if (has_image_inputs && network.imageinputshapemapping() == nn::RANK4_IMAGE_MAPPING &&
        network.arrayinputshapemapping() != nn::EXACT_ARRAY_MAPPING)
      for (const FeatureDescription& feature : description.inputs)
        require(feature.kind != FeatureKind::MultiArray, "multi-array input '", feature.name,
                "' uses the rank-5 array mapping, which RANK4_IMAGE_MAPPING does not allow beside it");
  } catch (const LayerRefused& refused) {
    out.problem = refused.reason;
  }
  for (const FeatureDescription& feature : description.inputs) {
    try {
      if (!out.problem.empty()) {
        translator.declare_input(feature.name, std::nullopt);
      } else if (feature.kind == FeatureKind::Image) {
        auto pre = preprocessing.find(feature.name);
        translator.declare_image_input(feature.name, image_input_type(feature),
                                       pre == preprocessing.end() ? nullptr : &pre->second);
      } else {
        translator.declare_input(feature.name, input_type(feature));
      }
    } catch (const LayerRefused& refused) {
      out.problem = refused.reason;
      translator.declare_input(feature.name, std::nullopt);
    }
  }

  bool translated = out.problem.empty();
  for (int i = 0; i < network.layers_size(); ++i) {
    try {
      translated = translator.translate(network.layers(i)) && translated;
    } catch (const LayerRefused& refused) {
      out.layers[i].problem = refused.reason;
      translated = false;
    }
  }
  if (!translated) return out;
  std::optional<ClassifierOutputs> classifier;
  if (role == NetworkRole::Classifier) {
    try {
      classifier = classifier_outputs(serialized, network, description, translator);
    } catch (const LayerRefused& refused) {
      out.problem = refused.reason;
      return out;
    }
  }
  for (const FeatureDescription& feature : description.outputs) {
    if (classifier && (feature.name == classifier->label || feature.name == classifier->probabilities)) {
      function.block.outputs.push_back(feature.name);
      continue;
    }
    std::optional<std::string> value;
    try {
      value = feature.kind == FeatureKind::Image ? translator.image_output_value(feature.name, feature)
                                                 : translator.output_value(feature.name, feature);
    } catch (const LayerRefused& refused) {
      out.problem = refused.reason;
      return out;
    }
    if (!value) {
      out.problem = "output '" + feature.name + "' is not produced by any layer";
      return out;
    }
    function.block.outputs.push_back(*value);
  }
  out.program.functions.emplace(function.name, std::move(function));
  return out;
}

}  // namespace

// In the rank-5 layout the first attempt frames each array input as [1, 1, C, H, W]: Seq and
// Batch 1, as the description's [C, H, W] (or [C]) says. Core ML also takes arrays fed as
// [Seq, Batch, C, H, W] (NeuralNetwork.proto, RANK5_ARRAY_MAPPING), and some networks only
// make sense with a longer sequence (an innerProduct sized for Seq x C values after a permute
// and flatten, say), so their layers refuse Seq 1. Such a network is translated again with Seq
// unknown until prediction; it runs when every layer then translates, with Batch 1.
NeuralNetworkReading read_neural_network(const std::string& serialized, const FunctionDescription& description,
                                         NetworkRole role) {
  nn::NeuralNetwork network;
  COREMLRT_CHECK(network.ParseFromString(serialized), "the neuralNetwork message does not parse");
  NeuralNetworkReading first = translate_network(serialized, network, description, role, false);
  const bool rank5 = network.arrayinputshapemapping() != nn::EXACT_ARRAY_MAPPING;
  bool array_inputs = false;
  for (const FeatureDescription& feature : description.inputs) array_inputs |= feature.kind == FeatureKind::MultiArray;
  bool layer_refused = false;
  for (const NetworkLayer& layer : first.layers) layer_refused |= !layer.problem.empty();
  if (!first.program.functions.empty() || !first.problem.empty() || !rank5 || !array_inputs || !layer_refused)
    return first;
  NeuralNetworkReading second = translate_network(serialized, network, description, role, true);
  return second.program.functions.empty() ? first : second;
}

}  // namespace coremlrt::format
