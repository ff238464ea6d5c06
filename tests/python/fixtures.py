"""Test models the repository makes itself, with coremltools and torch, in the corpus layout.

A fresh clone has no ../shared/corpus, yet its CLI, coremltools-backend, lifetime and C++
model tests need a few real packages: a fp16-compute add (the seed repro), a stateful
accumulator and a two-function package. They are built here once and cached under
build/test-fixtures (COREMLRT_FIXTURES overrides), each case a folder like a corpus case
(case.json, inputs/expected .npz, model.mlpackage), so tests/python/corpus.py reads both.
Expected values come from numpy or torch, never from coremlrt.

    python3 tests/python/fixtures.py [--out DIR] [NAME ...]   # build (default: all), print "case: PATH" lines
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

# Bump when a builder changes, so that stale caches are rebuilt.
GENERATOR_VERSION = 1
FIXTURES_DIR = os.environ.get("COREMLRT_FIXTURES") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "test-fixtures")


def _write_case(directory, case, steps, model_file="model.mlpackage"):
    """steps: list of (inputs, expected, states-or-None) dicts."""
    case = dict(case, steps=len(steps), model_file=model_file)
    with open(os.path.join(directory, "case.json"), "w") as f:
        json.dump(case, f, indent=2)
    for i, (inputs, expected, states) in enumerate(steps):
        prefix = "" if len(steps) == 1 else f"step_{i}_"
        np.savez(os.path.join(directory, prefix + "inputs.npz"), **inputs)
        np.savez(os.path.join(directory, prefix + "expected.npz"), **expected)
        if states is not None:
            np.savez(os.path.join(directory, prefix + "states.npz"), **states)


def _fp16(a):
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


def build_fixture_add(directory):
    """x [1, 64, 512] fp32 + 1, converted with coremltools' default fp16 compute precision, so
    the program is cast(fp32->fp16) -> add -> cast(fp16->fp32) and the output is 'add_0'."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 64, 512))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.add(x=x, y=1.0)

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18)
    model.save(os.path.join(directory, "model.mlpackage"))
    x = np.random.default_rng(8550494).standard_normal((1, 64, 512)).astype(np.float32) * 10
    expected = _fp16(_fp16(x) + 1.0)  # what an fp16 add computes, rounded like the program
    _write_case(directory, {"name": "fixture_add", "format": "mlprogram", "function_name": None,
                            "rtol": 0.0, "atol": 0.0, "opsets": {"main": "CoreML8"}},
                [({"x": x}, {"add_0": expected}, None)])


