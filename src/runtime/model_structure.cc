#include "coremlrt/structure.h"

#include <set>

#include "coremlrt/error.h"
#include "format/model_kinds.h"
#include "format/spec_reader.h"

namespace coremlrt {

namespace {

StructureValueType value_type(const ir::ValueType& type) {
  StructureValueType out;
  out.text = type.str();
  out.is_tensor = type.kind == ir::TypeKind::Tensor;
  out.dtype = type.dtype;
  out.rank = type.rank;
  out.dims = type.dims;
  return out;
}

std::vector<StructureNamedValue> named_values(const std::vector<ir::NamedValue>& values) {
  std::vector<StructureNamedValue> out;
  for (const auto& v : values) out.push_back({v.name, value_type(v.type)});
  return out;
}

StructureBlock block_structure(const ir::Block& block) {
  StructureBlock out;
  out.inputs = named_values(block.inputs);
  out.output_names = block.outputs;
  for (const ir::Operation& op : block.operations) {
    StructureOperation o;
    o.type = op.type;
    o.name = op.name;
    for (const auto& [param, bindings] : op.inputs) {
      auto& list = o.inputs[param];
      for (const ir::Binding& b : bindings) {
        StructureBinding s;
        s.name = b.name;
        if (b.value) {
          s.is_constant = true;
          s.constant_type = value_type(b.value->type);
        }
        list.push_back(std::move(s));
      }
    }
    o.outputs = named_values(op.outputs);
    for (const ir::Block& nested : op.blocks) o.blocks.push_back(block_structure(nested));
    out.operations.push_back(std::move(o));
  }
  return out;
}

// The type Core ML's structure gives a neuralNetwork layer: its field name in the spec, except
// for the element-wise layers (add, multiply, average, max, min), which it reports as one
// "elementwise" type (MLModelStructureNeuralNetworkLayer.h's own example; coremltools'
// test/api/test_api_examples.py, test_neuralnetwork_structure, expects it for an add layer).
std::string core_ml_layer_type(const std::string& field) {
  static const std::set<std::string> kElementwise = {"add", "multiply", "average", "max", "min"};
  return kElementwise.count(field) ? "elementwise" : field;
}

// An ML program's functions or a neuralNetwork's layers; nothing for any other type.
void describe(const format::LoadedModel& loaded, const std::string& type, ModelStructure& out) {
  if (format::is_model_family(type, format::ModelFamily::NeuralNetwork)) {
    for (const auto& layer : loaded.network.layers) out.layers.push_back({core_ml_layer_type(layer.type), layer.name, {layer.output}});
    return;
  }
  if (!format::is_model_family(type, format::ModelFamily::MlProgram)) return;
  for (const auto& [name, function] : loaded.program.functions) {
    StructureFunction f;
    f.name = name;
    f.opset = function.opset;
    f.inputs = named_values(function.inputs);
    f.block = block_structure(function.block);
    out.functions.push_back(std::move(f));
  }
}

std::vector<StructureSubModel> stage_structures(const std::vector<format::PipelineStageModel>& stages) {
  std::vector<StructureSubModel> out;
  for (const format::PipelineStageModel& stage : stages) {
    ModelStructure s;
    s.model_type = stage.model.description.model_type;
    s.model_family = stage.model.description.model_family;
    describe(stage.model, s.model_type, s);
    s.sub_models = stage_structures(stage.stages);
    out.push_back({stage.name, std::move(s)});
  }
  return out;
}

}  // namespace

ModelStructure read_model_structure(const std::string& path) try {
  const format::ModelFiles files = format::locate_model(path);
  format::LoadedModel loaded = format::read_model(files);
  ModelStructure out;
  out.model_type = loaded.description.model_type;
  out.model_family = loaded.description.model_family;
  describe(loaded, out.model_type, out);
  if (format::is_model_family(out.model_type, format::ModelFamily::Pipeline))
    out.sub_models = stage_structures(format::read_pipeline_stages(files));
  return out;
} catch (...) {
  rethrow_as(ErrorKind::BadModel);  // what it reads is a model: coremlrt/error.h
}

}  // namespace coremlrt
