"""Stateful models for tests/python/states/test_states.py and benchmarks/stress_states.py.

* :class:`TinyLM`: a tiny decoder-only LM in torch whose KV cache lives in registered
  buffers (``k_cache``, ``v_cache``) written with slice assignment at the positions being
  processed. :func:`build_lm_package` converts it twice with coremltools (``prefill``: a
  prompt of ``PROMPT`` tokens, ``decode``: one token) and joins both into one multifunction
  package whose functions share the two states. :class:`TorchLM` runs the same module
  step by step with its own buffers: the reference.
* Small stateful / stateless models built with coremltools' MIL builder (counters, state
  declarations that differ from the LM's, a two-function package sharing a large weight),
  each with what a test needs to compute its reference with numpy.

Converter facts found while writing these (coremltools 9.0, torch 2.13):

* states must be fp16: ``ct.convert`` rejects an fp32 buffer with "State only support fp16
  dtype". The LM therefore keeps fp16 caches and computes in fp32
  (``compute_precision=FLOAT32``); the torch module does the same (it rounds k/v to fp16 when
  writing the cache and widens them when reading), so the comparison stays tight. Only
  tight, not exact: when the two fp32 values of a k/v entry differ in their last bit they
  can round to neighbouring fp16 values (one entry in a few steps; one fp16 ulp). With the
  default init (logits of size ~2) that moves the logits by under 3e-5 (measured over 3220
  random steps); with weights scaled x2 it reached 4e-3, so the weights are left as
  initialised.
* reading ``tokens.shape[1]`` inside the traced forward fails to convert with this torch
  version (``aten::Int`` of a shape becomes a 1-d constant: "only 0-dimensional arrays can
  be converted to Python scalars"), so the sequence length is a module attribute set
  before tracing. The start position is a runtime input; slicing with it traces dynamically
  and converts to ``slice_update`` with computed begin/end.
"""

import contextlib
import copy
import os
import warnings

import numpy as np

os.environ.setdefault("TQDM_DISABLE", "1")  # coremltools' progress bars

VOCAB, DIM, HEADS, LAYERS, MAX_LEN, PROMPT = 32, 16, 2, 2, 16, 5
HEAD_DIM = DIM // HEADS
CACHE_SHAPE = (LAYERS, HEADS, MAX_LEN, HEAD_DIM)
STATE_NAMES = ("k_cache", "v_cache")


class LMConfig:
    """The LM's sizes; the module-level ones by default. A larger one serves the compressed-weight
    tests (blocks of 32 along a row need rows of at least 32)."""

    def __init__(self, vocab=VOCAB, dim=DIM, heads=HEADS, layers=LAYERS, max_len=MAX_LEN, prompt=PROMPT):
        self.vocab, self.dim, self.heads, self.layers, self.max_len, self.prompt = vocab, dim, heads, layers, max_len, prompt
        self.head_dim = dim // heads
        self.cache_shape = (layers, heads, max_len, self.head_dim)


DEFAULT_CONFIG = LMConfig()


@contextlib.contextmanager
def _quiet_coremltools():
    """Silences the converters' warnings (torch tracer, coremltools' untested-torch notes)."""
    import logging

    logger = logging.getLogger("coremltools")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _torch_classes(config=DEFAULT_CONFIG):
    import torch

    VOCAB, DIM, HEADS, LAYERS, MAX_LEN = config.vocab, config.dim, config.heads, config.layers, config.max_len
    HEAD_DIM, CACHE_SHAPE = config.head_dim, config.cache_shape

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(DIM, 3 * DIM)
            self.o = torch.nn.Linear(DIM, DIM)
            self.ff1 = torch.nn.Linear(DIM, 2 * DIM)
            self.ff2 = torch.nn.Linear(2 * DIM, DIM)
            self.n1 = torch.nn.LayerNorm(DIM)
            self.n2 = torch.nn.LayerNorm(DIM)

    class TinyLM(torch.nn.Module):
        """tokens int32 [1, T], start int32 [1] -> logits fp32 [1, T, VOCAB]; writes the KV
        cache at positions start .. start+T-1 and attends to every cache position <= its own
        (cache slots not yet written hold whatever the state holds: zeros in a fresh one)."""

        def __init__(self):
            super().__init__()
            self.seq_len = None  # fixed for tracing; eager calls read it from the input
            self.emb = torch.nn.Embedding(VOCAB, DIM)
            self.pos = torch.nn.Embedding(MAX_LEN, DIM)
            self.layers = torch.nn.ModuleList([Layer() for _ in range(LAYERS)])
            self.head = torch.nn.Linear(DIM, VOCAB)
            self.register_buffer("k_cache", torch.zeros(CACHE_SHAPE, dtype=torch.float16))
            self.register_buffer("v_cache", torch.zeros(CACHE_SHAPE, dtype=torch.float16))

        def forward(self, tokens, start):
            T = self.seq_len or tokens.shape[1]
            p0 = start[0]
            positions = torch.arange(T, dtype=torch.int32) + p0
            x = self.emb(tokens[0]) + self.pos(positions)  # [T, DIM]
            keys = torch.arange(MAX_LEN, dtype=torch.int32)
            bias = torch.where(keys[None, :] <= positions[:, None], 0.0, -1e4)  # causal over the cache
            for i, layer in enumerate(self.layers):
                q, k, v = layer.qkv(layer.n1(x)).reshape(T, 3, HEADS, HEAD_DIM).permute(1, 2, 0, 3)
                self.k_cache[i, :, p0:p0 + T] = k.to(torch.float16)
                self.v_cache[i, :, p0:p0 + T] = v.to(torch.float16)
                keys_i = self.k_cache[i].to(torch.float32)
                values_i = self.v_cache[i].to(torch.float32)
                scores = q @ keys_i.transpose(1, 2) / HEAD_DIM ** 0.5 + bias
                attended = torch.softmax(scores, dim=-1) @ values_i  # [HEADS, T, HEAD_DIM]
                x = x + layer.o(attended.permute(1, 0, 2).reshape(T, DIM))
                x = x + layer.ff2(torch.nn.functional.gelu(layer.ff1(layer.n2(x))))
            return self.head(x)[None]

    return TinyLM