class _Accumulator:
    """acc += Linear(x); y = relu(acc) * 2 (a torch module with a registered buffer)."""

    @staticmethod
    def module():
        import torch

        class Accumulator(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(8, 8)
                self.register_buffer("acc", torch.zeros(1, 8, dtype=torch.float16))

            def forward(self, x):
                self.acc.add_(self.linear(x).to(torch.float16))
                return torch.relu(self.acc.to(torch.float32)) * 2

        torch.manual_seed(31824662)
        return Accumulator().eval()


def build_fixture_stateful_accumulator(directory):
    import coremltools as ct
    import torch

    module = _Accumulator.module()
    traced = torch.jit.trace(module, torch.zeros(1, 8), check_trace=False)  # forward mutates the buffer
    model = ct.convert(
        traced, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
        inputs=[ct.TensorType(name="x", shape=(1, 8))], outputs=[ct.TensorType(name="y")],
        states=[ct.StateType(wrapped_type=ct.TensorType(shape=(1, 8), dtype=np.float16), name="acc")])
    model.save(os.path.join(directory, "model.mlpackage"))
    reference = _Accumulator.module()  # a fresh buffer: the trace above ran forward once
    rng = np.random.default_rng(7)
    steps = []
    with torch.no_grad():
        for _ in range(5):
            x = rng.standard_normal((1, 8)).astype(np.float32)
            y = reference(torch.from_numpy(x)).numpy()
            steps.append(({"x": x}, {"y": y}, {"acc": reference.acc.to(torch.float32).numpy().copy()}))
    _write_case(directory, {"name": "fixture_stateful_accumulator", "format": "mlprogram",
                            "function_name": None, "rtol": 0.02, "atol": 0.05,
                            "states": {"acc": {"dtype": "float16", "shape": [1, 8]}},
                            "opsets": {"main": "CoreML8"}}, steps)


def build_fixture_multifunction(directory):
    """Two functions sharing a Linear(16, 32) base and a head, differing in a rank-2 adapter:
    adapter_a takes x [1, 16], adapter_b x [3, 16]; the default is adapter_a."""
    import coremltools as ct
    import torch

    torch.manual_seed(388785385)
    base, head = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)
    adapters = {name: (torch.nn.Linear(32, 2, bias=False), torch.nn.Linear(2, 32, bias=False))
                for name in ("adapter_a", "adapter_b")}
    batch = {"adapter_a": 1, "adapter_b": 3}

    def forward(name, x):
        down, up = adapters[name]
        h = base(x)
        return head(torch.relu(h + up(down(h))))

    class Function(torch.nn.Module):
        def __init__(self, name):
            super().__init__()
            self.name = name
            self.parts = torch.nn.ModuleList([base, head, *adapters[name]])

        def forward(self, x):
            return forward(self.name, x)

    with tempfile.TemporaryDirectory() as scratch:
        desc = ct.utils.MultiFunctionDescriptor()
        for name in adapters:
            example = torch.zeros(batch[name], 16)
            model = ct.convert(torch.jit.trace(Function(name).eval(), example), convert_to="mlprogram",
                               minimum_deployment_target=ct.target.iOS18,
                               inputs=[ct.TensorType(name="x", shape=example.shape)],
                               outputs=[ct.TensorType(name="y")])
            source = os.path.join(scratch, name + ".mlpackage")
            model.save(source)
            desc.add_function(source, src_function_name="main", target_function_name=name)
        desc.default_function_name = "adapter_a"
        ct.utils.save_multifunction(desc, os.path.join(directory, "model.mlpackage"))
    rng = np.random.default_rng(5)
    cases = {}
    with torch.no_grad():
        for name in adapters:
            x = rng.standard_normal((batch[name], 16)).astype(np.float32)
            cases[name] = ({"x": x}, {"y": forward(name, torch.from_numpy(x)).numpy()}, None)
    for name, step in cases.items():
        sub = os.path.join(directory, name)
        os.makedirs(sub)
        _write_case(sub, {"name": "fixture_multifunction/" + name, "format": "mlprogram", "function_name": name,
                          "default_function_name": "adapter_a", "functions": sorted(adapters),
                          "rtol": 0.02, "atol": 0.01}, [step], model_file=os.path.join("..", "model.mlpackage"))


