#pragma once
// The neuralNetwork translator's state while it walks a network (reader.cc): the values of the
// blobs, the names given out, and the LayerContext each layer's translator (layer_table.cc)
// sees. translator.cc has the layer loop, translator_edges.cc the model's inputs and outputs.
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coremlrt/description.h"
#include "format/neural_network/image_inputs.h"
#include "format/neural_network/layer_kinds.h"
#include "format/neural_network/layer_translator.h"

namespace coremlrt::format::neural_network {

class Translator final : public LayerContext {
 public:
  // `sequence_unknown`: in the rank-5 layout, array inputs take the blob [Seq, 1, C, H, W]
  // with Seq known only at prediction (read_neural_network's second attempt).
  Translator(const nn::NeuralNetwork& network, bool has_image_inputs, ir::Function& function, bool sequence_unknown);

  // An input without a type cannot run; layers reading it are still judged by their kind.
  // In the rank-5 layout a [C] or [C, H, W] array becomes the blob [1, 1, C, 1, 1] or
  // [1, 1, C, H, W] (the mapping NeuralNetwork.proto's arrayInputShapeMapping describes).
  // With sequence_unknown_ the program input itself is that rank-5 blob, [-1, 1, C, H, W]
  // (or [-1, 1, C, 1, 1]); the runtime views an array fed with the declared shape as Seq 1
  // (src/runtime/model.cc, bind_rank5_sequence).
  void declare_input(const std::string& name, std::optional<ir::ValueType> type);

  // An image input: the [1, C, H, W] array of image_inputs.h, in fp32, preprocessed
  // (y = scale * x + bias, or y = x - mean), and framed as the image mapping says:
  // RANK5_IMAGE_MAPPING adds the [Seq, Batch] axes ([1, 1, C, H, W]), RANK4_IMAGE_MAPPING
  // keeps [1, C, H, W] (NeuralNetwork.proto's imageInputShapeMapping).
  void declare_image_input(const std::string& name, const ir::ValueType& type, const ImagePreprocessing* pre);

  // The value a model output takes from its blob: in the rank-5 layout the blob's [Seq,
  // Batch] axes (and, for an output declared as [C], the H and W axes) are dropped, which
  // needs them to be 1; in the rank-generic layout, leading axes beyond the declared rank.
  std::optional<std::string> output_value(const std::string& blob, const FeatureDescription& feature);

  // The value an image output takes from its blob. Core ML makes the image from the blob's
  // last three axes [C, H, W] (C = 3 for RGB and BGR, 1 for grayscale; the leading axes must
  // be 1); the program output is the [1, C, H, W] array an image input arrives as
  // (image_inputs.h), fp16 for GRAYSCALE_FLOAT16, which python/coremlrt/model.py turns into
  // the image. A fixed-size image must have the blob's H and W as its size.
  std::optional<std::string> image_output_value(const std::string& blob, const FeatureDescription& feature);

  // The current value of a blob; nullopt when no input or layer made it, or its layer
  // could not run.
  std::optional<Value> blob_value(const std::string& blob) const {
    auto it = blobs_.find(blob);
    return it == blobs_.end() ? std::nullopt : it->second;
  }

  // The blobs some layer writes and no layer reads (the network's dangling outputs).
  std::vector<std::string> unread_blobs(const nn::NeuralNetwork& network) const;

  // Ends a classifier: classify(`probabilities`) defines the label output `label_name` and the
  // dictionary `probabilities_name`. A blob value already holding either name is renamed aside.
  void add_classify(const Value& probabilities, std::shared_ptr<const ir::ConstValue> classes, DType label_dtype,
                    const std::string& label_name, const std::string& probabilities_name);

  // Adds the layer's ops and returns true, or throws LayerRefused. A layer that reads the
  // output of a refused layer is judged by its kind alone and returns false.
  bool translate(const nn::NeuralNetworkLayer& layer) {
    return translate_into(layer, function_.block.operations);
  }

  bool translate_into(const nn::NeuralNetworkLayer& layer, std::vector<ir::Operation>& sink);


  // Whether the value `name` is the model input `input`, or a chain of copies (identity ops
  // of this function's block) of it.
  bool copies_of_input(std::string name, const std::string& input) const;

  // LayerContext
  const nn::NeuralNetworkLayer& layer() const override { return *layer_; }
  const std::string& params() const override { return *params_; }
  bool rank5_layout() const override { return rank5_; }
  const Value& input(int index) const override {
    require(index >= 0 && index < static_cast<int>(inputs_.size()), "has no input ", index);
    return inputs_[index];
  }

  std::vector<Value> emit(const std::string& op_type, const OpInputs& inputs,
                          const std::vector<ir::ValueType>& output_types) override;

  void set_output(int index, const Value& value) override {
    require(index >= 0 && index < layer_->output_size() && !outputs_set_[index], "defines output ", index, " twice or out of range");
    outputs_set_[index] = true;
    define_blob(layer_->output(index), value);
  }

  // The last definition of a blob of the outer network carries the blob's name; the values a
  // nested network gives its blobs live inside blocks and take fresh names.
  void define_blob(const std::string& blob, const Value& value) override;

  NestedNetwork translate_network(const nn::NeuralNetwork& network, const std::map<std::string, Value>& bindings,
                                  const std::string& where) override;

  std::optional<Value> blob(const std::string& name) const override {
    if (hidden_.count(name)) return std::nullopt;
    return blob_value(name);
  }

  std::vector<std::string> blobs_written(const nn::NeuralNetwork& network) const override {
    std::set<std::string> out;
    for (const auto& layer : network.layers()) collect_written(layer, out);
    return {out.begin(), out.end()};
  }

  std::string fresh_name() override;

  void emit_op(ir::Operation op) override { ops_.push_back(std::move(op)); }

  void hide_blob(const std::string& blob, const std::string& reason) override {
    if (depth_ == 0) --definitions_left_[blob];
    hidden_[blob] = reason;
  }

 private:
  // An op outside any layer: the framing of inputs and outputs, an input's preprocessing.
  Value entry_op(const char* type, const OpInputs& inputs, const ir::ValueType& out, const std::string& name);

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
  void rename_aside(const std::string& name, const std::string& aside);

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

}  // namespace coremlrt::format::neural_network
