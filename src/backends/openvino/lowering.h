#pragma once
// Lowering MIL ops to OpenVINO nodes: the vocabulary shared by the per-family files of this
// folder, each named as the src/ops file of the same ops (elementwise_binary.cc, activation.cc,
// conv.cc, ...: docs/guide/adding-an-op.md). Only files of src/backends/openvino/ include this
// header, so OpenVINO's types stay here.
//
// Each op type has one OpLowering: `check` says, from the op's parameters and types alone,
// whether the lowering gives Core ML's semantics for them (a Verdict: claimed, or why not); `lower`
// builds the op's outputs. Both see the op through an OpReader. Whatever `lower` builds is then
// checked against the op's declared output types (backend.cc), so a lowering whose shapes or
// element types drift from the program fails at compile time, and the region stays on our
// kernels.
#include <openvino/core/node.hpp>
#include <openvino/core/type/element_type.hpp>

#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "ir/param_reader.h"

namespace coremlrt::backends::openvino {

using Value = ov::Output<ov::Node>;

// The OpenVINO element type of a dtype; nullopt when OpenVINO has none we use.
std::optional<ov::element::Type> element_type(DType dtype);

// The float dtypes of MIL's op tables (T = F), the only ones most lowerings accept.
inline bool fp16_or_fp32(DType d) { return d == DType::Float16 || d == DType::Float32; }

// Reads one op's parameters: types, constants and (while lowering) graph values; constants as
// plain values through ir::ParamReader (src/ir/param_reader.h), as our kernels read them.
class OpReader : public ir::ParamReader {
 public:
  OpReader(const ir::Operation& op, const ValueInfo& values, int ios_version)
      : op_(op), values_(values), ios_version_(ios_version) {}

  const ir::Operation& op() const { return op_; }
  // The opset of the op's function (15 for iOS15, ...): some ops' rules changed between opsets.
  int ios_version() const { return ios_version_; }
  bool has(const std::string& param) const override;
  // Number of bindings of a (variadic) parameter; 0 when absent.
  size_t count(const std::string& param) const;
  const ir::ValueType& type(const std::string& param, size_t index = 0) const;
  const ir::ValueType& output_type(size_t index) const { return op_.outputs.at(index).type; }
  // The parameter's value when known at load (inline, a const op or a folded op); else nullptr.
  const ir::ConstValue* constant(const std::string& param, size_t index = 0) const;
  bool is_constant(const std::string& param) const;

 protected:
  const ir::ConstValue* known_value(const std::string& param) const override { return constant(param); }
  [[noreturn]] void param_error(const std::string& message) const override;

