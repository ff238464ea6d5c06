"""coremlrt against its peers on the same networks, in one run on this machine.

    python3 benchmarks/bench_peers.py [--runs 50] [--threads 1 2] [--only resnet18 ...]

Each network (benchmarks/peer_models.py, and torchvision's classifiers listed in TORCHVISION below)
exists as a Core ML model in fp32 and fp16 (converted by coremltools from the torch module) and as
ONNX (exported from the same module); a torchvision network the converters cannot take is reported
as such. For every
thread count, the contenders run interleaved, in turns of a few runs each (the first of a turn
untimed), round after round, so that whatever else the machine does falls on all of them alike:

* coremlrt on the fp32 and fp16 models with backend "auto", "openvino" and "reference", and on
  the fp16 model in the low-precision mode (ComputeUnit.CPU_AND_NE: bf16 matrix ops);
* ONNX Runtime (CPU provider) and OpenVINO (fp32 and bf16 inference precision) on the ONNX
  model; torch eager on the module.

It prints a table of median latencies and of ratios, where coremlrt places each network's ops
(OpenVINO regions, ops left on our kernels and why), load times (first and cached), peak RSS
while predicting, and writes docs/reports/performance.md (keeping the sections it does not write:
"Compressed models", "Measurements behind code choices") and docs/reports/performance.png. Absolute
times on a shared machine are noise; the ratios measured in the same run are the result.
"""

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_models  # noqa: E402

# Timed runs per contender in one turn of the interleaving (measure()).
BLOCK = 5

# torchvision's image classifiers (random weights, 224x224), built like peer_models.py's networks:
# architectures nobody here wrote, with the ops coremltools writes for them (MobileNetV3's
# hard-swish, Swin's shifted windows, ViT's attention). Listed after peer_models.py's own.
TORCHVISION = ("mobilenet_v3_large", "efficientnet_b0", "regnet_y_400mf", "convnext_tiny", "swin_t", "vit_b_16")


def _torchvision(name):
    def make():
        import torchvision

        return getattr(torchvision.models, name)(weights=None), {
            "image": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}

    return make


peer_models.NETWORKS.update({name: _torchvision(name) for name in TORCHVISION})
# coremltools 9.0 cannot convert these traced (its `int` op meets a tensor): they go through
# torch.export, as BERT does.
peer_models.VIA_EXPORT.update({"swin_t", "vit_b_16"})

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _coremlrt_runner(path, inputs, backend, threads, low_precision=False):
    import coremlrt

    units = coremlrt.ComputeUnit.CPU_AND_NE if low_precision else coremlrt.ComputeUnit.ALL
    model = coremlrt.MLModel(path, compute_units=units, backend=backend, threads=threads, cache_dir=None)
    feed = dict(inputs)
    if model._function["states"]:  # a stateful step: one state, as a decode loop keeps it
        state = model.make_state()
        return lambda: model.predict(feed, state=state)
    return lambda: model.predict(feed)


def _ort_runner(path, inputs, threads, spinning=True):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if not spinning:  # its pool's threads sleep after a run instead of spinning on the cores
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    kinds = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32,
             "tensor(float16)": np.float16}
    feed = {i.name: v.astype(kinds.get(i.type, v.dtype)) for i, v in zip(session.get_inputs(), inputs.values())}
    return lambda: session.run(None, feed)


