#pragma once
// The typed program: functions -> blocks -> operations -> named values. These are our own
// structs, filled by format/ from the protobuf and free of protobuf and of kernels.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "coremlrt/tensor.h"
#include "ir/packed.h"

namespace coremlrt::ir {

enum class TypeKind { Tensor, List, Tuple, Dictionary, State };

// The type of a value. Tensor dims are -1 where unknown (symbolic); rank is -1 when the
// rank itself is unknown. A State wraps its tensor type in `element`.
struct ValueType {
  TypeKind kind = TypeKind::Tensor;
  DType dtype = DType::Float32;
  int64_t rank = 0;
  std::vector<int64_t> dims;
  std::shared_ptr<ValueType> element;  // list element type or state's wrapped type
  std::vector<ValueType> members;      // tuple member types

  bool is_static() const;
  std::string str() const;  // "tensor<fp16, [1, ?, 64]>"
};

// A compile-time value: a tensor (strings are kept aside in `strings`) or a list/tuple
// of values. A tensor stored compressed (a sub-byte blob, or the result of a constexpr_* op
// that the planner keeps packed: src/runtime/plan.cc) has `packed` set; its `tensor` then has
// the dtype and shape of the values but no storage (defined() is false), and readers that need
// the values decode it (src/ops/packed_weight.h).
struct ConstValue {
  ValueType type;
  Tensor tensor;
  std::vector<std::string> strings;  // for string tensors
  std::vector<ConstValue> items;     // for lists, tuples and dictionaries (key, value, ...)
  std::shared_ptr<const PackedTensor> packed;
};

struct NamedValue {
  std::string name;
  ValueType type;
};

// One binding of an argument: either the name of a visible value or an inline constant.
struct Binding {
  std::string name;
  std::shared_ptr<const ConstValue> value;
};

struct Block;

struct Operation {
  std::string type;
  std::string name;  // the op's "name" attribute (may be empty)
  std::map<std::string, std::vector<Binding>> inputs;
  std::vector<NamedValue> outputs;
  std::vector<Block> blocks;
  std::map<std::string, std::shared_ptr<const ConstValue>> attributes;

  // "op 'linear_0' (linear) producing 'var_5'": how errors name an operation.
  std::string describe() const;
};

struct Block {
  std::vector<NamedValue> inputs;
  std::vector<std::string> outputs;
  std::vector<Operation> operations;
};

struct Function {
  std::string name;
  std::string opset;    // "CoreML5" .. "CoreML9"
  int ios_version = 0;  // 15 .. 19, derived from opset
  std::vector<NamedValue> inputs;
  Block block;
};

struct Program {
  std::map<std::string, Function> functions;
};

// A tensor type of known dims.
ValueType tensor_type(DType dtype, std::vector<int64_t> dims);

// A tensor constant of `dims` holding `count` values of `dtype`'s size copied from `values`
// (the format readers' inline constants: src/format/classic/predictor.cc,
// src/format/neural_network/values.cc); fails when count is not the shape's element count.
std::shared_ptr<ConstValue> make_constant(DType dtype, const void* values, size_t count, std::vector<int64_t> dims);

template <class T>
std::shared_ptr<ConstValue> make_constant(DType dtype, const std::vector<T>& values, std::vector<int64_t> dims) {
  static_assert(std::is_trivially_copyable_v<T>);
  return make_constant(dtype, values.data(), values.size(), std::move(dims));
}

// Maps "CoreML5".."CoreML9" to iOS opset versions 15..19 (0 when unknown).
int ios_version_of_opset(const std::string& opset);

// Structural checks at load: names defined before use, unique within scope, outputs exist.
void validate_function(const Function& function);

}  // namespace coremlrt::ir
