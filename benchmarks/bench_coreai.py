"""Core AI models (.aimodel) on coreai-core's own runtime and on coremlrt, and coremlrt on the
Core ML conversion of the same network, in one run on this machine.

    python3 benchmarks/bench_coreai.py [--runs 30] [--threads N] [--only resnet18 ...]
    python3 benchmarks/bench_coreai.py --only tiny --runs 2      # smoke run (under a minute)

Each network of benchmarks/peer_models.py (fp32) is converted once from its torch module with
coreai-torch into an .aimodel, cached under build/bench-models/coreai/ (--models-dir); its Core
ML fp32 model is peer_models.build's (--coreml-dir, the folder bench_peers.py uses). Three
contenders run interleaved as bench_peers.py's measure() runs its own (turns of a few timed
runs after an untimed one, in shuffled order, round after round; medians):

* (a) coreai.runtime, coreai-core's runtime: the .aimodel loaded once
  (AIModelAsset.load(path).executable()), one function, awaited again and again in one asyncio
  loop with NDArray inputs made once. It has no thread setting: it uses the threads it chooses,
  whatever --threads says;
* (b) coremlrt on the same .aimodel: MLModel(path), default backend, --threads threads;
* (c) coremlrt on the Core ML model, the same options.

It prints the median latency of each, the two ratios coremlrt is held to, a / b (goal >= 10)
and b / c (goal <= 1.1), and max |a - b| over the outputs of one prediction each on the same
inputs (and, for the stateful networks, fresh zero states), with max |b - c| and the largest
|output| of b for scale. --placements adds, per network, how many ops of (b) and (c) run where
(MLModel.placements()) and where the translated program is.

Stateful networks (gpt2_prefill, gpt2_decode): the key/value caches are buffers written in
place, converted as Core AI states (add_pytorch_module(state_names=...)). coreai.runtime gets
caller-allocated NDArray states, coremlrt one make_state(); each contender keeps its own states
across its runs, as a decode loop keeps them. peer_models' step writes its cache rows into a
slice whose bounds are taken from the `start` input, which torch.export (and so coreai-torch)
cannot trace: such a network's row reads "not convertible: <reason>". A second row,
"<network> [index_copy_]", measures the same step with the same weights written so that it
exports: the rows go in with index_copy_ at the positions tensor (torch gives the same logits
and caches, bit for bit); its Core ML column is peer_models' module, as converted for
bench_peers.py. Absolute times on a shared machine are noise; ratios of one run are the result.
"""

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import pathlib
import statistics
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_models  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(ROOT, "build", "bench-models", "coreai")
# Timed runs per contender in one turn of the interleaving, as in bench_peers.py.
BLOCK = 5
VARIANT = " [index_copy_]"
LABELS = ("coreai.runtime", "coremlrt .aimodel", "coremlrt Core ML")


def _exportable_step(module):
    """peer_models' Gpt step with the cache rows written by index_copy_ at the positions tensor
    (a slice whose bounds come from an input needs a Python int, which torch.export cannot
    trace); the same submodules, hence the same weights, and caches of the same names."""
    import torch

    T, head_dim = module.seq_len, peer_models.GPT_DIM // peer_models.GPT_HEADS

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos, self.blocks, self.norm = module.emb, module.pos, module.blocks, module.norm
            # Buffers of this module, not of a submodule: their names become the state names as they
            # are ("k_cache", not "gpt.k_cache", which the translation would spell gpt_k_cache).
            self.register_buffer("k_cache", module.k_cache.clone())
            self.register_buffer("v_cache", module.v_cache.clone())

        def forward(self, tokens, start):
            positions = torch.arange(T, dtype=torch.int32) + start
            x = self.emb(tokens[0]) + self.pos(positions)
            keys = torch.arange(peer_models.GPT_MAX, dtype=torch.int32)
            bias = torch.where(keys[None, :] <= positions[:, None], 0.0, -1e4)
            rows = positions.to(torch.int64)
            for i, b in enumerate(self.blocks):
                q, k, v = b.qkv(b.n1(x)).reshape(T, 3, peer_models.GPT_HEADS, head_dim).permute(1, 2, 0, 3)
                self.k_cache[i].index_copy_(1, rows, k.to(torch.float16))
                self.v_cache[i].index_copy_(1, rows, v.to(torch.float16))
                scores = q @ self.k_cache[i].to(torch.float32).transpose(1, 2) / head_dim ** 0.5 + bias
                attended = torch.softmax(scores, dim=-1) @ self.v_cache[i].to(torch.float32)
                x = x + b.o(attended.permute(1, 0, 2).reshape(T, peer_models.GPT_DIM))
                x = x + b.ff2(torch.nn.functional.gelu(b.ff1(b.n2(x))))
            return (self.norm(x) @ self.emb.weight.T)[None]

    return Step().eval()


