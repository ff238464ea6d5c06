"""Graphs, control flow and states: invoke (inlined), if -> cond, while -> while_loop,
isolated_group (inlined), and the handle ops (read_state / write_state): the control_flow family
(src/ops/control_flow.cc; the state kernels are src/ops/state.cc).

MIL's blocks (docs/design/coreml-format.md, "Control flow blocks") read values of the blocks
around them, as Core AI regions do; a block's outputs are values it computes, so an input or
outer value it passes through is copied with identity.
"""

import re

from ._common import TOKEN, Var, dims_of
from ._registry import translates


def _bind(t, block, values):
    for argument, value in zip(block.arguments, values):
        t.values[argument] = t.values[value] if not isinstance(value, Var) else value


def _run_block(t, block):
    """Translates a region's block in the current MIL block; returns its terminator."""
    return t.run([o.operation for o in block.operations])


@translates("coreai.invoke")
def _invoke(t, op):
    """A call of another graph of the module (a composite such as layer_norm): inlined."""
    # Printed as `#param.constant<@name> : !param.symbol` (or a plain `@name`).
    symbols = re.findall(r'@"?([\w.$-]+)', str(op.attributes["callee"]))
    callee = symbols[-1] if symbols else str(op.attributes["callee"])
    graph = t.callees.get(callee)
    if graph is None:
        t.fail(f"coreai.invoke of '{callee}', which is not a graph of this module")
    if callee in t.inlining:
        t.fail(f"coreai.invoke: '{callee}' calls itself")
    block = graph.regions[0].blocks[0]
    _bind(t, block, op.operands)
    t.inlining.append(callee)
    terminator = _run_block(t, block)
    t.inlining.pop()
    for result, value in zip(op.results, terminator.operands):
        t.values[result] = t.values[value]


@translates("coreai.isolated_group")
def _isolated_group(t, op):
    """Ops grouped for one delegate: the grouping has no meaning for the result, so inlined."""
    block = op.regions[0].blocks[0]
    _bind(t, block, op.operands)
    terminator = _run_block(t, block)
    for result, value in zip(op.results, terminator.operands):
        t.values[result] = t.values[value]


@translates("coreai.if")
def _if(t, op):
    if len(op.regions[1].blocks) == 0:
        t.fail("coreai.if without an else region is not supported")
    blocks = []
    for region in op.regions:
        with t.block() as lines:
            terminator = _run_block(t, region.blocks[0])
            outputs = t.local_names(terminator.operands)
        blocks.append((None, lines, outputs))
    t.emit(op, "cond", {"pred": t.operand(op.operands[0])}, blocks=blocks)


def _forwards_arguments(before, condition):
    """Whether the before region's coreai.condition passes on its block arguments unchanged."""
    return list(condition.operands)[1:] == list(before.arguments)


@translates("coreai.while")
def _while(t, op):
    """MIL's while_loop carries the values of the before region's arguments (the inits, then
    what the after region yields); its condition block is the before region. When the
    condition passes on other values than its arguments, the before region is translated again
    where those values are needed: at the start of the body and after the loop."""
    before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
    carried = [Var(t.fresh("loop_var"), t.as_var(v).dtype, dims_of(a.type)) for v, a in
               zip(op.operands, before.arguments)]
    loop_vars = [t.operand(v) for v in op.operands]
    with t.block() as cond_lines:
        _bind(t, before, carried)
        condition = _run_block(t, before)
        cond_outputs = t.local_names(condition.operands[:1])
    forwards = _forwards_arguments(before, condition)
    body_inputs = [Var(t.fresh("loop_var"), v.dtype, v.dims) for v in carried]
    with t.block() as body_lines:
        _bind(t, before, body_inputs)
        if forwards:
            _bind(t, after, body_inputs)
        else:
            _bind(t, after, _run_block(t, before).operands[1:])
        terminator = _run_block(t, after)
        body_outputs = t.local_names(terminator.operands)
    blocks = [(carried, cond_lines, cond_outputs), (body_inputs, body_lines, body_outputs)]
    finals = t.aux_many("while_loop", {"loop_vars": f"({', '.join(loop_vars)})"},
                        [(v.dtype, v.dims) for v in carried], blocks=blocks)
    _bind(t, before, finals)
    if forwards:
        results = finals
    else:
        results = [t.values[v] for v in _run_block(t, before).operands[1:]]
    for result, value in zip(op.results, results):
        t.values[result] = value