def _openvino_runner(name, path, inputs, threads, precision):
    import openvino as ov

    core = ov.Core()
    # A decoder's KV caches are the infer request's variables (peer_models.openvino_model).
    compiled = core.compile_model(peer_models.openvino_model(path, name), "CPU", {
        "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    feed = [v.astype(port.get_element_type().to_dtype()) for port, v in zip(compiled.inputs, inputs.values())]
    return lambda: request.infer(feed)


def _torch_runner(name, inputs, threads):
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    module, _ = peer_models.NETWORKS[name]()
    module.eval()
    stateful = name in peer_models.STATEFUL
    args = peer_models._torch_inputs(dict(list(inputs.items())[:2]) if stateful else inputs, keep_int32=stateful)

    def run():
        with torch.inference_mode():
            return module(*args)

    return run


def contenders(name, paths, inputs, threads):
    """(label, make-runner) pairs; a runner is built lazily so that a failing peer is reported."""
    coreml_inputs = dict(zip(paths["coreml_inputs"], inputs.values()))
    out = []
    for precision in ("fp32", "fp16"):
        for backend in ("auto", "openvino", "reference"):
            out.append((f"coremlrt {precision} {backend}",
                        lambda p=precision, b=backend: _coremlrt_runner(paths[f"coreml_{p}"], coreml_inputs, b, threads)))
    out.append(("coremlrt fp16 low-precision",
                lambda: _coremlrt_runner(paths["coreml_fp16"], coreml_inputs, "auto", threads, low_precision=True)))
    out.append(("onnxruntime f32", lambda: _ort_runner(paths["onnx"], inputs, threads)))
    out.append(("openvino f32", lambda: _openvino_runner(name, paths["onnx"], inputs, threads, "f32")))
    out.append(("openvino bf16", lambda: _openvino_runner(name, paths["onnx"], inputs, threads, "bf16")))
    out.append(("torch eager", lambda: _torch_runner(name, inputs, threads)))
    return out


def measure(name, paths, threads, runs, warmup, block=BLOCK):
    inputs = dict(np.load(paths["inputs"]))
    runners, errors = {}, {}
    for label, make in contenders(name, paths, inputs, threads):
        try:
            run = make()
            for _ in range(warmup):
                run()
            runners[label] = run
        except Exception as exc:  # a peer that cannot run this network is reported, not fatal
            errors[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    times = {label: [] for label in runners}
    order = list(runners.items())
    shuffle = np.random.default_rng(0)
    while any(len(t) < runs for t in times.values()):
        shuffle.shuffle(order)  # no contender always runs right after the same other one
        for label, run in order:
            # A turn starts with one untimed run: the previous contender's threads may still be
            # spinning on the cores (ONNX Runtime's pool spins after each run, so with it in the
            # process a contender's time depends on who ran just before: docs/reports/performance.md,
            # "Measurements behind code choices"), and that is the switch, not the contender.
            run()
            for _ in range(min(block, runs - len(times[label]))):
                start = time.perf_counter()
                run()
                times[label].append(time.perf_counter() - start)
    return {label: statistics.median(t) * 1000 for label, t in times.items()}, errors


_LOAD_SCRIPT = r"""
import json, sys, time
import numpy as np
import coremlrt
path, cache, names, npz = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
inputs = dict(zip(names, np.load(npz).values()))
def status_mb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
def rss_mb():
    return status_mb("VmRSS")
base = rss_mb()
start = time.perf_counter()
model = coremlrt.MLModel(path, cache_dir=cache)
load = time.perf_counter() - start
for _ in range(5):
    model.predict(inputs)
peak = status_mb("VmHWM")  # this process's own peak (ru_maxrss would include the parent's: it survives exec)
print(json.dumps({"load_s": load, "rss_base_mb": base, "rss_peak_mb": peak, "weights_mb": model.weights_bytes / 2**20}))
"""


def placement(paths, precision):
    """Where coremlrt (backend auto) runs the model's ops: {"ops", "regions" (OpenVINO regions),
    "ours" (ops left on our kernels), "why" ({reason: count} of those)}."""
    import coremlrt

    placements = coremlrt.MLModel(paths[f"coreml_{precision}"], cache_dir=None).placements()
    ours = [p for p in placements if p["backend"] != "openvino"]
    why = {}
    for p in ours:
        key = f"{p['op_type']}: {p['reason']}"
        why[key] = why.get(key, 0) + 1
    return {"ops": len(placements), "ours": len(ours), "why": why,
            "regions": len({p["region"] for p in placements if p["backend"] == "openvino"})}


def load_and_memory(paths, precision):
    """First load (empty cache), cached load (a new process, same cache), and peak RSS."""
    with tempfile.TemporaryDirectory() as cache:
        results = []
        for _ in range(2):
            proc = subprocess.run([sys.executable, "-c", _LOAD_SCRIPT, paths[f"coreml_{precision}"], cache,
                                   json.dumps(paths["coreml_inputs"]), paths["inputs"]],
                                  capture_output=True, text=True, check=True)
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    first, cached = results
    return {"first_load_s": first["load_s"], "cached_load_s": cached["load_s"],
            "peak_rss_mb": first["rss_peak_mb"] - first["rss_base_mb"], "weights_mb": first["weights_mb"]}


def state_bytes_copied_per_step(paths, precision="fp16"):
    """State bytes one decode step copies and writes in coremlrt (backend auto), measured by
    the engine's own counts (coremlrt.state_traffic(), include/coremlrt/state.h) around a
    step that follows another on the same state: a step that updates its caches in place
    copies only the rows it overwrites (kept to restore them if the prediction fails); a state
    given a whole new value counts all of it."""
    import coremlrt

    inputs = dict(zip(paths["coreml_inputs"], np.load(paths["inputs"]).values()))
    model = coremlrt.MLModel(paths[f"coreml_{precision}"], cache_dir=None)
    state = model.make_state()
    model.predict(inputs, state=state)
    before = coremlrt.state_traffic()
    model.predict(inputs, state=state)
    after = coremlrt.state_traffic()
    return (after["bytes_copied"] - before["bytes_copied"], after["bytes_written"] - before["bytes_written"])


def geomean(values):
    values = [v for v in values if v and v > 0]
    return float(np.exp(np.mean(np.log(values)))) if values else float("nan")


def versions():
    out = {"python": platform.python_version()}
    for module in ("coremlrt", "onnxruntime", "openvino", "torch", "coremltools", "numpy"):
        try:
            out[module] = __import__(module).__version__
        except Exception as exc:
            out[module] = f"unavailable ({type(exc).__name__})"
    return out


def _sections_kept(path_md):
    """The "## " sections of the report at `path_md` that write_report does not write (the
    "Compressed models" tables of bench_compressed.py, the hand-kept "Measurements behind code
    choices"), in their order, so that rewriting the report leaves them in place."""
    try:
        with open(path_md) as f:
            old = f.read().splitlines()
    except FileNotFoundError:
        return []
    ours = re.compile(r"## (\d+ threads?: median latency|Targets$|Load time and memory|Contenders that could not"
                      r" run|Placement under backend auto)")
    kept, keep = [], False
    for line in old:
        if line.startswith("## "):
            keep = not ours.match(line)
        if keep:
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    return kept


def write_report(results, loads, targets, args, errors, path_md, path_png, placements=None):
    lines = ["# Performance: coremlrt and its peers", "",
             f"Measured by `python3 benchmarks/bench_peers.py` on {datetime.date.today().isoformat()}, "
             f"{_cpu_name()}, {os.cpu_count()} cores; batch 1; median of {args.runs} runs after {args.warmup} "
             f"warm-up runs, contenders interleaved in turns of {BLOCK} timed runs after an untimed one. Versions: " +
             ", ".join(f"{k} {v}" for k, v in versions().items()) + ".", "",
             "Absolute times on a shared machine are noise; ratios measured in the same run are the result.", ""]
    for threads, per_net in results.items():
        labels = sorted({label for times in per_net.values() for label in times})
        lines += [f"## {threads} thread{'s' if threads > 1 else ''}: median latency (ms)", "",
                  "| network | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
        for net, times in per_net.items():
            lines.append(f"| {net} | " + " | ".join(f"{times[l]:.3g}" if l in times else "—" for l in labels) + " |")
        lines.append("")
    lines += ["## Targets", "", "| target | figure | goal |", "|---|---|---|"]
    lines += [f"| {t['name']} | {t['figure']} | {t['goal']} |" for t in targets]
    if placements:
        lines += ["", "## Placement under backend auto", "",
                  "OpenVINO regions and ops left on our kernels (`MLModel.placements()`), with why.", "",
                  "| model | ops | OpenVINO regions | ops on our kernels | why |", "|---|---|---|---|---|"]
        for key, p in placements.items():
            why = "; ".join(f"{n}× {reason}" for reason, n in sorted(p["why"].items(), key=lambda kv: -kv[1]))
            lines.append(f"| {key} | {p['ops']} | {p['regions']} | {p['ours']} | {why or '—'} |")
    lines += ["", "## Load time and memory (coremlrt, backend auto, default threads)", "",
              "| model | weights (MB) | first load (s) | cached load (s) | cached / first | peak RSS while predicting (MB) |",
              "|---|---|---|---|---|---|"]
    for key, l in loads.items():
        lines.append(f"| {key} | {l['weights_mb']:.1f} | {l['first_load_s']:.3f} | {l['cached_load_s']:.3f} | "
                     f"{l['cached_load_s'] / l['first_load_s']:.2f} | {l['peak_rss_mb']:.0f} |")
    if errors:
        lines += ["", "## Contenders that could not run", ""]
        lines += [f"- {k}: {v}" for k, v in sorted(errors.items())]
    kept = _sections_kept(path_md)
    if kept:
        lines += [""] + kept
    with open(path_md, "w") as f:
        f.write("\n".join(lines) + "\n")
    write_chart(results, path_png)


def write_chart(results, path_png):
    """Bar chart of each contender's latency over the best fp32 peer's, at the most threads run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    threads = max(results)
    per_net = results[threads]
    nets = list(per_net)
    labels = ["coremlrt fp32 auto", "coremlrt fp16 auto", "coremlrt fp16 low-precision", "coremlrt fp32 reference",
              "onnxruntime f32", "openvino f32", "openvino bf16", "torch eager"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        ratios = []
        for net in nets:
            t = per_net[net]
            best = min(v for k, v in t.items() if k in ("onnxruntime f32", "openvino f32")) \
                if any(k in t for k in ("onnxruntime f32", "openvino f32")) else float("nan")
            ratios.append(t.get(label, float("nan")) / best)
        ax.bar(np.arange(len(nets)) + i * width, ratios, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(len(nets)) + 0.4 - width / 2, nets)
    ax.set_yscale("log")
    ax.set_ylabel("latency / min(ONNX Runtime, OpenVINO f32)")
    ax.set_title(f"Latency relative to the best fp32 peer ({threads} threads, lower is better)")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path_png, dpi=110)


def torchvision_targets(results, placements):
    """Each torchvision network: one OpenVINO region under backend auto, fp32 auto at most 1.05x
    min(ONNX Runtime, OpenVINO f32); MobileNetV3-Large at most ONNX Runtime's time."""
    t2 = results.get(2) or results[max(results)]
    out = []
    for net in [n for n in TORCHVISION if n in t2]:
        t = t2[net]
        peers = [t[k] for k in ("onnxruntime f32", "openvino f32") if k in t]
        ratio = t["coremlrt fp32 auto"] / min(peers) if peers and "coremlrt fp32 auto" in t else float("nan")
        regions = ", ".join(f"{precision} {placements[f'{net} {precision}']['regions']}"
                            for precision in ("fp32", "fp16") if f"{net} {precision}" in placements)
        out.append({"name": f"{net}: OpenVINO regions under auto; fp32 auto / min(ORT, OV f32)",
                    "figure": f"{regions}; {ratio:.2f}", "goal": "1 region; ≤ 1.05"})
    if "mobilenet_v3_large" in t2 and "onnxruntime f32" in t2["mobilenet_v3_large"]:
        t = t2["mobilenet_v3_large"]
        out.append({"name": "mobilenet_v3_large: fp32 auto / ORT",
                    "figure": f"{t['coremlrt fp32 auto'] / t['onnxruntime f32']:.2f}", "goal": "≤ 1.0"})
    return out


def targets_from(results, loads, base_reference=None):
    out = []
    t2 = results.get(2) or results[max(results)]
    nets = [n for n in t2 if n != "tiny"]

    def ratio(net, label, against):
        t = t2[net]
        if label not in t:
            return float("nan")
        peers = [t[a] for a in against if a in t]
        return t[label] / min(peers) if peers else float("nan")

    fp32 = {n: ratio(n, "coremlrt fp32 auto", ["onnxruntime f32", "openvino f32"]) for n in nets}
    out.append({"name": "fp32 auto / min(ORT, OV f32), geomean over networks",
                "figure": f"{geomean(fp32.values()):.2f} (" + ", ".join(f"{n} {v:.2f}" for n, v in fp32.items()) + ")",
                "goal": "≤ 0.9, none above 1.2"})
    low = {n: ratio(n, "coremlrt fp16 low-precision", ["openvino bf16"]) for n in nets}
    out.append({"name": "fp16 low-precision / OV bf16, geomean",
                "figure": f"{geomean(low.values()):.2f} (" + ", ".join(f"{n} {v:.2f}" for n, v in low.items()) + ")",
                "goal": "≤ 1.0"})
    fp16 = {n: ratio(n, "coremlrt fp16 auto", ["coremlrt fp32 auto"]) for n in nets}
    out.append({"name": "fp16 auto / fp32 auto, per network",
                "figure": ", ".join(f"{n} {v:.2f}" for n, v in fp16.items()), "goal": "≤ 1.1 each"})
    if "tiny" in t2:
        out.append({"name": "tiny model: coremlrt auto (fp32) / ORT",
                    "figure": f"{ratio('tiny', 'coremlrt fp32 auto', ['onnxruntime f32']):.2f}", "goal": "≤ 1.0"})
    for key, l in loads.items():
        out.append({"name": f"{key}: peak RSS / (1.5 × weights + 100 MB)",
                    "figure": f"{l['peak_rss_mb'] / (1.5 * l['weights_mb'] + 100):.2f}", "goal": "≤ 1.0"})
        out.append({"name": f"{key}: cached load / first load",
                    "figure": f"{l['cached_load_s'] / l['first_load_s']:.2f}", "goal": "≤ 0.5"})
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--only", nargs="*", default=list(peer_models.NETWORKS))
    parser.add_argument("--models-dir", default=peer_models.DEFAULT_DIR)
    parser.add_argument("--output", default=os.path.join(ROOT, "docs", "reports", "performance.md"))
    parser.add_argument("--chart", default=os.path.join(ROOT, "docs", "reports", "performance.png"))
    args = parser.parse_args(argv)
    try:
        import matplotlib  # noqa: F401  (checked before a run of minutes, not after it)
    except ImportError:
        parser.error("the chart needs matplotlib: pip install .[bench]")
    paths, all_errors = {}, {}
    for name in args.only:
        try:
            paths[name] = peer_models.build(name, args.models_dir)
        except Exception as exc:  # a network the converters cannot take is reported, not fatal
            if name not in TORCHVISION:
                raise
            all_errors[f"{name}, conversion"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            print(f"{name}: could not convert: {all_errors[f'{name}, conversion']}", flush=True)
    results = {}
    for threads in args.threads:
        results[threads] = {}
        for name in paths:
            times, errors = measure(name, paths[name], threads, args.runs, args.warmup)
            results[threads][name] = times
            all_errors.update({f"{name}, {threads} threads, {k}": v for k, v in errors.items()})
            print(f"[{threads} thr] {name}: " + ", ".join(f"{k} {v:.3g} ms" for k, v in times.items()), flush=True)
    loads = {}
    for name in [n for n in ("resnet18",) if n in paths]:
        for precision in ("fp32", "fp16"):
            loads[f"{name} {precision}"] = load_and_memory(paths[name], precision)
    placements = {f"{name} {precision}": placement(paths[name], precision)
                  for name in paths if name not in peer_models.STATEFUL for precision in ("fp32", "fp16")}
    for key, p in placements.items():
        print(f"{key}: {p['ops']} ops, {p['regions']} OpenVINO regions, {p['ours']} on our kernels", flush=True)
    targets = targets_from(results, loads) + torchvision_targets(results, placements)
    if "gpt2_decode" in paths:
        for precision in ("fp16", "fp32"):
            copied, written = state_bytes_copied_per_step(paths["gpt2_decode"], precision)
            targets.append({"name": f"gpt2 decode step ({precision}): state bytes copied (bytes the step writes)",
                            "figure": f"{copied:,} ({written:,})", "goal": "no more than the step writes"})
    print()
    for t in targets:
        print(f"{t['name']}: {t['figure']}  (goal {t['goal']})")
    for k, v in all_errors.items():
        print(f"could not run: {k}: {v}")
    write_report(results, loads, targets, args, all_errors, args.output, args.chart, placements)
    print(f"wrote {args.output} and {args.chart}")


if __name__ == "__main__":
    sys.exit(main())