def _convert(module, args, names, path, states):
    import coreai_torch
    import torch

    def export(m):
        return torch.export.export(m, args=args).run_decompositions(coreai_torch.get_decomp_table())

    converter = coreai_torch.TorchConverter(mode=coreai_torch.TorchConverter.Mode.RELEASE)
    extra = {"state_names": states} if states else {}
    converter.add_pytorch_module(module, export_fn=export, input_names=names, output_names=["output"], **extra)
    converter.to_coreai().save_asset(pathlib.Path(path))


def _first_line(exc):
    text = " ".join(str(exc).split())
    # coreai-torch wraps torch.export's error: keep the words that say why.
    text = text.replace("Your model failed to export: ", "torch.export: ")
    return text.split(" Caused by:")[0].split(" (Size-like")[0][:160]


def build(name, directory):
    """Converts network `name` with coreai-torch (once; later calls read the manifest). Returns
    {row: {"aimodel": path} or {"error": reason}}: one row, two for a stateful network whose
    module does not convert as it is (the second: the index_copy_ form)."""
    import torch

    out = os.path.join(directory, name)
    manifest = os.path.join(out, "aimodels.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            return json.load(f)
    os.makedirs(out, exist_ok=True)
    stateful = name in peer_models.STATEFUL
    torch.manual_seed(0)  # as peer_models.build: the same weights as the Core ML model
    module, inputs = peer_models.NETWORKS[name]()
    module.eval()
    args = peer_models._torch_inputs(inputs, keep_int32=stateful)
    states = ["k_cache", "v_cache"] if stateful else None
    # What the runner of coreai.runtime needs besides the file: the input names in the order the
    # inputs file holds the values, and the states to allocate.
    info = {"inputs": list(inputs),
            "states": [{"name": n, "shape": list(getattr(module, n).shape), "dtype": str(getattr(module, n).dtype)[6:]}
                       for n in states or []]}
    rows = {}
    # A failed export logs the whole traced graph; the reason is in the row.
    logging.getLogger("torch.fx.experimental.symbolic_shapes").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # coreai-torch warns about torch versions newer than it was tested with
        path = os.path.join(out, f"{name}.aimodel")
        try:
            _convert(module, args, list(inputs), path, states)
            rows[name] = dict(info, aimodel=path)
        except Exception as exc:
            rows[name] = {"error": _first_line(exc)}
            if stateful:
                path = os.path.join(out, f"{name}_index_copy.aimodel")
                try:
                    _convert(_exportable_step(module), args, list(inputs), path, states)
                    rows[name + VARIANT] = dict(info, aimodel=path)
                except Exception as exc2:
                    rows[name + VARIANT] = {"error": _first_line(exc2)}
    with open(manifest, "w") as f:
        json.dump(rows, f, indent=1)
    return rows


def _check_apple_runtime():
    """coreai.runtime must be coreai-core's own: COREMLRT_COREAI=1 puts coremlrt under it."""
    from coreai.runtime import NDArray

    if os.environ.get("COREMLRT_COREAI") == "1" or not NDArray.__module__.startswith("coreai."):
        raise SystemExit("coreai.runtime is coremlrt's stand-in here (COREMLRT_COREAI=1): unset it to measure "
                         "coreai-core's own runtime")


async def _apple_runner(stack, path, inputs, state_specs):
    from coreai.authoring import AIModelAsset
    from coreai.runtime import NDArray

    model = await stack.enter_async_context(AIModelAsset.load(path).executable())
    function = model.load_function("main")
    feeds = {k: NDArray(np.ascontiguousarray(v)) for k, v in inputs.items()}

    def fresh_state():
        return {s["name"]: NDArray(np.zeros(s["shape"], s["dtype"])) for s in state_specs}

    state = fresh_state() if state_specs else None

    async def run():
        return await function(feeds, state=state) if state is not None else await function(feeds)

    async def once():  # one prediction on fresh states, as numpy arrays
        out = await function(feeds, state=fresh_state()) if state_specs else await function(feeds)
        return [v.numpy() for v in out.values()]

    return run, once


def _coremlrt_runner(path, inputs, threads, cache_dir):
    import coremlrt

    model = coremlrt.MLModel(path, threads=threads, cache_dir=cache_dir)
    feed = dict(inputs)
    stateful = bool(model._function["states"])
    state = model.make_state() if stateful else None

    async def run():
        return model.predict(feed, state=state) if stateful else model.predict(feed)

    async def once():
        out = model.predict(feed, state=model.make_state()) if stateful else model.predict(feed)
        return list(out.values())

    return model, run, once


def _max_diff(a, b):
    if a is None or b is None or len(a) != len(b):
        return float("nan")
    return max(float(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)).max()) for x, y in zip(a, b))