def build_fixture_fuzz_predict(directory):
    """The model fuzz/fuzz_predict.cc predicts with: x float32 [1..8, 16] (flexible rows),
    indices int32 [4]; y = softmax(relu(linear(gather(x, indices)))), and its row maxima."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import get_new_symbol, types

    rng = np.random.default_rng(20)
    weight = rng.standard_normal((24, 16)).astype(np.float32)
    bias = rng.standard_normal(24).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(get_new_symbol(), 16)), mb.TensorSpec(shape=(4,), dtype=types.int32)],
                opset_version=ct.target.iOS18)
    def prog(x, indices):
        picked = mb.gather(x=x, indices=indices, axis=0, validate_indices=True)
        y = mb.softmax(x=mb.relu(x=mb.linear(x=picked, weight=weight, bias=bias)), axis=-1, name="y")
        return y, mb.reduce_max(x=x, axes=[-1], name="row_max")

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                       compute_precision=ct.precision.FLOAT32, skip_model_load=True,
                       inputs=[ct.TensorType(name="x", shape=(ct.RangeDim(1, 8, default=2), 16)),
                               ct.TensorType(name="indices", shape=(4,), dtype=np.int32)])
    model.save(os.path.join(directory, "model.mlpackage"))
    x = rng.standard_normal((3, 16)).astype(np.float32)
    indices = np.array([0, 2, 1, 2], np.int32)
    h = np.maximum(x[indices].astype(np.float64) @ weight.T + bias, 0)
    e = np.exp(h - h.max(-1, keepdims=True))
    _write_case(directory, {"name": "fixture_fuzz_predict", "format": "mlprogram", "function_name": None,
                            "rtol": 1e-5, "atol": 1e-6},
                [({"x": x, "indices": indices}, {"y": e / e.sum(-1, keepdims=True), "row_max": x.max(-1)}, None)])


def build_fixture_compressed(directory):
    """Linear layers whose weights are stored in each compressed iOS18 form (int4 per block with an
    int4 offset, a 4-bit palette per group of rows, 50 % sparse, sparse + palette, sparse + int8),
    fp32 scales and palettes: y_<form> = x @ W_<form>^T. Small enough to seed the fuzz targets
    (fuzz/make_seeds.py) with packed weights."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    rng = np.random.default_rng(26)
    rows, cols = 16, 64
    d4 = rng.integers(-8, 8, size=(rows, cols)).astype(types.np_int4_dtype)
    s4 = rng.uniform(0.01, 0.1, size=(rows, 2)).astype(np.float32)
    o4 = rng.integers(-8, 8, size=(rows, 2)).astype(types.np_int4_dtype)
    idx = rng.integers(0, 16, size=(rows, cols)).astype(types.np_uint4_dtype)
    lut = rng.standard_normal((rows // 8, 1, 16, 1)).astype(np.float32)
    mask = (rng.random((rows, cols)) < 0.5).astype(types.np_uint1_dtype)
    nz = rng.standard_normal(int(mask.sum())).astype(np.float32)
    nz_idx = rng.integers(0, 16, size=int(mask.sum())).astype(types.np_uint4_dtype)
    nz_q = rng.integers(-127, 128, size=int(mask.sum())).astype(np.int8)
    s_q = rng.uniform(0.001, 0.01, size=(rows, 1)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, cols))], opset_version=ct.target.iOS18)
    def prog(x):
        m1, v1 = mb.constexpr_lut_to_sparse(indices_mask=mask, indices_nonzero_data=nz_idx, lut=lut)
        m2, v2 = mb.constexpr_sparse_blockwise_shift_scale(data_mask=mask, nonzero_data=nz_q, scale=s_q)
        weights = {
            "int4_block": mb.constexpr_blockwise_shift_scale(data=d4, scale=s4, offset=o4),
            "palette": mb.constexpr_lut_to_dense(indices=idx, lut=lut),
            "sparse": mb.constexpr_sparse_to_dense(nonzero_data=nz, mask=mask),
            "sparse_palette": mb.constexpr_sparse_to_dense(nonzero_data=v1, mask=m1),
            "sparse_int8": mb.constexpr_sparse_to_dense(nonzero_data=v2, mask=m2),
        }
        return tuple(mb.linear(x=x, weight=w, name=name) for name, w in weights.items())

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                       compute_precision=ct.precision.FLOAT32, skip_model_load=True)
    model.save(os.path.join(directory, "model.mlpackage"))
    nonzero = mask != 0
    row_of = np.nonzero(nonzero)[0]
    dense = {"int4_block": (d4.astype(np.float64) - np.repeat(o4, 32, axis=1)) * np.repeat(s4, 32, axis=1),
             "palette": np.take_along_axis(np.repeat(lut[:, 0, :, 0], 8, axis=0), idx.astype(np.int64), axis=1)}
    for name, values in (("sparse", nz), ("sparse_palette", lut[row_of // 8, 0, nz_idx.astype(np.int64), 0]),
                         ("sparse_int8", nz_q.astype(np.float64) * s_q[row_of, 0])):
        dense[name] = np.zeros((rows, cols))
        dense[name][nonzero] = values
    x = rng.standard_normal((2, cols)).astype(np.float32)
    expected = {name: (x.astype(np.float64) @ w.T).astype(np.float32) for name, w in dense.items()}
    _write_case(directory, {"name": "fixture_compressed", "format": "mlprogram", "function_name": None,
                            "rtol": 1e-5, "atol": 1e-5}, [({"x": x}, expected, None)])


def build_fixture_doc_model(directory):
    """The model the guides' examples name (docs/guide/cpp.md, tests/python/docs/doc_examples.py):
    x float32 [1, 3] -> y = relu(x + 1), computed in fp32."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.relu(x=mb.add(x=x, y=np.float32(1.0)), name="y")

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                       compute_precision=ct.precision.FLOAT32)
    model.save(os.path.join(directory, "model.mlpackage"))
    x = np.array([[-2.0, 0.0, 2.0]], np.float32)
    _write_case(directory, {"name": "fixture_doc_model", "format": "mlprogram", "function_name": None,
                            "rtol": 0.0, "atol": 0.0, "opsets": {"main": "CoreML8"}},
                [({"x": x}, {"y": np.maximum(x + 1, 0)}, None)])


def build_fixture_lstm(directory):
    """A forward lstm op wide enough that its steps are split over threads (src/ops/recurrent.cc,
    StepBlocks): x [5, 1, 40] fp32, hidden 136, zero initial state; output 'y' [5, 1, 136],
    checked against numpy in float64."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    rng = np.random.default_rng(20261205)
    hidden, inputs = 136, 40
    w_ih = (rng.standard_normal((4 * hidden, inputs)) * 0.2).astype(np.float32)
    w_hh = (rng.standard_normal((4 * hidden, hidden)) * 0.1).astype(np.float32)
    bias = rng.standard_normal(4 * hidden).astype(np.float32)
    zeros = np.zeros((1, hidden), np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(5, 1, inputs))], opset_version=ct.target.iOS18)
    def prog(x):
        y, _, _ = mb.lstm(x=x, initial_h=zeros, initial_c=zeros, weight_ih=w_ih, weight_hh=w_hh, bias=bias,
                          output_sequence=True)
        return mb.identity(x=y, name="y")

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                       compute_precision=ct.precision.FLOAT32)
    model.save(os.path.join(directory, "model.mlpackage"))
    x = rng.standard_normal((5, 1, inputs)).astype(np.float32)
    h, c, ys = np.zeros((1, hidden)), np.zeros((1, hidden)), []
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    for step in x.astype(np.float64):
        g = step @ w_ih.T.astype(np.float64) + h @ w_hh.T.astype(np.float64) + bias
        i, f, o, z = np.split(g, 4, axis=1)  # MIL's gate order
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(z)
        h = sigmoid(o) * np.tanh(c)
        ys.append(h)
    _write_case(directory, {"name": "fixture_lstm", "format": "mlprogram", "function_name": None,
                            "rtol": 1e-5, "atol": 1e-5, "opsets": {"main": "CoreML8"}},
                [({"x": x}, {"y": np.stack(ys).astype(np.float32)}, None)])