# States. The tokens only order the handle ops; MIL runs its ops in program order, and the
# bytecode's order already follows each token chain, so tokens translate to nothing. A
# write_handle is written even when its token is unused (Core AI may drop such tokens), unless
# the state holds its value already (write_through below).
@translates("coreai.create_token", "coreai.join_token")
def _token(t, op):
    t.values[op.results[0]] = TOKEN


def _state_of(t, op):
    held = t.values[op.operands[0]]
    if not (isinstance(held, Var) and held.dtype.startswith("state<")):
        t.fail(f"{op.name} of a handle that is not a state input of the function")
    return held


@translates("coreai.read_handle")
def _read_handle(t, op):
    state = _state_of(t, op)
    dtype = state.dtype[len("state<"):-1]
    t.values[op.results[1]] = TOKEN
    if state.name not in t.handle_positions:
        t.values[op.results[0]] = t.aux("read_state", {"input": state.name}, dtype, state.dims,
                                        name=t.output_name(op.results[0]))
        return
    current = t.state_contents.get(state.name)
    if current is not None:  # the value the state holds: the read is that value
        t.values[op.results[0]] = t.values[current]
    else:
        t.values[op.results[0]] = t.aux("read_state", {"input": state.name}, dtype, state.dims,
                                        name=t.output_name(op.results[0]))
    t.state_contents[state.name] = op.results[0]


def _write_state(t, state_name, data_name):
    name = t.fresh("write_state")
    t.lines.append(f"write_state(data = {data_name}, input = {state_name})[name = string(\"{name}\")];")
    t.count("write_state")


@translates("coreai.write_handle")
def _write_handle(t, op):
    state = _state_of(t, op)
    # A value the state holds already (written through, or read and written back unchanged)
    # is not written again.
    if state.name not in t.handle_positions or op.operands[1] != t.state_contents.get(state.name):
        _write_state(t, state.name, t.operand(op.operands[1]))
        if state.name in t.handle_positions:
            t.state_contents[state.name] = op.operands[1]
    t.values[op.results[0]] = TOKEN


# Writing through. Core AI reads a state (read_handle), updates the value read (a KV cache:
# one slice_update or scatter_nd per layer) and writes the last value back (write_handle).
# Translated as it is, every update copies the whole state, since the attention of its layer
# reads the value updated. Where the next handle op on the state is a write_handle, nothing
# can see the state between, so each update of the state's current value is written to the
# state at once and the updated value read back from it: the engine then does each update in
# place (src/runtime/state_update.h), and the write_handle of the last value writes nothing.
# Snapshot rules keep this exact: a value read from the state keeps its contents when the state
# is written later (the engine copies the state first if such a value is still read then).
# For such a state (t.handle_positions), t.state_contents maps it to the MLIR value that holds
# what the translated program's state holds at the op being translated (read_handle,
# write_handle and write_through keep it); a read_handle is that value.
def handle_positions(block, operations, values):
    """{state name: [(position in ``operations``, op name)]} of the read and write handles of
    each state (function argument) that only handle ops of the function's own block use."""
    positions = {}
    for argument in block.arguments:
        held = values.get(argument)
        if not (isinstance(held, Var) and held.dtype.startswith("state<")):
            continue
        found = []
        for use in argument.uses:
            owner = getattr(use.owner, "operation", use.owner)
            at = next((i for i, o in enumerate(operations) if o == owner), None)
            if at is None or owner.name not in ("coreai.read_handle", "coreai.write_handle"):
                break
            found.append((at, owner.name))
        else:
            positions[held.name] = sorted(found)
    return positions


def write_through(t, op, source):
    """After an update op (slice_update, scatter_nd) of ``source`` has been written as the MIL
    value of op.results[0]: when ``source`` is a state's current value and the state's next
    handle op writes it, writes the result to the state and reads it back as the op's value."""
    if len(t._scopes) != 1 or t.position is None:  # noqa: SLF001 - only the function's own block
        return
    for state_name, current in t.state_contents.items():
        if current != source:
            continue
        later = [name for at, name in t.handle_positions.get(state_name, ()) if at > t.position]
        if not later or later[0] != "coreai.write_handle":
            return
        updated = t.values[op.results[0]]
        _write_state(t, state_name, updated.name)
        t.values[op.results[0]] = t.aux("read_state", {"input": state_name}, updated.dtype, updated.dims)
        t.state_contents[state_name] = op.results[0]
        return