def _max_abs(values):
    return max(float(np.abs(v).max()) for v in values) if values else float("nan")


def _placement_summary(model):
    counts = {}
    for p in model.placements():
        counts[p["backend"]] = counts.get(p["backend"], 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


async def measure(entry, coreml, values, threads, runs, warmup, cache_dir, placements):
    """Median ms of each contender that could run, their errors, max |a - b| and |b - c|, notes."""
    runners, onces, errors, notes = {}, {}, {}, []
    aimodel_inputs = dict(zip(entry["inputs"], values))
    async with contextlib.AsyncExitStack() as stack:
        try:
            specs = [dict(s, dtype=np.dtype(s["dtype"])) for s in entry["states"]]
            runners[LABELS[0]], onces[LABELS[0]] = await _apple_runner(stack, entry["aimodel"], aimodel_inputs, specs)
        except Exception as exc:  # reported in the table, not fatal
            errors[LABELS[0]] = f"{type(exc).__name__}: {_first_line(exc)}"
        for label, path, inputs in ((LABELS[1], entry["aimodel"], aimodel_inputs),
                                    (LABELS[2], coreml["path"], dict(zip(coreml["names"], values)))):
            try:
                model, runners[label], onces[label] = _coremlrt_runner(path, inputs, threads, cache_dir)
                if placements:
                    notes.append(f"{label}: {_placement_summary(model)} ({model.package_path})")
            except Exception as exc:
                errors[label] = f"{type(exc).__name__}: {_first_line(exc)}"
        outputs = {}
        for label, once in onces.items():
            try:
                outputs[label] = await once()
                for _ in range(warmup):
                    await runners[label]()
            except Exception as exc:
                errors[label] = f"{type(exc).__name__}: {_first_line(exc)}"
                del runners[label]
        times = {label: [] for label in runners}
        order = list(runners.items())
        shuffle = np.random.default_rng(0)
        while any(len(t) < runs for t in times.values()):
            shuffle.shuffle(order)  # no contender always runs right after the same other one
            for label, run in order:
                # An untimed run first: the previous contender's threads may still hold the cores.
                await run()
                for _ in range(min(BLOCK, runs - len(times[label]))):
                    start = time.perf_counter()
                    await run()
                    times[label].append(time.perf_counter() - start)
    medians = {label: statistics.median(t) * 1000 for label, t in times.items()}
    diffs = (_max_diff(outputs.get(LABELS[0]), outputs.get(LABELS[1])),
             _max_diff(outputs.get(LABELS[1]), outputs.get(LABELS[2])), _max_abs(outputs.get(LABELS[1])))
    return medians, errors, diffs, notes


def _fmt_ms(v):
    return f"{v:.3g}" if v is not None else "—"


def print_table(rows):
    head = ["network", "coreai.runtime ms", "coremlrt .aimodel ms", "coremlrt Core ML ms",
            "runtime/.aimodel (>=10)", ".aimodel/Core ML (<=1.1)", "max|a-b|", "max|b-c|", "max|b|"]
    lines = [head]
    for name, r in rows.items():
        if "error" in r:
            lines.append([name, f"not convertible: {r['error']}"])
            continue
        t = r["times"]
        a, b, c = (t.get(label) for label in LABELS)
        lines.append([name, _fmt_ms(a), _fmt_ms(b), _fmt_ms(c),
                      f"{a / b:.1f}x" if a and b else "—", f"{b / c:.2f}x" if b and c else "—",
                      f"{r['diffs'][0]:.2g}", f"{r['diffs'][1]:.2g}", f"{r['diffs'][2]:.2g}"])
    widths = [max(len(line[i]) for line in lines if len(line) > i and len(line) == len(head)) for i in range(len(head))]
    for line in lines:
        if len(line) == len(head):
            print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)))
        else:
            print(line[0].ljust(widths[0]) + "  " + line[1])
    for name, r in rows.items():
        for label, err in r.get("errors", {}).items():
            print(f"could not run: {name}, {label}: {err}")
        for note in r.get("notes", []):
            print(f"{name}: {note}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="timed runs per contender (median)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs per contender after loading")
    parser.add_argument("--threads", type=int, default=None,
                        help="coremlrt threads (default: every core); coreai.runtime has no such setting")
    parser.add_argument("--only", nargs="*", default=list(peer_models.NETWORKS), choices=list(peer_models.NETWORKS))
    parser.add_argument("--models-dir", default=DEFAULT_DIR, help="the .aimodel cache (and coremlrt's, under cache/)")
    parser.add_argument("--coreml-dir", default=peer_models.DEFAULT_DIR, help="peer_models' Core ML cache")
    parser.add_argument("--placements", action="store_true", help="print where the ops of (b) and (c) run")
    args = parser.parse_args(argv)
    _check_apple_runtime()
    # Both coremlrt contenders with the same cache (translated programs, compiled backend regions).
    cache_dir = os.path.join(args.models_dir, "cache")
    rows = {}
    for name in args.only:
        coreml_paths = peer_models.build(name, args.coreml_dir)
        values = list(np.load(coreml_paths["inputs"]).values())
        # The inputs file of a stateful network also holds the caches for ONNX: its first inputs only.
        values = values[:len(coreml_paths["coreml_inputs"])]
        coreml = {"path": coreml_paths["coreml_fp32"], "names": coreml_paths["coreml_inputs"]}
        for row, entry in build(name, args.models_dir).items():
            if "error" in entry:
                rows[row] = entry
                print(f"{row}: not convertible: {entry['error']}", flush=True)
                continue
            times, errors, diffs, notes = asyncio.run(
                measure(entry, coreml, values, args.threads, args.runs, args.warmup, cache_dir,
                        args.placements))
            rows[row] = {"times": times, "errors": errors, "diffs": diffs, "notes": notes}
            print(f"{row}: " + ", ".join(f"{k} {v:.3g} ms" for k, v in times.items()) +
                  "".join(f"; {k} failed: {v}" for k, v in errors.items()), flush=True)
            gc.collect()
    print()
    print(f"median of {args.runs} runs, coremlrt threads: {args.threads or 'all'} "
          f"(coreai.runtime: its own choice); a = coreai.runtime, b = coremlrt .aimodel, c = coremlrt Core ML")
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
