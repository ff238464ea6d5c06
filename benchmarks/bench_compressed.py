"""Compressed models: coremlrt on the forms coremltools.optimize writes, against its own fp16
model and against OpenVINO on the same weights, in one run on this machine.

    python3 benchmarks/bench_compressed.py [--runs 20] [--threads 1 2] [--only lm6 lm1b resnet18 mobilenet_v2]
                                           [--forms fp16 int8 ...] [--skip-1b] [--no-write]

The models (benchmarks/compressed_models.py, built once and cached under
build/bench-models/compressed/): a 6-layer GPT-2-like decoder (lm6) as one multifunction
package (prefill of a 128-token prompt, one decode step, sharing the KV-cache state), a decoder
of 1.07 B parameters of the same architecture (lm1b, fp16 and int4 only), resnet18 and
mobilenet_v2, each in fp16, int8 per channel, int4 per block of 32, 4-bit palettized per group
of 16 channels, 50 % sparse, and sparse + palettized.

Contenders:

* coremlrt with backend "auto" and "reference" on every form (packed weights, the default);
* OpenVINO itself on the same torch module converted by openvino.convert_model and compressed by
  nncf (fp16, int8, int4: it has no palettized or sparse form), computing in f32
  (INFERENCE_PRECISION_HINT "f32") with float activations (DYNAMIC_QUANTIZATION_GROUP_SIZE 0:
  its default quantizes activations to int8 for compressed weights, which Core ML does not do).
  Its decoder is stateful, as OpenVINO's own language models are (benchmarks/compressed_models.py,
  _openvino_model): one model with a dynamic token count whose KV caches are the infer request's
  variables, so neither side copies its caches per step;
* OpenVINO with its own defaults ("openvino defaults": the same models and threads, no precision
  hint, activations quantized as its CPU plugin chooses), what a user of OpenVINO alone gets;
* torch eager on the fp32 module, once per model (form "fp32"), as a reference point.

Latency: for every thread count (threads= for coremlrt, INFERENCE_NUM_THREADS for OpenVINO,
torch.set_num_threads), every contender of a model is loaded in this process and they run
interleaved as benchmarks/bench_peers.measure runs them: turns of a few timed runs after an
untimed one, in shuffled order, round after round; medians. A decoder's prefill runs the prompt
from position 0 and its decode step the token after it, on a state the prefill filled. lm1b's
prefill takes seconds a run: it gets a fifth of --runs (at least 3).

Load and memory, each in a fresh process (this file's --worker mode, OPENBLAS_NUM_THREADS=1,
threads = the most asked for), also for coremlrt with backend "openvino" (every region compiled
by OpenVINO; not for lm1b, whose fp16 weights OpenVINO would widen to fp32, 4.3 GB): cold load (cache_dir=None; both functions of a decoder; OpenVINO:
compile_model of the IR), cached load (the second of two processes given the same new cache
folder: the first fills it), and RssAnon / RssFile of /proc/self/status before loading (the
interpreter and the runtime's libraries), after loading, and after a prefill and 100 greedy
decode steps (20 predictions for the CNNs). Weight files stay in the page cache throughout:
"cold" means without compiled-region cache, not from disk.

Accuracy: the largest |difference| between the outputs of the packed model (a decoder: the
prefill logits and one decode step's) and the same package loaded with packed_weights=False
(every weight decoded at load), for coremlrt reference and auto, in a fresh process.

Ratios (a table per model): latency against coremlrt's fp16 model on the same backend and
against OpenVINO on the same weights; memory growth (after the steps, anon + file, less the
RSS before loading) against 1.1 x the Core ML package's weight bytes + 64 MB; load times
against OpenVINO's. Absolute times on a shared machine are noise; ratios measured in the same
run are the result. The tables are printed and, unless --no-write, replace the section
"Compressed models" of docs/reports/performance.md (appended when absent; the rest of the file is left
as it is).
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_peers  # noqa: E402
import compressed_models as cm  # noqa: E402

ROOT = bench_peers.ROOT
CONTENDERS = ("coremlrt auto", "coremlrt reference", "openvino", "openvino defaults", "torch eager")
# Load and memory are also measured with backend="openvino" (every region compiled by
# OpenVINO, which keeps its own copy of the weights it repacks), except for lm1b.
LOAD_CONTENDERS = ("coremlrt auto", "coremlrt reference", "coremlrt openvino", "openvino")
DECODE_STEPS = 100
CNN_PREDICTIONS = 20
MB = 2 ** 20
SECTION = "## Compressed models"


# -- runners ---------------------------------------------------------------------------------

def _decoder_feeds(inputs, prompt):
    return ({"tokens": inputs["tokens"], "start": np.array([0], np.int32)},
            {"tokens": inputs["token"], "start": np.array([prompt], np.int32)})


def _coremlrt_load(path, kind, backend, threads, cache_dir, packed_weights=True):
    """{"predict": model} for a CNN, {"prefill": model, "decode": model} for a decoder."""
    import coremlrt

    options = dict(backend=backend, threads=threads, cache_dir=cache_dir, packed_weights=packed_weights)
    if kind == "cnn":
        return {"predict": coremlrt.MLModel(path, **options)}
    return {f: coremlrt.MLModel(path, function_name=f, **options) for f in ("prefill", "decode")}


def _openvino_compile(path, threads, cache_dir=None, defaults=False):
    """OpenVINO computing as Core ML does (f32, float activations), or with its own defaults
    (`defaults`: the precision and activation quantization its CPU plugin picks)."""
    import openvino as ov

    core = ov.Core()
    if cache_dir:
        core.set_property({"CACHE_DIR": cache_dir})
    config = {"PERFORMANCE_HINT": "LATENCY"} if defaults else {
        "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY",
        # Float activations, as Core ML computes them (its default for compressed weights
        # quantizes them to int8 on the fly).
        "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
    if threads:
        config["INFERENCE_NUM_THREADS"] = threads
    # From the path: with a cache folder, a cached model is not even read.
    return core.compile_model(path, "CPU", config)


def _coremlrt_runners(manifest, form, backend, threads, inputs):
    models = _coremlrt_load(manifest["coreml"][form], manifest["kind"], backend, threads, None)
    if manifest["kind"] == "cnn":
        model, feed = models["predict"], {"image": inputs["image"]}
        return {"predict": lambda: model.predict(feed)}
    prompt, step = _decoder_feeds(inputs, manifest["config"]["prompt"])
    prefill, decode = models["prefill"], models["decode"]
    state = prefill.make_state()
    prefill.predict(prompt, state=state)
    return {"prefill": lambda: prefill.predict(prompt, state=state),
            "decode": lambda: decode.predict(step, state=state)}


def _openvino_runners(manifest, form, threads, inputs, defaults=False):
    compiled = _openvino_compile(manifest["openvino"][form], threads, defaults=defaults)
    if manifest["kind"] == "cnn":
        request = compiled.create_infer_request()
        feed = {"image": inputs["image"]}
        return {"predict": lambda: request.infer(feed, share_inputs=True)}
    prompt, step = _decoder_feeds(inputs, manifest["config"]["prompt"])
    # One request per phase (switching a request between token counts reshapes it), each with
    # its own caches (the request's variables): the decode step's filled by a prefill first.
    prefill, decode = compiled.create_infer_request(), compiled.create_infer_request()
    prefill.infer(prompt, share_inputs=True)
    decode.infer(prompt, share_inputs=True)
    return {"prefill": lambda: prefill.infer(prompt, share_inputs=True),
            "decode": lambda: decode.infer(step, share_inputs=True)}


def _torch_runners(manifest, threads, inputs, tiny):
    import torch

    torch.set_num_threads(threads)
    module = cm.make_module(manifest["model"], tiny)

    def run(args):
        with torch.inference_mode():
            return module(*args)

    if manifest["kind"] == "cnn":
        image = (torch.from_numpy(inputs["image"]),)
        return {"predict": lambda: run(image)}
    # The module's own cache buffers are its state.
    prompt, step = ((torch.from_numpy(feed["tokens"]), torch.from_numpy(feed["start"]))
                    for feed in _decoder_feeds(inputs, manifest["config"]["prompt"]))
    run(prompt)
    return {"prefill": lambda: run(prompt), "decode": lambda: run(step)}


def contenders(manifest, forms, threads, inputs, tiny):
    """(form, contender, make-runners) triples; runners are made lazily so that one that fails
    is reported and the others still run."""
    out = []
    for form in forms:
        for backend in ("auto", "reference"):
            out.append((form, f"coremlrt {backend}",
                        lambda f=form, b=backend: _coremlrt_runners(manifest, f, b, threads, inputs)))
        if form in manifest["openvino"]:
            out.append((form, "openvino", lambda f=form: _openvino_runners(manifest, f, threads, inputs)))
            out.append((form, "openvino defaults",
                        lambda f=form: _openvino_runners(manifest, f, threads, inputs, defaults=True)))
    out.append(("fp32", "torch eager", lambda: _torch_runners(manifest, threads, inputs, tiny)))
    return out


def _error(exc):
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


def measure(manifest, forms, threads, runs, warmup, tiny, block=bench_peers.BLOCK):
    """{(form, contender, phase): median ms}, {label: error} at `threads`."""
    inputs = dict(np.load(manifest["inputs"]))
    runners, errors = {}, {}
    for form, contender, make in contenders(manifest, forms, threads, inputs, tiny):
        try:
            for phase, run in make().items():
                for _ in range(warmup):
                    run()
                runners[(form, contender, phase)] = run
        except Exception as exc:  # a contender that cannot run this model is reported, not fatal
            errors[f"{form} {contender} ({threads} thr)"] = _error(exc)
    wanted = {key: max(3, runs // 5) if manifest["model"] == "lm1b" and key[2] == "prefill" else runs for key in runners}
    times = {key: [] for key in runners}
    order = list(runners.items())
    shuffle = np.random.default_rng(0)
    while any(len(times[key]) < wanted[key] for key in runners):
        shuffle.shuffle(order)  # no contender always runs right after the same other one
        for key, run in order:
            if len(times[key]) >= wanted[key]:
                continue
            # The untimed run of a turn absorbs the switch from the previous contender (threads
            # still spinning, caches holding its weights): benchmarks/bench_peers.measure.
            run()
            for _ in range(min(block, wanted[key] - len(times[key]))):
                start = time.perf_counter()
                run()
                times[key].append(time.perf_counter() - start)
    return {key: statistics.median(t) * 1000 for key, t in times.items()}, errors


# -- fresh-process measurements --------------------------------------------------------------

def _rss_mb():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("RssAnon", "RssFile"):
                out[key[3:].lower()] = int(line.split()[1]) / 1024
    return out


def _worker_load(task):
    """Loads one contender's model, and (steps > 0) runs a prefill and `steps` greedy decode steps
    or `steps` predictions, noting RSS before, after load and after the steps."""
    kind, contender, steps = task["kind"], task["contender"], task["steps"]
    if contender == "openvino":
        import openvino  # noqa: F401
    else:
        import coremlrt  # noqa: F401
    inputs = dict(np.load(task["inputs"]))
    before = _rss_mb()
    start = time.perf_counter()
    if contender == "openvino":
        compiled = _openvino_compile(task["path"], task["threads"], task["cache_dir"])
    else:
        models = _coremlrt_load(task["path"], kind, contender.split()[1], task["threads"], task["cache_dir"])
    load_s = time.perf_counter() - start
    loaded = _rss_mb()
    if steps:
        if kind == "cnn":
            if contender == "openvino":
                request = compiled.create_infer_request()
                for _ in range(steps):
                    request.infer({"image": inputs["image"]})
            else:
                for _ in range(steps):
                    models["predict"].predict({"image": inputs["image"]})
        else:
            prompt_len = task["prompt"]
            prompt, _ = _decoder_feeds(inputs, prompt_len)
            if contender == "openvino":
                request = compiled.create_infer_request()  # its variables hold the caches
                out = request.infer(prompt)
                for i in range(steps):
                    token = np.array([[np.argmax(out["logits"][0, -1])]], np.int32)
                    out = request.infer({"tokens": token, "start": np.array([prompt_len + i], np.int32)})
            else:
                state = models["prefill"].make_state()
                logits = models["prefill"].predict(prompt, state=state)["logits"]
                for i in range(steps):
                    token = np.array([[np.argmax(logits[0, -1])]], np.int32)
                    logits = models["decode"].predict({"tokens": token, "start": np.array([prompt_len + i], np.int32)},
                                                      state=state)["logits"]
    return {"load_s": load_s, "rss_mb": {"before": before, "loaded": loaded, "steps": _rss_mb()}}


def _worker_diff(task):
    """max |packed - folded| over the outputs, and where the packed model's ops run."""
    inputs = dict(np.load(task["inputs"]))
    outputs, placements = {}, {}
    for packed in (True, False):
        models = _coremlrt_load(task["path"], task["kind"], task["backend"], task["threads"], None, packed_weights=packed)
        if task["kind"] == "cnn":
            outputs[packed] = [models["predict"].predict({"image": inputs["image"]})["output"]]
        else:
            prompt, step = _decoder_feeds(inputs, task["prompt"])
            state = models["prefill"].make_state()
            outputs[packed] = [models["prefill"].predict(prompt, state=state)["logits"],
                               models["decode"].predict(step, state=state)["logits"]]
        if packed:
            # The function a decode loop spends its time in; a CNN's only one.
            for p in models["decode" if task["kind"] == "decoder" else "predict"].placements():
                placements[p["backend"]] = placements.get(p["backend"], 0) + 1
        del models
    # Each output on its own: a decoder's prefill (many rows of A: the panel path) and its decode
    # step (one row: the register loops, where the CPU has them) differ from the folded model in
    # different ways (docs/design/compressed-weights.md, "Kernels").
    diffs = [float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(outputs[True], outputs[False])]
    return {"max_abs_diff": max(diffs), "max_abs_diffs": diffs,
            "max_abs": max(float(np.max(np.abs(a))) for a in outputs[True]), "placements": placements}


