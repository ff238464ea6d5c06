// The control-flow layers: branch (a `cond` op over two nested networks) and loop (a
// `while_loop` op), lowered onto the ops src/ops/control_flow.cc runs. Nested networks read
// and write the enclosing network's blobs; the blobs they write are visible after the layer
// (LayerContext::translate_network, reader.cc). loopBreak and loopContinue end a loop body
// early through flags (layer_translator.h). Custom layers are refused with their class.
#include <climits>
#include <set>

#include "format/neural_network/layer_translator.h"
#include "nn_control_flow.pb.h"
#include "nn_recurrent.pb.h"

namespace coremlrt::format::neural_network {
namespace {

using NestedNetwork = LayerContext::NestedNetwork;

// An op for a block of a control-flow op, its one output named freshly.
Value block_op(LayerContext& layer, std::vector<ir::Operation>& ops, const std::string& type, const OpInputs& inputs,
               const ir::ValueType& out_type) {
  ir::Operation op;
  op.type = type;
  op.name = layer.layer().name();
  for (const auto& [param, values] : inputs)
    for (const Value& value : values) op.inputs[param].push_back({value.name, value.constant});
  Value out{layer.fresh_name(), nullptr, out_type};
  op.outputs.push_back({out.name, out_type});
  ops.push_back(std::move(op));
  return out;
}

void require_one_value(const Value& x, const std::string& what) {
  if (!x.type.is_static()) return;  // checked when it runs: the cond and while_loop kernels need one value
  int64_t count = 1;
  for (int64_t d : x.type.dims) count *= d;
  require(count == 1, what, " must hold one value; it is ", x.type.str());
}

// A condition blob is true when its one value is not within 1e-6 of zero (BranchLayerParams
// and LoopLayerParams in Core ML's NeuralNetwork.proto).
Value truth(LayerContext& layer, std::vector<ir::Operation>& ops, const Value& x) {
  const Value magnitude = block_op(layer, ops, "abs", {{"x", {x}}}, x.type);
  ir::ValueType flag = x.type;
  flag.dtype = DType::Bool;
  return block_op(layer, ops, "greater", {{"x", {magnitude}}, {"y", {float_scalar(1e-6f)}}}, flag);
}

ir::Block make_block(std::vector<ir::Operation> ops, const std::vector<Value>& outputs) {
  ir::Block block;
  block.operations = std::move(ops);
  for (const Value& value : outputs) block.outputs.push_back(value.name);
  return block;
}

// The type both branches' values of a blob fit: sizes that differ become unknown.
ir::ValueType joined_type(const std::string& blob, const ir::ValueType& a, const ir::ValueType& b) {
  require(a.kind == ir::TypeKind::Tensor && b.kind == ir::TypeKind::Tensor && a.dtype == b.dtype && a.rank == b.rank,
          "its branches leave blob '", blob, "' with different types, ", a.str(), " and ", b.str());
  ir::ValueType out = a;
  for (size_t d = 0; d < out.dims.size(); ++d)
    if (a.dims[d] != b.dims[d]) out.dims[d] = -1;
  return out;
}

void branch(LayerContext& layer) {
  layer.expect_io(1, 1, 0);
  const auto params = layer.parse_params<nn::BranchLayerParams>();
  const Value& condition = layer.input(0);
  require_one_value(condition, "the condition blob");
  std::vector<ir::Operation> top;
  const Value pred = truth(layer, top, condition);
  for (auto& op : top) layer.emit_op(std::move(op));

  NestedNetwork when_true = layer.translate_network(params.ifbranch(), {}, "ifBranch");
  NestedNetwork when_false = layer.translate_network(params.elsebranch(), {}, "elseBranch");
  std::set<std::string> blobs;
  for (const auto& [blob, value] : when_true.written) blobs.insert(blob);
  for (const auto& [blob, value] : when_false.written) blobs.insert(blob);
  // A blob a branch leaves unreadable (an inner loop's local, say) stays so after the layer.
  for (const NestedNetwork* side : {&when_true, &when_false})
    for (const auto& [blob, reason] : side->hidden)
      if (!blobs.count(blob)) {
        blobs.insert(blob);
        when_true.written.erase(blob);
        when_false.written.erase(blob);
      }

  // A blob one branch writes keeps its earlier value on the other path; one with no earlier
  // value is defined on one path only, and later layers may not read it.
  std::vector<std::string> defined;
  std::vector<Value> true_outputs, false_outputs;
  for (const std::string& blob : blobs) {
    const std::optional<Value> before = layer.blob(blob);
    auto t = when_true.written.find(blob);
    auto f = when_false.written.find(blob);
    const NestedNetwork& hider = when_true.hidden.count(blob) ? when_true : when_false;
    if (hider.hidden.count(blob)) {
      layer.hide_blob(blob, hider.hidden.at(blob));
      continue;
    }
    if (!before && (t == when_true.written.end() || f == when_false.written.end())) {
      layer.hide_blob(blob, std::string("which only the ") + (t == when_true.written.end() ? "elseBranch" : "ifBranch") +
                                " of branch layer '" + layer.layer().name() + "' defines");
      continue;
    }
    defined.push_back(blob);
    true_outputs.push_back(t != when_true.written.end() ? t->second : *before);
    false_outputs.push_back(f != when_false.written.end() ? f->second : *before);
  }

  ir::Operation op;
  op.type = "cond";
  op.name = layer.layer().name();
  op.inputs["pred"].push_back({pred.name, nullptr});
  op.blocks.push_back(make_block(std::move(when_true.ops), true_outputs));
  op.blocks.push_back(make_block(std::move(when_false.ops), false_outputs));
  std::vector<Value> results;
  for (size_t i = 0; i < defined.size(); ++i) {
    Value out{layer.fresh_name(), nullptr, joined_type(defined[i], true_outputs[i].type, false_outputs[i].type)};
    op.outputs.push_back({out.name, out.type});
    results.push_back(out);
  }
  layer.emit_op(std::move(op));
  for (size_t i = 0; i < defined.size(); ++i) layer.define_blob(defined[i], results[i]);
}

// Lowered onto while_loop, whose condition block cannot change the loop variables: the
// condition network runs once before the loop and again at the end of every body, and the
// condition block only tests the flag it left (with the iteration count, when bounded):
//
//   conditionNetwork(); i = 0
//   while truth(conditionVar) [and i < limit]: bodyNetwork(); i += 1; conditionNetwork()
//
// which is Core ML's order of evaluation. The loop variables are the blobs the networks write
// that have a value when the loop starts; a blob first defined inside the loop is local to an
// iteration, and later layers may not read it. The engine's iteration cap
// (max_loop_iterations, coremlrt/limits.h) still bounds the loop.
void loop(LayerContext& layer) {
  layer.expect_io(0, 1, 0);
  const auto params = layer.parse_params<nn::LoopLayerParams>();
  const bool has_condition = params.conditionnetwork().layers_size() > 0;
  const bool bounded = layer.input_count() == 1 || params.maxloopiterations() > 0 || !has_condition;
  if (has_condition) require(!params.conditionvar().empty(), "has a conditionNetwork but no conditionVar");

  std::vector<ir::Operation> top;
  Value limit;
  if (layer.input_count() == 1) {
    // The input, an iteration count, replaces maxLoopIterations.
    const Value& count = layer.input(0);
    require_one_value(count, "the iteration count blob");
    ir::ValueType type = count.type;
    type.dtype = DType::Int32;
    limit = block_op(layer, top, "cast", {{"x", {count}}, {"dtype", {string_scalar("int32")}}}, type);
  } else {
    require(params.maxloopiterations() <= static_cast<uint64_t>(INT_MAX), "maxLoopIterations ",
            params.maxloopiterations(), " does not fit 32 bits");
    limit = int_scalar(static_cast<int32_t>(params.maxloopiterations()));
  }

  std::map<std::string, Value> start;  // blob -> value as the loop starts
  if (has_condition) {
    NestedNetwork first = layer.translate_network(params.conditionnetwork(), {}, "conditionNetwork");
    for (auto& op : first.ops) top.push_back(std::move(op));
    start = first.written;
    require(start.count(params.conditionvar()), "its conditionNetwork does not write conditionVar '",
            params.conditionvar(), "'");
  }
  for (auto& op : top) layer.emit_op(std::move(op));

  std::set<std::string> written;
  for (const auto& blob : layer.blobs_written(params.bodynetwork())) written.insert(blob);
  for (const auto& blob : layer.blobs_written(params.conditionnetwork())) written.insert(blob);
  // A body with loopBreak or loopContinue: a flag cleared at the start of every iteration
  // stops the rest of the body (reader.cc wraps it in a branch on the flag), and a loop
  // variable set by loopBreak stops the loop.
  const bool exits = written.erase(kLoopExitBlob) > 0;
  written.erase(kLoopBreakBlob);
  std::vector<std::string> vars;
  std::vector<Value> initial, inside;  // each loop variable's value as the loop starts, and in its blocks
  std::map<std::string, Value> bindings;
  for (const std::string& blob : written) {
    std::optional<Value> value;
    if (auto s = start.find(blob); s != start.end()) value = s->second;
    else value = layer.blob(blob);
    if (!value) continue;
    vars.push_back(blob);
    initial.push_back(*value);
    inside.push_back(Value{layer.fresh_name(), nullptr, value->type});
    bindings[blob] = inside.back();
  }
  const ir::ValueType flag_type = tensor_type(DType::Float32, {1});
  if (exits) {
    vars.push_back(kLoopBreakBlob);
    initial.push_back(float_tensor({0.0f}, {1}));
    inside.push_back(Value{layer.fresh_name(), nullptr, flag_type});
    bindings[kLoopBreakBlob] = inside.back();
  }
  const Value counter{layer.fresh_name(), nullptr, tensor_type(DType::Int32, {})};
  if (bounded) {
    initial.push_back(int_scalar(0));
    inside.push_back(counter);
  }

  // Condition block: the flag the last conditionNetwork run left, and the bound.
  std::vector<ir::Operation> test_ops;
  std::optional<Value> keep_going;
  if (has_condition) keep_going = truth(layer, test_ops, bindings.at(params.conditionvar()));
  if (bounded) {
    ir::ValueType flag = broadcast_type(counter.type, limit.type);
    flag.dtype = DType::Bool;
    const Value below = block_op(layer, test_ops, "less", {{"x", {counter}}, {"y", {limit}}}, flag);
    keep_going = keep_going ? block_op(layer, test_ops, "logical_and", {{"x", {*keep_going}}, {"y", {below}}},
                                       broadcast_type(keep_going->type, below.type))
                            : below;
  }

  if (exits) {
    const Value broke = truth(layer, test_ops, bindings.at(kLoopBreakBlob));
    const Value go_on = block_op(layer, test_ops, "logical_not", {{"x", {broke}}}, broke.type);
    keep_going = block_op(layer, test_ops, "logical_and", {{"x", {*keep_going}}, {"y", {go_on}}},
                          broadcast_type(keep_going->type, go_on.type));
  }

  // Body block: the body network, the count, then the condition network on the new values.
  std::vector<ir::Operation> body_ops;
  std::map<std::string, Value> body_bindings = bindings;
  if (exits)
    body_bindings[kLoopExitBlob] = block_op(layer, body_ops, "identity", {{"x", {float_tensor({0.0f}, {1})}}}, flag_type);
  NestedNetwork body = layer.translate_network(params.bodynetwork(), body_bindings, "bodyNetwork");
  for (auto& op : body.ops) body_ops.push_back(std::move(op));
  std::map<std::string, Value> after = bindings;
  for (const auto& [blob, value] : body.written)
    if (blob != kLoopExitBlob) after[blob] = value;
  if (has_condition) {
    NestedNetwork again = layer.translate_network(params.conditionnetwork(), after, "conditionNetwork");
    if (exits) {
      // After a loopBreak the loop ends with the values it has: the condition network does
      // not run again.
      const Value broke = truth(layer, body_ops, after.at(kLoopBreakBlob));
      std::vector<Value> kept, computed;
      std::vector<std::string> blobs;
      for (const auto& [blob, value] : again.written) {
        blobs.push_back(blob);
        kept.push_back(after.at(blob));
        computed.push_back(value);
      }
      ir::Operation guard;
      guard.type = "cond";
      guard.name = layer.layer().name();
      guard.inputs["pred"].push_back({broke.name, nullptr});
      guard.blocks.push_back(make_block({}, kept));
      guard.blocks.push_back(make_block(std::move(again.ops), computed));
      for (size_t i = 0; i < blobs.size(); ++i) {
        Value out{layer.fresh_name(), nullptr, joined_type(blobs[i], kept[i].type, computed[i].type)};
        guard.outputs.push_back({out.name, out.type});
        after[blobs[i]] = out;
      }
      body_ops.push_back(std::move(guard));
    } else {
      for (auto& op : again.ops) body_ops.push_back(std::move(op));
      for (const auto& [blob, value] : again.written) after[blob] = value;
    }
  }
  std::vector<Value> next;
  for (size_t i = 0; i < vars.size(); ++i) {
    const Value& value = after.at(vars[i]);
    require(value.type.dtype == inside[i].type.dtype && value.type.dims == inside[i].type.dims, "its iterations change blob '",
            vars[i], "' from ", inside[i].type.str(), " to ", value.type.str(), ", which a loop variable cannot");
    next.push_back(value);
  }
  if (bounded) next.push_back(block_op(layer, body_ops, "add", {{"x", {counter}}, {"y", {int_scalar(1)}}}, counter.type));

  ir::Operation op;
  op.type = "while_loop";
  op.name = layer.layer().name();
  for (const Value& value : initial) op.inputs["loop_vars"].push_back({value.name, value.constant});
  ir::Block test = make_block(std::move(test_ops), {*keep_going});
  ir::Block step = make_block(std::move(body_ops), next);
  for (const Value& value : inside) {
    test.inputs.push_back({value.name, value.type});
    step.inputs.push_back({value.name, value.type});
  }
  op.blocks.push_back(std::move(test));
  op.blocks.push_back(std::move(step));
  std::vector<Value> results;
  for (const Value& value : inside) {
    Value out{layer.fresh_name(), nullptr, value.type};
    op.outputs.push_back({out.name, out.type});
    results.push_back(out);
  }
  layer.emit_op(std::move(op));
  for (size_t i = 0; i < vars.size(); ++i)
    if (vars[i] != kLoopBreakBlob) layer.define_blob(vars[i], results[i]);
  for (const std::string& blob : written)
    if (!bindings.count(blob))
      layer.hide_blob(blob, "which loop layer '" + layer.layer().name() +
                                "' defines inside its iterations only (it has no value before the loop)");
}

// loopBreak ends the loop, loopContinue the iteration: both raise the flag that skips the
// rest of the body; loopBreak also the one that ends the loop (see loop above).
void loop_exit(LayerContext& layer, bool ends_loop) {
  layer.expect_io(0, 0, 0);
  require(layer.blob(kLoopExitBlob).has_value(), "is not inside the bodyNetwork of a loop layer");
  const Value one = float_tensor({1.0f}, {1});
  layer.define_blob(kLoopExitBlob, one);
  if (ends_loop) layer.define_blob(kLoopBreakBlob, one);
}

void loop_break(LayerContext& layer) { loop_exit(layer, true); }
void loop_continue(LayerContext& layer) { loop_exit(layer, false); }

// A custom layer's computation is code the app that ships the model supplies (an Objective-C
// or Swift class of that name); the model file holds only its name and parameters.
void custom(LayerContext& layer) {
  const auto params = layer.parse_params<nn::CustomLayerParams>();
  refuse("custom layer of class '", params.classname(), "': its computation is code an app supplies with the",
         " model, which this build does not have");
}

}  // namespace

void register_control_flow_layers(LayerTable& table) {
  table[605] = branch;
  table[615] = loop;
  table[620] = loop_break;
  table[625] = loop_continue;
}

void register_control_flow_refusals(LayerTable& table) {
  table[500] = custom;
}

}  // namespace coremlrt::format::neural_network
