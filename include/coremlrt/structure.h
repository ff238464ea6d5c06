#pragma once
// A model's structure as Core ML's MLModelStructure describes it: an ML program's functions,
// blocks and operations (with their value types), or a neuralNetwork's layers. Read without
// planning, so it works on models Model::load refuses; the compute plan (coremltools'
// MLComputePlan, `coremlrt info --plan`) is built on it.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coremlrt/tensor.h"

namespace coremlrt {

struct StructureValueType {
  std::string text;  // "tensor<fp16, [1, ?, 64]>", "state<tensor<fp16, [2]>>", "list<...>"
  bool is_tensor = false;
  DType dtype = DType::Float32;
  int64_t rank = 0;           // -1: unknown rank
  std::vector<int64_t> dims;  // -1: unknown dimension
};

struct StructureNamedValue {
  std::string name;
  StructureValueType type;
};

// One binding of an argument: a visible value's name, or an inline constant (`name` empty).
struct StructureBinding {
  std::string name;
  bool is_constant = false;
  StructureValueType constant_type;
};

struct StructureBlock;

struct StructureOperation {
  std::string type;
  std::string name;  // the op's "name" attribute (may be empty)
  std::map<std::string, std::vector<StructureBinding>> inputs;
  std::vector<StructureNamedValue> outputs;
  std::vector<StructureBlock> blocks;
  // The op's work, from the cost its kernel's registry entry declares and the declared types (a
  // dim known only at prediction counting as 16; src/ops/op_cost.h), the same figures the
  // backends' cost rule reads: multiply-adds (0 for ops without matrix work), the elements of
  // its largest input or output, and whether it runs once, at load (const and constexpr_* ops).
  double macs = 0;
  double elements = 0;
  bool evaluated_at_load = false;
};

struct StructureBlock {
  std::vector<StructureNamedValue> inputs;
  std::vector<StructureOperation> operations;
  std::vector<std::string> output_names;
};

struct StructureFunction {
  std::string name;
  std::string opset;
  std::vector<StructureNamedValue> inputs;
  StructureBlock block;
};

struct StructureLayer {
  std::string type;  // the schema's layer kind: "innerProduct", "activation", ...
  std::string name;
  std::vector<std::string> output_names;
};

struct StructureSubModel;

struct ModelStructure {
  std::string model_type;    // "mlProgram", "neuralNetwork", ...
  std::string model_family;  // ModelDescription::model_family: "mlProgram", "neuralNetwork", "pipeline", ...
  std::vector<StructureFunction> functions;  // ML programs, in name order
  std::vector<StructureLayer> layers;        // neuralNetwork models
  // Pipelines: each stage by the pipeline's name for it, in order. Classic models (GLMs, trees,
  // feature engineering, ...) have none of the three: Core ML describes no structure for them.
  std::vector<StructureSubModel> sub_models;
};

struct StructureSubModel {
  std::string name;
  ModelStructure structure;
};

// Throws Error for files that are not models (and for pipelines compiled by Apple's compiler,
// whose stages this build does not read).
ModelStructure read_model_structure(const std::string& path);

}  // namespace coremlrt