  const ir::Binding& binding(const std::string& param, size_t index) const;
  const ir::Operation& op_;
  const ValueInfo& values_;
  const int ios_version_;
};

// While lowering: graph values for the op's parameters.
class Lowerer : public OpReader {
 public:
  using OpReader::OpReader;
  // The value bound to `param` (a region input, an earlier op's output, or a constant).
  virtual Value input(const std::string& param, size_t index = 0) = 0;
  // The constant bound to `param` in the element type it is stored in (an fp16 view where the
  // region computes fp16 values in fp32); input() for any other value.
  virtual Value stored(const std::string& param) = 0;
  // A boolean scalar the region's results depend on: when it is false at run time, the region's
  // results are dropped and its ops run on our kernels instead, which then decide (report an index
  // out of range, say). For facts OpenVINO cannot report itself.
  virtual void require(const Value& condition) = 0;
  // The element type values of `dtype` have inside the region: fp16 values are computed in
  // fp32 unless the caller chose the low-precision mode (docs/design/architecture.md, law 6).
  virtual ov::element::Type compute_type(DType dtype) const = 0;
  // A constant node of `type` with the given values (scalars for broadcasting, shapes, axes).
  static Value constant_of(ov::element::Type type, const std::vector<int64_t>& shape, const std::vector<double>& data);
  static Value i64s(const std::vector<int64_t>& values);  // a 1-D int64 constant
  static Value i64(int64_t value);                          // a scalar int64 constant (axes)
  static Value scalar_like(const Value& like, double value);  // a scalar of `like`'s element type
};

// How packed constants (compressed weights, src/ir/packed.h; packed.cc) bound to an op's
// parameters reach OpenVINO.
enum class PackedInputs {
  kRefused,       // not at all: the op stays on our kernels, which read them packed
  kCompressed,    // affine forms as OpenVINO's weight-decompression pattern (packed_decompresses),
                  // which its matrix kernels read compressed; other forms refused
  kDecoded,       // any form, decoded to a dense constant when the region is compiled (the op's
                  // OpenVINO kernels take no compressed weights)
};

struct OpLowering {
  std::function<Verdict(const OpReader&)> check;  // may be empty: every parameter set is fine
  std::function<std::vector<Value>(Lowerer&)> lower;
  // The lowering reads its values' ranks and dtypes, never their dims, so it also lowers values
  // whose dims are known only at prediction (a flexible input's): OpenVINO infers the shapes.
  // Set for whole families by lowerings() (lowering.cc), or by the entry itself.
  bool any_dims = false;
  PackedInputs packed = PackedInputs::kRefused;
  // With kDecoded: why, as `coremlrt info --plan` says it ("its convolutions take no compressed
  // weights").
  std::string decoded_because{};
};
using LoweringTable = std::map<std::string, OpLowering>;

// Pieces that several families' lowerings share.
Value add(const Value& a, const Value& b);
Value mul(const Value& a, const Value& b);
// A claim when `param` is fp16 or fp32, else a refusal saying so.
Verdict float_input(const OpReader& op, const char* param = "x");
// `v` in element type `type` (a Convert where it is another).
Value converted(const Value& v, ov::element::Type type);
// Every listed parameter that is present is a float of x's dtype (x being fp16 or fp32).
Verdict same_float_dtype(const OpReader& op, std::initializer_list<const char*> params);
// A unary op on float x that one OpenVINO op computes, or that `fn` writes from the lowered x.
template <class OvOp>
OpLowering unary() {
  return {[](const OpReader& op) { return float_input(op); },
          [](Lowerer& op) -> std::vector<Value> { return {std::make_shared<OvOp>(op.input("x"))}; }};
}
OpLowering unary_fn(std::function<Value(Lowerer&, const Value&)> fn);
// The dims the program declares for output `output`.
inline std::vector<int64_t> declared_dims(const OpReader& op, size_t output = 0) { return op.output_type(output).dims; }
// x reshaped to `dims` (a row-major regrouping).
Value reshape_to(const Value& x, const std::vector<int64_t>& dims);
inline int64_t normalized_axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// The window of a convolution or a pool (conv.cc, pool.cc).
struct Window {
  std::vector<int64_t> kernel, strides, dilations;
  std::vector<int64_t> pad_begin, pad_end;  // resolved explicit pads
};
// pad_type / pad of conv and the pools, resolved for x's spatial dims `in` (-1 for a dim known
// only at prediction, which "same" padding cannot be resolved for here) with the rules of our
// kernels (same: the odd pixel after; same_lower: before).
Verdict resolve_pads(const OpReader& op, const std::vector<int64_t>& in, Window& w);
// x's spatial dims (after [N, C]).
inline std::vector<int64_t> spatial(const ir::ValueType& x) { return std::vector<int64_t>(x.dims.begin() + 2, x.dims.end()); }

// Packed constants (compressed weights, src/ir/packed.h; packed.cc). Whether OpenVINO runs an op
// lowered by `lowering` with this packed input, or why not.
Verdict packed_support(const OpLowering& lowering, const ir::PackedTensor& packed);
// Whether the weight has a form OpenVINO's weight-decompression pattern reads (affine
// int8/uint8/int4/uint4 codes, per channel or per block); others (a palette, a sparse weight)
// reach OpenVINO decoded.
bool packed_decompresses(const ir::PackedTensor& packed);
// The constant's values as graph nodes of element type `compute`, in OpenVINO's
// weight-decompression pattern (its CPU plugin keeps such weights compressed in its matrix
// kernels); only for packed_decompresses weights. `kept` receives the tensors the nodes view,
// which must outlive the compiled model.
Value packed_constant(const ir::PackedTensor& packed, ov::element::Type compute, std::vector<Tensor>& kept);

// The whole table, filled once by the families below.
const LoweringTable& lowerings();

// Op types of our kernel registry without a lowering, each with why (unlowered.cc).
using UnloweredReasons = std::map<std::string, std::string>;
const UnloweredReasons& unlowered_reasons();

void add_elementwise_binary_lowerings(LoweringTable& table);
void add_elementwise_unary_lowerings(LoweringTable& table);
void add_activation_lowerings(LoweringTable& table);
void add_reduction_lowerings(LoweringTable& table);
void add_linear_lowerings(LoweringTable& table);
void add_conv_lowerings(LoweringTable& table);
void add_pool_lowerings(LoweringTable& table);
void add_normalization_lowerings(LoweringTable& table);
void add_shape_lowerings(LoweringTable& table);
void add_slice_lowerings(LoweringTable& table);
void add_space_lowerings(LoweringTable& table);
void add_tensor_ops_lowerings(LoweringTable& table);
void add_gather_lowerings(LoweringTable& table);
void add_attention_lowerings(LoweringTable& table);
void add_misc_lowerings(LoweringTable& table);
void add_recurrent_lowerings(LoweringTable& table);

}  // namespace coremlrt::backends::openvino