def build_fixture_attention(directory):
    """scaled_dot_product_attention over twelve heads (src/ops/attention.cc spreads them over the
    threads, each computed whole by one): q [1, 12, 5, 16], k [1, 12, 40, 16], v [1, 12, 40, 8]
    fp32 and an additive mask [1, 12, 5, 40] of each head's own; output 'y' [1, 12, 5, 8],
    checked against numpy in float64."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    rng = np.random.default_rng(20261205)
    q_shape, k_shape, v_shape, m_shape = (1, 12, 5, 16), (1, 12, 40, 16), (1, 12, 40, 8), (1, 12, 5, 40)

    @mb.program(input_specs=[mb.TensorSpec(shape=q_shape), mb.TensorSpec(shape=k_shape),
                             mb.TensorSpec(shape=v_shape), mb.TensorSpec(shape=m_shape)],
                opset_version=ct.target.iOS18)
    def prog(q, k, v, m):
        return mb.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=m, name="y")

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                       compute_precision=ct.precision.FLOAT32)
    model.save(os.path.join(directory, "model.mlpackage"))
    feed = {n: rng.standard_normal(shape).astype(np.float32)
            for n, shape in (("q", q_shape), ("k", k_shape), ("v", v_shape), ("m", m_shape))}
    q, k, v, m = (feed[n].astype(np.float64) for n in "qkvm")
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(16) + m
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    _write_case(directory, {"name": "fixture_attention", "format": "mlprogram", "function_name": None,
                            "rtol": 1e-5, "atol": 1e-5, "opsets": {"main": "CoreML8"}},
                [(feed, {"y": (weights @ v).astype(np.float32)}, None)])


BUILDERS = {
    "fixture_add": build_fixture_add,
    "fixture_doc_model": build_fixture_doc_model,
    "fixture_stateful_accumulator": build_fixture_stateful_accumulator,
    "fixture_multifunction": build_fixture_multifunction,
    "fixture_fuzz_predict": build_fixture_fuzz_predict,
    "fixture_compressed": build_fixture_compressed,
    "fixture_lstm": build_fixture_lstm,
    "fixture_attention": build_fixture_attention,
}


def case_dir(name, root=None):
    """The folder of a generated case ('fixture_multifunction/adapter_b' names a function's
    case inside its package's folder), building it on first use."""
    root = root or FIXTURES_DIR
    top, _, sub = name.partition("/")
    if top not in BUILDERS:
        raise KeyError(f"no test fixture named {top!r}; known: {sorted(BUILDERS)}")
    target = os.path.join(os.path.abspath(root), f"v{GENERATOR_VERSION}", top)
    if not os.path.isdir(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # Built beside the target, then renamed: concurrent test processes never see half a case.
        scratch = tempfile.mkdtemp(prefix=top + ".", dir=os.path.dirname(target))
        try:
            BUILDERS[top](scratch)
            os.rename(scratch, target)
        except OSError:
            if not os.path.isdir(target):
                raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return os.path.join(target, sub) if sub else target


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=FIXTURES_DIR)
    parser.add_argument("names", nargs="*", default=sorted(BUILDERS))
    args = parser.parse_args(argv)
    for name in args.names:
        print("case:", case_dir(name, args.out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
