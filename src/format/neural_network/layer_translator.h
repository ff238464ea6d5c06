#pragma once
// What a neuralNetwork layer translator sees: one layer of the legacy layer graph, the blobs
// it reads, and a way to add ops of the typed program (src/ir/program.h) that compute the
// blobs it writes. Each family of layer kinds lives in its own file of this folder and
// registers its translators in layer_table.cc, keyed by the layer kind's field number in the
// NeuralNetworkLayer message (the names are in layer_names.cc).
//
// A translator either adds ops whose meaning is exactly the layer's, or refuses the layer
// with a reason (refuse()); it never approximates. Parameters arrive as the serialized
// message of the layer kind, parsed with that kind's message from proto/nn_*.proto.
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "NeuralNetwork.pb.h"
#include "coremlrt/tensor.h"
#include "ir/program.h"

namespace coremlrt::format::neural_network {

namespace nn = CoreML::Specification::NN;

// expect_io's max_inputs for layers that take any number of inputs (concat, stack, ...).
constexpr int kManyInputs = 1 << 16;

// Thrown by translators: why this build cannot run the layer (or the model).
struct LayerRefused {
  std::string reason;
};

template <class... Args>
[[noreturn]] void refuse(const Args&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw LayerRefused{message.str()};
}

template <class... Args>
void require(bool condition, const Args&... parts) {
  if (!condition) refuse(parts...);
}

// A value of the program: its name, or an inline constant, and its type.
struct Value {
  std::string name;                               // empty for an inline constant
  std::shared_ptr<const ir::ConstValue> constant;  // set for an inline constant
  ir::ValueType type;
};

using ir::tensor_type;

// Inline constants.
Value float_tensor(std::vector<float> values, std::vector<int64_t> dims);
Value float_scalar(float value);
Value int_tensor(std::vector<int32_t> values, std::vector<int64_t> dims);
Value int_scalar(int32_t value);
Value int_vector(const std::vector<int64_t>& values);  // int32 [n]; refuses values out of range
Value bool_scalar(bool value);
Value string_scalar(const std::string& value);

// The type of a numpy-style broadcast of a and b (dtype of a); a size unknown on either side
// stays unknown unless the other side's size decides it. Refuses shapes that cannot broadcast.
ir::ValueType broadcast_type(const ir::ValueType& a, const ir::ValueType& b);

// Pseudo-blobs through which loopBreak and loopContinue (control_flow_layers.cc) tell the
// rest of their loop body to stop: 1 once the iteration ends early, and once the loop ends.
// They live only inside a loop body and are not visible after the loop layer.
inline constexpr char kLoopExitBlob[] = "#loop_exit";
inline constexpr char kLoopBreakBlob[] = "#loop_break";

class LayerContext;
// x (bool or int32) as the fp32 blob the layer graph carries: true and false become 1 and 0.
Value as_float_blob(LayerContext& layer, const Value& x);

// Weights as fp32 (the precision the layer graph computes in): fp32 values, fp16 values
// widened, or quantized values decoded (QuantizationParams in proto/NeuralNetwork.proto).
// `count` is how many the layer's parameters say there are; `what` names them in errors
// ("weights", "bias values"). Per-channel linear quantization gives one scale and bias per
// slice of the outermost axis, the output channels of every layer that reads weights
// through here.
std::vector<float> read_weights(const nn::WeightParams& weights, uint64_t count, const char* what);

// innerProduct and batchedMatmul with int8DynamicQuantize run as the op int8_dynamic_linear
// (src/ops/dynamic_quantization.cc states the run-time input quantization rule). These are
// its weight and weight_scale inputs: the [out, in] int8 codes of weights.int8RawValue and
// their one scale, and the layer's float bias when it has one (`bias` null otherwise: the
// specification asks for none, Core ML adds it, src/ops/dynamic_quantization.cc). Refuses
// every other form NeuralNetwork.proto's requirements for the flag rule out: weights not in
// int8RawValue (rawValue, floatValue or float16Value set), quantization other than linear with
// numberOfBits 8, one scale and no linear bias.
struct Int8DynamicWeights {
  Value weight;        // int8 [out, in]
  Value weight_scale;  // fp32 scalar
  std::optional<Value> bias;  // fp32 [out]
};
Int8DynamicWeights read_int8_dynamic_weights(const nn::WeightParams& weights, const nn::WeightParams* bias, int64_t in,
                                             int64_t out);

// The arguments of one op, by parameter name (a variadic parameter holds several values).
using OpInputs = std::vector<std::pair<std::string, std::vector<Value>>>;

class LayerContext {
 public:
  virtual ~LayerContext() = default;
  virtual const nn::NeuralNetworkLayer& layer() const = 0;
  // The serialized parameters of the layer kind (the bytes of its oneof member).
  virtual const std::string& params() const = 0;
  // True when arrays use the legacy rank-5 [Seq, Batch, C, H, W] blob layout.
  virtual bool rank5_layout() const = 0;