def make_torch_lm(seed=0, config=DEFAULT_CONFIG):
    import torch

    torch.manual_seed(seed)
    module = _torch_classes(config)().eval()
    module.config = config
    return module


def _convert_lm(module, seq_len, path, compress=None):
    import coremltools as ct
    import torch

    traced_module = copy.deepcopy(module)
    traced_module.seq_len = seq_len
    with torch.no_grad():
        traced = torch.jit.trace(traced_module, (torch.zeros(1, seq_len, dtype=torch.int32),
                                                 torch.zeros(1, dtype=torch.int32)))
    model = ct.convert(
        traced,
        inputs=[ct.TensorType(name="tokens", shape=(1, seq_len), dtype=np.int32),
                ct.TensorType(name="start", shape=(1,), dtype=np.int32)],
        outputs=[ct.TensorType(name="logits")],
        states=[ct.StateType(wrapped_type=ct.TensorType(shape=module.config.cache_shape, dtype=np.float16), name=name)
                for name in STATE_NAMES],
        minimum_deployment_target=ct.target.iOS18,
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT32,
        skip_model_load=True,
    )
    if compress:
        model = compress(model)
    model.save(path)
    return path


def save_multifunction(directory, name, functions, default):
    """functions: {target function name: single-function .mlpackage path}."""
    import coremltools as ct

    desc = ct.utils.MultiFunctionDescriptor()
    for target, source in functions.items():
        desc.add_function(source, src_function_name="main", target_function_name=target)
    desc.default_function_name = default
    path = os.path.join(str(directory), name + ".mlpackage")
    ct.utils.save_multifunction(desc, path)
    return path


def build_lm_package(directory, seed=0, config=DEFAULT_CONFIG, compress=None):
    """Returns (path of the prefill/decode package, the torch module it was converted from).
    `compress`, if given, turns each converted function's ct.models.MLModel into another (a
    coremltools.optimize pass) before the two are joined."""
    module = make_torch_lm(seed, config)
    directory = str(directory)
    with _quiet_coremltools():
        prefill = _convert_lm(module, config.prompt, os.path.join(directory, "lm_prefill.mlpackage"), compress)
        decode = _convert_lm(module, 1, os.path.join(directory, "lm_decode.mlpackage"), compress)
        path = save_multifunction(directory, "lm", {"prefill": prefill, "decode": decode}, default="prefill")
    return path, module


class TorchLM:
    """The reference: the torch module run eagerly, step by step, with its own caches."""

    def __init__(self, module):
        self.module = copy.deepcopy(module)
        self.module.seq_len = None
        self.reset()

    def reset(self):
        self.module.k_cache.zero_()
        self.module.v_cache.zero_()

    def step(self, tokens, start):
        import torch

        with torch.no_grad():
            logits = self.module(torch.as_tensor(np.asarray(tokens, np.int32).reshape(1, -1)),
                                 torch.tensor([int(start)], dtype=torch.int32))
        return logits.numpy().astype(np.float32)

    def caches(self):
        return {name: getattr(self.module, name).float().numpy().copy() for name in STATE_NAMES}

    def load_caches(self, caches):
        import torch

        for name in STATE_NAMES:
            getattr(self.module, name).copy_(torch.as_tensor(caches[name]).to(torch.float16))


def lm_inputs(tokens, start):
    return {"tokens": np.asarray(tokens, np.int32).reshape(1, -1), "start": np.array([start], np.int32)}


# -- MIL-builder models ----------------------------------------------------------------------

def _save(prog, directory, name):
    import coremltools as ct

    with _quiet_coremltools():
        model = ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                           minimum_deployment_target=ct.target.iOS18, skip_model_load=True)
    path = os.path.join(str(directory), name + ".mlpackage")
    model.save(path)
    return path


