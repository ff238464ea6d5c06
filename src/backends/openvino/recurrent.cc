// lstm (our kernel: src/ops/recurrent.cc) as OpenVINO's LSTMSequence, for the forward
// direction with the default activations, no peephole and no clip; the other forms stay ours.
// Layout facts: MIL's gate blocks are [i, f, o, z] where OpenVINO's are [f, i, z, o]; MIL's
// sequence is [seq, batch, input] where OpenVINO's is [batch, seq, input] with a direction axis.
#include <openvino/op/ops.hpp>

#include <algorithm>
#include <cctype>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v1 = ov::op::v1;

std::string lower_case(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

Verdict check_lstm(const OpReader& op) {
  if (op.const_string("direction", "forward") != "forward")
    return Verdict::refuse("direction " + op.const_string("direction"));
  if (lower_case(op.const_string("recurrent_activation", "sigmoid")) != "sigmoid" ||
      lower_case(op.const_string("cell_activation", "tanh")) != "tanh" ||
      lower_case(op.const_string("activation", "tanh")) != "tanh")
    return Verdict::refuse("activations other than sigmoid/tanh/tanh");
  if (op.has("peephole")) return Verdict::refuse("peephole");
  if (op.has("clip")) return Verdict::refuse("clip");
  const DType x = op.type("x").dtype;
  if (x != DType::Float16 && x != DType::Float32) return Verdict::refuse("x is not fp16 or fp32");
  for (const char* p : {"initial_h", "initial_c", "weight_ih", "weight_hh", "bias"})
    if (op.count(p) && op.type(p).dtype != x)
      return Verdict::refuse(std::string(p) + " and x have different dtypes");
  for (const char* p : {"weight_ih", "weight_hh", "bias"})
    if (op.count(p) && !op.constant(p)) return Verdict::refuse(std::string(p) + " is not known at load");
  if (op.type("x").rank != 3) return Verdict::refuse("x is not [seq, batch, input]");
  // The lowering reshapes each state to [batch, 1, H]; our kernel also reads a state of more rows
  // than the batch (for its first rows), which such a reshape would refuse.
  const int64_t batch = op.type("x").dims[1];
  for (const char* p : {"initial_h", "initial_c"})
    if (op.type(p).rank != 2 || op.type(p).dims[0] != batch)
      return Verdict::refuse(std::string(p) + " is not known to have x's batch of rows");
  return Verdict::claim();
}

// [4H, ...] in MIL's gate order -> [1, 4H, ...] in OpenVINO's.
Value gates_for_openvino(const Value& w) {
  auto split = std::make_shared<v1::Split>(w, Lowerer::i64(0), 4);
  ov::OutputVector reordered = {split->output(1), split->output(0), split->output(3), split->output(2)};
  Value joined = std::make_shared<ov::op::v0::Concat>(reordered, 0);
  return std::make_shared<ov::op::v0::Unsqueeze>(joined, Lowerer::i64s({0}));
}

std::vector<Value> lower_lstm(Lowerer& op) {
  const std::vector<int64_t>& x_dims = op.type("x").dims;
  const int64_t seq = x_dims[0], batch = x_dims[1];
  const int64_t hidden = op.constant("weight_hh")->tensor.shape[1];
  Value x = std::make_shared<v1::Transpose>(op.input("x"), Lowerer::i64s({1, 0, 2}));
  auto state = [&](const char* param) -> Value {
    return std::make_shared<v1::Reshape>(op.input(param), Lowerer::i64s({batch, 1, hidden}), false);
  };
  Value w = gates_for_openvino(op.input("weight_ih"));
  Value r = gates_for_openvino(op.input("weight_hh"));
  Value b = op.count("bias") ? gates_for_openvino(op.input("bias"))
                             : Lowerer::constant_of(x.get_element_type(), {1, 4 * hidden},
                                                    std::vector<double>(static_cast<size_t>(4 * hidden), 0.0));
  Value lengths = Lowerer::constant_of(ov::element::i32, {batch}, std::vector<double>(static_cast<size_t>(batch), seq));
  auto lstm = std::make_shared<ov::op::v5::LSTMSequence>(x, state("initial_h"), state("initial_c"), lengths, w, r, b,
                                                          hidden, ov::op::RecurrentSequenceDirection::FORWARD);
  Value h = std::make_shared<v1::Reshape>(lstm->output(1), Lowerer::i64s({batch, hidden}), false);
  Value c = std::make_shared<v1::Reshape>(lstm->output(2), Lowerer::i64s({batch, hidden}), false);
  Value output;
  if (op.const_bool("output_sequence", false)) {
    // [batch, 1, seq, hidden] -> [seq, batch, hidden]
    Value y = std::make_shared<v1::Reshape>(lstm->output(0), Lowerer::i64s({batch, seq, hidden}), false);
    output = std::make_shared<v1::Transpose>(y, Lowerer::i64s({1, 0, 2}));
  } else {
    output = std::make_shared<v1::Reshape>(lstm->output(1), Lowerer::i64s({1, batch, hidden}), false);
  }
  return {output, h, c};
}

}  // namespace

void add_recurrent_lowerings(LoweringTable& t) { t["lstm"] = {check_lstm, lower_lstm}; }

}  // namespace coremlrt::backends::openvino