  template <class Params>
  Params parse_params() const {
    Params out;
    require(out.ParseFromString(params()), "its parameters do not parse");
    return out;
  }

  int input_count() const { return layer().input_size(); }
  int output_count() const { return layer().output_size(); }
  // Refuses unless the layer has [min_inputs, max_inputs] inputs and `outputs` outputs.
  void expect_io(int min_inputs, int max_inputs, int outputs) const;
  // The current value of input blob `index`.
  virtual const Value& input(int index) const = 0;

  // Adds an op with outputs of the given types and returns them, named freshly.
  virtual std::vector<Value> emit(const std::string& op_type, const OpInputs& inputs,
                                  const std::vector<ir::ValueType>& output_types) = 0;
  Value emit1(const std::string& op_type, const OpInputs& inputs, const ir::ValueType& output_type) {
    return emit(op_type, inputs, {output_type}).front();
  }
  // Makes `value` the new value of output blob `index`. A value the layer's own ops made is
  // renamed after the blob; any other (an input passed through) is given an identity op.
  virtual void set_output(int index, const Value& value) = 0;

  // Control flow over nested networks (control_flow_layers.cc). A nested network reads and
  // writes the enclosing network's blobs; its layers are translated into a separate list of
  // ops that becomes a block of a `cond` or `while_loop` op.
  struct NestedNetwork {
    std::vector<ir::Operation> ops;
    std::map<std::string, Value> written;  // each blob its layers write -> its last value
    // Blobs its layers write that later layers may not read (defined inside an inner loop's
    // iterations or by one branch only), and why.
    std::map<std::string, std::string> hidden;
  };
  // Translates `network` with `bindings` overriding blob values (block inputs, say); the
  // enclosing blobs are left as they were. `where` names the network in refusals ("ifBranch").
  virtual NestedNetwork translate_network(const nn::NeuralNetwork& network, const std::map<std::string, Value>& bindings,
                                          const std::string& where) = 0;
  // The current value of a blob; nullopt when no input or earlier layer made it.
  virtual std::optional<Value> blob(const std::string& name) const = 0;
  // Every blob the layers of `network` (and of networks nested in them) write.
  virtual std::vector<std::string> blobs_written(const nn::NeuralNetwork& network) const = 0;
  // A name no blob and no other value has.
  virtual std::string fresh_name() = 0;
  // Adds a fully built op (one with blocks) to the layer's ops.
  virtual void emit_op(ir::Operation op) = 0;
  // Makes `value`, made by this layer's ops, the new value of `blob` (one the layer's nested
  // networks write).
  virtual void define_blob(const std::string& blob, const Value& value) = 0;
  // Makes a blob unreadable by later layers, with the reason a reader is refused.
  virtual void hide_blob(const std::string& blob, const std::string& reason) = 0;
};

using LayerTranslateFn = void (*)(LayerContext&);

// Field number of the layer kind -> translator; filled by the register_* functions of the
// family files (layer_table.cc lists them).
using LayerTable = std::map<int, LayerTranslateFn>;
const LayerTable& layer_table();
// Kinds refused with a reason of their own (a custom layer's class, say); the reader consults
// these for kinds layer_table() lacks, and does not list them among the kinds it runs.
const LayerTable& refusal_table();

// One registration function per family file.
void register_activation_layers(LayerTable& table);
void register_linear_layers(LayerTable& table);
void register_recurrent_layers(LayerTable& table);
void register_control_flow_layers(LayerTable& table);
void register_control_flow_refusals(LayerTable& table);
void register_softmax_layers(LayerTable& table);
void register_conv_layers(LayerTable& table);
void register_pooling_layers(LayerTable& table);
void register_normalization_layers(LayerTable& table);
void register_resize_layers(LayerTable& table);
void register_shape_layers(LayerTable& table);
void register_shape_nd_layers(LayerTable& table);
void register_reverse_layers(LayerTable& table);
void register_gather_layers(LayerTable& table);
void register_fill_layers(LayerTable& table);
void register_elementwise_layers(LayerTable& table);
void register_reduction_layers(LayerTable& table);
void register_matrix_layers(LayerTable& table);
void register_random_layers(LayerTable& table);
void register_detection_layers(LayerTable& table);

}  // namespace coremlrt::format::neural_network