def accumulator_package(directory, name, states):
    """states: {state name: shape}, all fp16. Input x fp32 [1]; each state s becomes s + x;
    output y fp32 [1] = sum over every element of every new state."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    names = list(states)
    specs = [mb.TensorSpec((1,), dtype=types.fp32)] + [mb.StateTensorSpec(tuple(s), dtype=types.fp16)
                                                        for s in states.values()]

    def body(x, *state_vars):
        x16 = mb.cast(x=x, dtype="fp16")
        total = None
        for var in state_vars:
            new = mb.coreml_update_state(state=var, value=mb.add(x=mb.read_state(input=var), y=x16))
            s = mb.reduce_sum(x=mb.cast(x=new, dtype="fp32"), axes=list(range(len(new.shape))), keep_dims=False)
            total = s if total is None else mb.add(x=total, y=s)
        return mb.reshape(x=total, shape=[1], name="y")

    # mb.program names inputs after the function's parameters: give it one with the right names.
    params = ", ".join(["x"] + names)
    scope = {"body": body}
    exec(f"def prog_fn({params}):\n    return body({params})\n", scope)
    prog = mb.program(input_specs=specs, opset_version=ct.target.iOS18)(scope["prog_fn"])
    return _save(prog, directory, name)


def counter_package(directory, name="counter", size=256, depth=8, seed=3):
    """A stateful model whose predict takes a while (a chain of matmuls) and can be made to
    fail after it has computed its new state.

    Inputs x fp32 [size, size], idx int32 [1]; state ``counter`` fp16 [1, 4].
    Outputs: y = tanh chain of x @ W_i; count = the incremented counter (fp32 [1, 4]);
    picked = table[idx] (fp32 [1]), where table has 4 entries: idx outside [-4, 4) fails the
    prediction, after the state update has been computed.
    Returns (path, weights, table).
    """
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    rng = np.random.default_rng(seed)
    weights = [(rng.standard_normal((size, size)) / np.sqrt(size)).astype(np.float32) for _ in range(depth)]
    table = np.array([10.0, 20.0, 30.0, 40.0], np.float32)

    @mb.program(input_specs=[mb.TensorSpec((size, size), dtype=types.fp32), mb.TensorSpec((1,), dtype=types.int32),
                             mb.StateTensorSpec((1, 4), dtype=types.fp16)],
                opset_version=ct.target.iOS18)
    def prog(x, idx, counter):
        new = mb.coreml_update_state(state=counter, value=mb.add(x=mb.read_state(input=counter), y=np.float16(1)))
        y = x
        for w in weights:
            y = mb.tanh(x=mb.matmul(x=y, y=w))
        picked = mb.gather(x=table, indices=idx, axis=0, validate_indices=True, name="picked")
        return mb.identity(x=y, name="y"), mb.cast(x=new, dtype="fp32", name="count"), picked

    return _save(prog, directory, name), weights, table


def chain_reference(x, weights):
    y = x.astype(np.float64)
    for w in weights:
        y = np.tanh(y @ w.astype(np.float64))
    return y


def stateless_package(directory, name="stateless"):
    """y = 2 * x for x fp32 [4]: a model that declares no states."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    @mb.program(input_specs=[mb.TensorSpec((4,), dtype=types.fp32)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.mul(x=x, y=2.0, name="y")

    return _save(prog, directory, name)


def shared_weight_package(directory, size=2048, seed=5):
    """Two functions that use the same two fp32 [size, size] weights (2 * 16 MiB at 2048):

    ``first``:  y = (x @ W1^T + b) @ W2^T                        (linear, linear)
    ``second``: y = (relu(x @ W1^T) + b) @ W2^T    (matmul with transpose_y, relu, add, linear)

    x fp32 [1, size]. coremltools deduplicates the identical consts across the functions, so
    weight.bin holds them once. Returns (path, w1, b, w2).
    """
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((size, size)) / np.sqrt(size)).astype(np.float32)
    w2 = (rng.standard_normal((size, size)) / np.sqrt(size)).astype(np.float32)
    b = rng.standard_normal(size).astype(np.float32)
    directory = str(directory)
    sources = {}
    for fname, second in (("first", False), ("second", True)):
        @mb.program(input_specs=[mb.TensorSpec((1, size), dtype=types.fp32)], opset_version=ct.target.iOS18)
        def prog(x):
            if second:  # the same W1 const, used by matmul this time
                h = mb.add(x=mb.relu(x=mb.matmul(x=x, y=w1, transpose_y=True)), y=b)
            else:
                h = mb.linear(x=x, weight=w1, bias=b)
            return mb.linear(x=h, weight=w2, name="y")

        sources[fname] = _save(prog, directory, "shared_" + fname)
    with _quiet_coremltools():
        path = save_multifunction(directory, "shared", sources, default="first")
    return path, w1, b, w2


def shared_weight_reference(x, w1, b, w2, second):
    h = x.astype(np.float64) @ w1.T.astype(np.float64)
    h = np.maximum(h, 0) + b if second else h + b
    return h @ w2.T.astype(np.float64)
