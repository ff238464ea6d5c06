// The layer loop of the neuralNetwork translator (translator.h): hands each layer to its kind's
// translator (layer_table.cc) through a LayerContext, and names the values so that a blob's last
// definition carries the blob's own name (the model's outputs refer to blobs by name).
#include "format/neural_network/translator.h"

#include "coremlrt/error.h"
#include "nn_control_flow.pb.h"

namespace coremlrt::format::neural_network {

Translator::Translator(const nn::NeuralNetwork& network, bool has_image_inputs, ir::Function& function, bool sequence_unknown)
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

bool Translator::translate_into(const nn::NeuralNetworkLayer& layer, std::vector<ir::Operation>& sink) {
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

bool Translator::copies_of_input(std::string name, const std::string& input) const {
  const auto& ops = function_.block.operations;
  for (auto op = ops.rbegin(); op != ops.rend() && name != input; ++op) {
    if (op->outputs.size() != 1 || op->outputs[0].name != name) continue;
    auto x = op->inputs.find("x");
    if (op->type != "identity" || x == op->inputs.end() || x->second.size() != 1 || x->second[0].value) return false;
    name = x->second[0].name;
  }
  return name == input;
}

std::vector<Value> Translator::emit(const std::string& op_type, const OpInputs& inputs,
                                    const std::vector<ir::ValueType>& output_types) {
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

void Translator::define_blob(const std::string& blob, const Value& value) {
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

LayerContext::NestedNetwork Translator::translate_network(const nn::NeuralNetwork& network,
                                                         const std::map<std::string, Value>& bindings,
                                                         const std::string& where) {
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

std::string Translator::fresh_name() {
  std::string name;
  do name = layer_->name() + "#" + std::to_string(fresh_++);
  while (reserved_.count(name));
  reserved_.insert(name);
  return name;
}

}  // namespace coremlrt::format::neural_network