def _run_worker(task):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(task)],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise RuntimeError(f"worker exited with {proc.returncode}: {tail[:200]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _load_contenders(manifest, form):
    return [c for c in LOAD_CONTENDERS
            if not (c == "openvino" and form not in manifest["openvino"])
            and not (c == "coremlrt openvino" and manifest["model"] == "lm1b")]


def loads_and_memory(manifest, forms, threads):
    """{(form, contender): {"cold_s", "cached_s", "rss_mb"}}, {label: error}."""
    kind = manifest["kind"]
    base = {"kind": kind, "inputs": manifest["inputs"], "threads": threads}
    if kind == "decoder":
        base.update(prompt=manifest["config"]["prompt"])
    out, errors = {}, {}
    for form in forms:
        for contender in _load_contenders(manifest, form):
            path = manifest["openvino" if contender == "openvino" else "coreml"][form]
            task = dict(base, contender=contender, path=path)
            try:
                cold = _run_worker(dict(task, cache_dir=None, steps=DECODE_STEPS if kind == "decoder" else CNN_PREDICTIONS))
                with tempfile.TemporaryDirectory() as cache:
                    _run_worker(dict(task, cache_dir=cache, steps=0))
                    cached = _run_worker(dict(task, cache_dir=cache, steps=0))
                out[(form, contender)] = {"cold_s": cold["load_s"], "cached_s": cached["load_s"], "rss_mb": cold["rss_mb"]}
            except Exception as exc:
                errors[f"{form} {contender} (load)"] = _error(exc)
    return out, errors


def packed_vs_folded(manifest, forms, threads):
    """{(form, backend): {"max_abs_diff", "max_abs", "placements"}}, {label: error}."""
    out, errors = {}, {}
    for form in forms:
        # "openvino" too, so that the report says where that contender's ops run: a decoder's
        # functions share their weights, so its decode step stays on coremlrt's kernels there.
        for backend in ("reference", "auto") + (("openvino",) if "coremlrt openvino" in _load_contenders(
                manifest, form) else ()):
            task = {"kind": manifest["kind"], "inputs": manifest["inputs"], "threads": threads,
                    "path": manifest["coreml"][form], "backend": backend}
            if manifest["kind"] == "decoder":
                task["prompt"] = manifest["config"]["prompt"]
            try:
                out[(form, backend)] = _run_worker(dict(task, task="diff"))
            except Exception as exc:
                errors[f"{form} coremlrt {backend} (packed vs folded)"] = _error(exc)
    return out, errors


def worker_main(task_json):
    task = json.loads(task_json)
    result = _worker_diff(task) if task.get("task") == "diff" else _worker_load(task)
    print(json.dumps(result), flush=True)


# -- report ----------------------------------------------------------------------------------

def _fmt(value, digits=3):
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "—"
    return f"{value:.{digits}g}"


def _ratio(a, b):
    return a / b if a is not None and b else None


def _table(headers, rows):
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines + [""]


def _describe(manifest, tiny):
    c, params = manifest["config"], manifest.get("params", 0)
    if manifest["kind"] == "decoder":
        return (f"{c['layers']}-layer decoder, width {c['dim']}, {c['heads']} heads, vocabulary {c['vocab']:,}, "
                f"KV-cache state of {c['max_len']} positions, prompt {c['prompt']} tokens; {params / 1e6:,.1f} M parameters")
    return f"input {'x'.join(map(str, c['input']))}; {params / 1e6:,.1f} M parameters" + (" (tiny)" if tiny else "")


def model_report(name, r, threads_list, tiny):
    """The markdown lines of one model's tables."""
    manifest, latency, loads, diffs = r["manifest"], r["latency"], r["loads"], r["diffs"]
    decoder = manifest["kind"] == "decoder"
    phases = ("prefill", "decode") if decoder else ("predict",)
    steps = f"{DECODE_STEPS} steps" if decoder else f"{CNN_PREDICTIONS} predictions"
    forms = r["forms"]
    wbytes = manifest["weight_bytes"]
    lines = [f"### {name}: {_describe(manifest, tiny)}", ""]

    lines.append(f"Weights, load and memory (fresh processes, {max(threads_list)} threads; RSS anon / file in MB; "
                 "max |diff|: packed against packed_weights=False):")
    lines.append("")
    rows = []
    for form in forms:
        for contender in _load_contenders(manifest, form):
            kind = "openvino" if contender == "openvino" else "coreml"
            l = loads.get((form, contender))
            rss = lambda k: f"{l['rss_mb'][k]['anon']:.0f} / {l['rss_mb'][k]['file']:.0f}" if l else "—"  # noqa: E731
            d = diffs.get((form, contender.split()[-1])) if contender != "openvino" else None
            placed = ", ".join(f"{k} {v}" for k, v in sorted(d["placements"].items())) if d else "—"
            diff = (" / ".join(_fmt(x, 2) for x in d.get("max_abs_diffs", [d["max_abs_diff"]])) if d else "—")
            rows.append([form, contender, _fmt(wbytes[kind].get(form, 0) / MB), _fmt(l and l["cold_s"]),
                         _fmt(l and l["cached_s"]), rss("before"), rss("loaded"), rss("steps"), diff, placed])
    lines += _table(["form", "contender", "weights (MB)", "cold load (s)", "cached load (s)", "RSS before load",
                     "after load", f"after {steps}",
                     "max \\|diff\\| vs folded" + (" (prefill / decode)" if decoder else ""),
                     "ops by placement" + (" (decode)" if decoder else "")], rows)

    for phase in phases:
        lines.append(f"{'Decode step' if phase == 'decode' else phase.capitalize()} latency, median (ms):")
        lines.append("")
        headers = ["form"] + [f"{c} ({t} thr)" for t in threads_list for c in CONTENDERS]
        rows = []
        for form in forms + ["fp32"]:
            row = [form] + [_fmt(latency.get(t, {}).get((form, c, phase))) for t in threads_list for c in CONTENDERS]
            if any(v != "—" for v in row[1:]):
                rows.append(row)
        lines += _table(headers, rows)

    lines.append("Ratios (latency: / coremlrt fp16 on the same backend, / OpenVINO on the same weights; memory: "
                 f"growth after load and {steps}, anon + file, / (1.1 x Core ML weight bytes + 64 MB); "
                 "load: / OpenVINO's):")
    lines.append("")
    headers = ["form", "contender"]
    for t in threads_list:
        for phase in phases:
            headers += [f"{phase} / fp16 ({t} thr)", f"{phase} / OpenVINO ({t} thr)"]
    headers += ["memory / budget", "cold load / OpenVINO", "cached load / OpenVINO"]
    rows = []
    for form in forms:
        for contender in _load_contenders(manifest, form):
            row = [form, contender]
            for t in threads_list:
                times = latency.get(t, {})
                for phase in phases:
                    own = times.get((form, contender, phase))
                    row.append(_fmt(_ratio(own, times.get(("fp16", contender, phase))), 2))
                    row.append("—" if contender == "openvino" else
                               _fmt(_ratio(own, times.get((form, "openvino", phase))), 2))
            l, ov = loads.get((form, contender)), loads.get((form, "openvino"))
            if l:
                grown = sum(l["rss_mb"]["steps"].values()) - sum(l["rss_mb"]["before"].values())
                budget = 1.1 * wbytes["coreml"][form] / MB + 64
                row.append(_fmt(grown / budget, 2))
            else:
                row.append("—")
            for key in ("cold_s", "cached_s"):
                row.append("—" if contender == "openvino" or not (l and ov) else _fmt(_ratio(l[key], ov[key]), 2))
            rows.append(row)
    lines += _table(headers, rows)
    types = manifest.get("openvino_weights", {})
    if types:
        lines.append("OpenVINO's weights by element type (constants over 1,024 elements): " + "; ".join(
            f"{form}: " + ", ".join(f"{n} {t}" for t, n in sorted(c.items())) for form, c in types.items() if form in forms) + ".")
        lines.append("")
    return lines


def versions():
    out = {"python": platform.python_version()}
    for module in ("coremlrt", "openvino", "nncf", "torch", "coremltools", "numpy"):
        try:
            out[module] = __import__(module).__version__
        except Exception as exc:
            out[module] = f"unavailable ({type(exc).__name__})"
    return out


def report(results, args, errors):
    lines = [SECTION, "",
             f"Measured by `python3 benchmarks/bench_compressed.py{' --tiny' if args.tiny else ''}` on "
             f"{datetime.date.today().isoformat()}, {bench_peers._cpu_name()}, {os.cpu_count()} cores; median of "
             f"{args.runs} runs after {args.warmup} warm-up runs, contenders interleaved in turns of "
             f"{bench_peers.BLOCK} timed runs after an untimed one. Versions: " +
             ", ".join(f"{k} {v}" for k, v in versions().items()) + ".", "",
             "Forms (coremltools.optimize.coreml, every weight): fp16 as converted; int8 symmetric per channel; "
             "int4 per block of 32; palettized: 4 bits, a palette per group of 16 channels; sparse: 50 % by magnitude; "
             "sparse_palettized: both. OpenVINO: the same torch module, nncf.compress_weights INT8_SYM / INT4_ASYM "
             "group 32, f32 inference, float activations; a decoder stateful (its KV caches the infer request's "
             "variables, as OpenVINO's own language models keep them); \"openvino defaults\": the same with the CPU "
             "plugin's default precision and activation quantization. \"coremlrt openvino\" (load and memory only) "
             "is backend=\"openvino\"; its ops by placement say where they run (a decoder's functions share their "
             "weights, so they stay on coremlrt's kernels). torch eager: the fp32 module (form fp32). "
             "Absolute times on a shared machine are noise; ratios measured in the same run are the result.", ""]
    for name, r in results.items():
        lines += model_report(name, r, args.threads, args.tiny)
    if errors:
        lines += ["### Contenders that could not run", ""]
        lines += [f"- {k}: {v}" for k, v in sorted(errors.items())]
        lines.append("")
    return lines


def write_section(path, lines):
    """Replaces the section SECTION of `path` (up to the next "## " heading) with `lines`, or
    appends it."""
    with open(path) as f:
        old = f.read().splitlines()
    start = next((i for i, line in enumerate(old) if line.strip() == SECTION), None)
    if start is None:
        new = old + ([""] if old and old[-1].strip() else []) + lines
    else:
        end = next((i for i in range(start + 1, len(old)) if old[i].startswith("## ")), len(old))
        new = old[:start] + lines + old[end:]
    while new and not new[-1].strip():
        new.pop()
    with open(path, "w") as f:
        f.write("\n".join(new) + "\n")


def main(argv=None):
    if argv is None and len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker_main(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--only", nargs="+", default=list(cm.MODELS), choices=cm.MODELS)
    parser.add_argument("--forms", nargs="+", default=list(cm.FORMS), choices=cm.FORMS)
    parser.add_argument("--skip-1b", action="store_true", help="leave out the 1 B-parameter decoder")
    parser.add_argument("--no-write", action="store_true", help="print the tables only, leave docs/reports/performance.md alone")
    parser.add_argument("--models-dir", default=cm.DEFAULT_DIR)
    parser.add_argument("--output", default=os.path.join(ROOT, "docs", "reports", "performance.md"))
    # Smoke test: small models through every code path (compressed_models.TINY_*).
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    import coremlrt

    # The package measured is whichever Python imports (an installed wheel before a build tree
    # unless PYTHONPATH names it): say which, so that a stale install is not taken for the code.
    print(f"measuring coremlrt from {os.path.dirname(coremlrt.__file__)}", flush=True)
    names = [n for n in args.only if not (args.skip_1b and n == "lm1b")]
    results, errors = {}, {}
    for name in names:
        forms = [f for f in args.forms if f in cm.model_forms(name)]
        if not forms:
            continue
        manifest = cm.build(name, forms, args.models_dir, args.tiny)
        r = results[name] = {"manifest": manifest, "forms": forms, "latency": {}}
        r["diffs"], errs = packed_vs_folded(manifest, forms, max(args.threads))
        errors.update({f"{name}: {k}": v for k, v in errs.items()})
        r["loads"], errs = loads_and_memory(manifest, forms, max(args.threads))
        errors.update({f"{name}: {k}": v for k, v in errs.items()})
        for threads in args.threads:
            r["latency"][threads], errs = measure(manifest, forms, threads, args.runs, args.warmup, args.tiny)
            errors.update({f"{name}: {k}": v for k, v in errs.items()})
            print(f"[{threads} thr] {name}: measured {len(r['latency'][threads])} runners", flush=True)
    lines = report(results, args, errors)
    print()
    print("\n".join(lines))
    if not args.no_write:
        write_section(args.output, lines)
        print(f"wrote the section \"{SECTION[3:]}\" of {args.output}")


if __name__ == "__main__":
    sys.exit(main())
