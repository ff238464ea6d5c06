#pragma once
// A model's typed program as read-only data: the program format/ reads every model type into
// (ML programs, neuralNetwork layers translated, classic models and pipelines spliced into one
// function), before any planning, with its constants as tensors. The ONNX exporter reads it
// (python/src/program_bindings.cc, python/coremlrt/onnx_export/); like inspect_model it works on
// models Model::load refuses. Tensors view the model's memory (its memory-mapped weight files)
// and keep it alive.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coremlrt/description.h"
#include "coremlrt/tensor.h"

namespace coremlrt {

enum class ProgramTypeKind { Tensor, List, Tuple, Dictionary, State };

// A value's type. Tensor dims are -1 where unknown; rank is -1 when the rank is unknown.
struct ProgramValueType {
  ProgramTypeKind kind = ProgramTypeKind::Tensor;
  DType dtype = DType::Float32;
  int64_t rank = 0;
  std::vector<int64_t> dims;
  std::string text;                                 // "tensor<fp16, [1, ?, 64]>"
  std::shared_ptr<const ProgramValueType> element;  // a list's element type, a state's tensor type
  std::vector<ProgramValueType> members;            // a tuple's member types
};

// A value known at load: a tensor (a compressed one decoded), the strings of a string tensor,
// or the items of a list, tuple or dictionary (key, value, ...).
struct ProgramConstant {
  ProgramValueType type;
  Tensor tensor;  // undefined for strings, lists, tuples and dictionaries
  std::vector<std::string> strings;
  std::vector<ProgramConstant> items;
};

struct ProgramNamedValue {
  std::string name;
  ProgramValueType type;
};

// One binding of an argument: the name of a visible value, or an inline constant (`value` set).
struct ProgramBinding {
  std::string name;
  std::shared_ptr<const ProgramConstant> value;
};

struct ProgramBlock;

struct ProgramOperation {
  std::string type;
  std::string name;         // the op's "name" attribute (may be empty)
  std::string description;  // "op 'linear_0' (linear) producing 'var_5'": how errors name it
  std::map<std::string, std::vector<ProgramBinding>> inputs;
  std::map<std::string, ProgramConstant> attributes;
  std::vector<ProgramNamedValue> outputs;
  std::vector<ProgramBlock> blocks;
};

struct ProgramBlock {
  std::vector<ProgramNamedValue> inputs;
  std::vector<std::string> outputs;
  std::vector<ProgramOperation> operations;
};

// A compressed weight the planner keeps packed (docs/design/compressed-weights.md), in parts,
// so that an exporter can write the same codes and scales.
struct PackedWeight {
  DType dtype = DType::Float32;  // of the values
  Shape shape;                   // of the dense tensor
  std::string map;               // how a code becomes a value: "identity", "lut", "shift_scale", "affine"
  std::string form;              // "int4, scale per block [1, 32], offset", ...
  Shape groups;                  // block grid: the block along dim d is shape[d] / groups[d] long
  DType codes_dtype = DType::UInt8;
  bool sparse = false;        // a mask says which elements are nonzero
  bool nonzero_only = false;  // the value is the vector of the nonzero elements
  // shift_scale and affine weights without a mask: the codes in `shape`, one element each
  // (int4 sign-extended); undefined otherwise.
  Tensor codes;
  Tensor scale;               // one per group; undefined without scales
  Tensor offset;              // one per group, one element each; undefined without offsets
  DType offset_dtype = DType::UInt8;
  std::function<Tensor()> decode;  // the dense values
};

// A value the planner knows at load beyond the const ops' own: an op's result computed from
// constants alone (folded), or a compressed weight kept packed.
struct KnownValue {
  std::string name;
  Tensor dense;                                // folded; undefined when packed
  std::shared_ptr<const PackedWeight> packed;  // kept packed; null when folded
};

struct ProgramFunction {
  std::string name;
  std::string opset;    // "CoreML5" .. "CoreML9"
  int ios_version = 0;  // 15 .. 19
  std::vector<ProgramNamedValue> inputs;
  ProgramBlock block;
  // With read_model_program's `known_values`: in the planner's value order (a name planned twice,
  // as inline constants are, appears twice; the later one stands).
  std::vector<KnownValue> known;
};

struct ModelProgram {
  ModelDescription description;
  std::string problem;          // why the model as a whole cannot run here; empty when it can
  std::string network_problem;  // a neuralNetwork's model-wide reason; empty otherwise
  std::map<std::string, ProgramFunction> functions;
};

// Throws Error for files that are not models, and for constants that do not decode.
ModelProgram read_model_program(const std::string& path, bool known_values);

}  // namespace coremlrt
