#include "coremlrt/structure.h"

#include <map>
#include <set>

#include "coremlrt/error.h"
#include "format/model_kinds.h"
#include "format/spec_reader.h"
#include "ops/kernel.h"
#include "ops/op_cost.h"

namespace coremlrt {

namespace {

// The values visible where an op is read: types by name, and the values of const ops.
struct Scope {
  std::map<std::string, const ir::ValueType*> types;
  std::map<std::string, const ir::ConstValue*> constants;
};

// An op's parameters as its cost reads them (ops/op_cost.h), from the program alone.
class StructureCostReader final : public ops::CostReader {
 public:
  StructureCostReader(const ir::Operation& op, const Scope& scope) : op_(op), scope_(scope) {}
  const ir::Operation& op() const override { return op_; }
  const ir::ValueType* type(const std::string& param, size_t index = 0) const override {
    const ir::Binding* b = binding(param, index);
    if (!b) return nullptr;
    if (b->value) return &b->value->type;
    auto it = scope_.types.find(b->name);
    return it == scope_.types.end() ? nullptr : it->second;
  }
  const ir::ConstValue* constant(const std::string& param) const override {
    const ir::Binding* b = binding(param, 0);
    if (!b) return nullptr;
    if (b->value) return b->value.get();
    auto it = scope_.constants.find(b->name);
    return it == scope_.constants.end() ? nullptr : it->second;
  }

 private:
  const ir::Binding* binding(const std::string& param, size_t index) const {
    auto it = op_.inputs.find(param);
    return it == op_.inputs.end() || index >= it->second.size() ? nullptr : &it->second[index];
  }
  const ir::Operation& op_;
  const Scope& scope_;
};

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

// `scope` holds the values visible in the enclosing blocks; a nested block sees them too.
StructureBlock block_structure(const ir::Block& block, int ios_version, Scope scope) {
  StructureBlock out;
  out.inputs = named_values(block.inputs);
  out.output_names = block.outputs;
  for (const ir::NamedValue& input : block.inputs) scope.types[input.name] = &input.type;
  for (const ir::Operation& op : block.operations) {
    for (const ir::NamedValue& output : op.outputs) scope.types[output.name] = &output.type;
    if (op.type == "const" && op.outputs.size() == 1)
      if (auto val = op.attributes.find("val"); val != op.attributes.end())
        scope.constants[op.outputs[0].name] = val->second.get();
    StructureOperation o;
    o.type = op.type;
    o.name = op.name;
    const StructureCostReader cost(op, scope);
    const ops::KernelRegistry::Entry* entry = ops::KernelRegistry::cpu().find_entry(op.type, ios_version);
    o.evaluated_at_load = op.type == "const" || (entry && entry->traits.evaluated_at_load);
    o.macs = ops::op_macs(cost, ios_version);
    o.elements = ops::largest_operand(cost);
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
    for (const ir::Block& nested : op.blocks) o.blocks.push_back(block_structure(nested, ios_version, scope));
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
    Scope scope;
    for (const ir::NamedValue& input : function.inputs) scope.types[input.name] = &input.type;
    f.block = block_structure(function.block, function.ios_version, std::move(scope));
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
