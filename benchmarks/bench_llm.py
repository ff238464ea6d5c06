"""Language-model generation speed and memory: coremlrt against llama.cpp and OpenVINO on the
same weights (benchmarks/llm_models.py: TinyLlama-1.1B's shape, random weights), fp16 and int4.

    python3 benchmarks/bench_llm.py [--processes 2] [--runs 3] [--rounds 2] [--threads 2] [--write-report]

Each contender runs in fresh processes (``--processes`` per round, two rounds in opposite
orders); each process loads the model, then ``--runs`` times: a fresh cache, the 128-token
prompt (prefill), 64 greedy tokens (one decode step each after the first). Reported: medians
over processes of each process's median run; decode tokens/s over the 63 decode steps; RSS
(anonymous / file pages) after load and after the last run; load time. The memory bandwidth
is measured in the same run (benchmarks/read_bandwidth.c, the same threads) before each round,
and "of bandwidth" is the weight bytes a decode step reads (every weight but the embedding
table, at its stored size) times decode tokens/s over the best measured bandwidth. For coremlrt,
"generate overhead" is the time a decode step of LanguageModel.stream spends outside predict,
over the time inside it.

llama.cpp is llama-cpp-python built from its source distribution (a benchmark-only dependency,
``--llama-cpp`` names the folder it is installed in: pip install --no-binary llama-cpp-python
--target build/llama-cpp llama-cpp-python). ``--tiny`` runs every path on a small model (the
smoke test).
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import llm_models  # noqa: E402

NEW_TOKENS = 64
CONTENDERS = [("coremlrt", "fp16"), ("llama.cpp", "fp16"), ("openvino", "fp16"),
              ("coremlrt", "int4"), ("llama.cpp", "int4"), ("openvino", "int4")]
FORM_NAMES = {("coremlrt", "fp16"): "fp16", ("coremlrt", "int4"): "int4 per block 32",
              ("llama.cpp", "fp16"): "F16", ("llama.cpp", "int4"): "Q4_0 (pure)",
              ("openvino", "fp16"): "fp16 weights, f32 inference", ("openvino", "int4"): "INT4_ASYM group 32"}


def rss():
    """(anonymous, file) resident MB of this process."""
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssFile:")):
                key, value = line.split(":")
                values[key] = int(value.split()[0]) / 1024
    return round(values["RssAnon"], 1), round(values["RssFile"], 1)


# -- one contender in this process ---------------------------------------------------------------

def _coremlrt(manifest, form, threads, runs):
    import coremlrt
    from coremlrt.llm import LanguageModel

    coremlrt.set_num_threads(threads)
    started = time.perf_counter()
    lm = LanguageModel(manifest["coreml"][form], threads=threads)
    load = time.perf_counter() - started
    after_load = rss()
    prompt = manifest["prompt"]
    results = []
    for _ in range(runs):
        times = []
        started = time.perf_counter()
        for chunk in lm.stream(prompt, max_new_tokens=NEW_TOKENS, ignore_eos=True):
            times.append(time.perf_counter())
            if len(times) == 1:
                lm.predict_seconds = 0.0  # from here on: decode steps only
        decode_wall = times[-1] - times[0]
        results.append({"prefill_s": times[0] - started, "decode_s": decode_wall / (NEW_TOKENS - 1),
                        "overhead": (decode_wall - lm.predict_seconds) / lm.predict_seconds,
                        "tokens": None})
    return load, after_load, rss(), results  # the end RSS while the model is still held


def _llama_cpp(manifest, form, threads, runs):
    import numpy as np
    from llama_cpp import Llama

    config = manifest["config"]
    started = time.perf_counter()
    llm = Llama(model_path=manifest["gguf"][form], n_ctx=config["max_len"], n_batch=config["prompt"],
                n_ubatch=config["prompt"], n_threads=threads, n_threads_batch=threads, use_mmap=True,
                verbose=False, logits_all=False)
    load = time.perf_counter() - started
    after_load = rss()
    prompt = manifest["prompt"]
    vocab = llm.n_vocab()

    def next_token():
        # The last evaluated token's logits, read from the context: without logits_all,
        # llama-cpp-python (0.3.x) no longer copies them into Llama.scores, and logits_all would
        # make the prefill compute the vocabulary projection for every prompt token.
        return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))))

    results = []
    for _ in range(runs):
        llm.reset()
        started = time.perf_counter()
        llm.eval(prompt)
        token = next_token()
        first = time.perf_counter()
        for _ in range(NEW_TOKENS - 1):
            llm.eval([token])
            token = next_token()
        results.append({"prefill_s": first - started, "decode_s": (time.perf_counter() - first) / (NEW_TOKENS - 1)})
    return load, after_load, rss(), results  # the end RSS while the model is still held


def _openvino(manifest, form, threads, runs):
    import numpy as np
    import openvino as ov

    core = ov.Core()
    started = time.perf_counter()
    compiled = core.compile_model(manifest["openvino"][form], "CPU", {
        "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32", "NUM_STREAMS": 1,
        "KV_CACHE_PRECISION": "f16", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0, "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    load = time.perf_counter() - started
    after_load = rss()
    prompt = np.array([manifest["prompt"]], np.int64)
    results = []
    for _ in range(runs):
        request.reset_state()
        started = time.perf_counter()
        request.infer({"input_ids": prompt, "start": np.array([0], np.int64)})
        token = int(np.argmax(request.get_tensor("logits").data[0, -1]))
        first = time.perf_counter()
        for step in range(NEW_TOKENS - 1):
            request.infer({"input_ids": np.array([[token]], np.int64),
                           "start": np.array([prompt.shape[1] + step], np.int64)})
            token = int(np.argmax(request.get_tensor("logits").data[0, -1]))
        results.append({"prefill_s": first - started, "decode_s": (time.perf_counter() - first) / (NEW_TOKENS - 1)})
    return load, after_load, rss(), results  # the end RSS while the model is still held


def child(args):
    manifest = json.load(open(args.manifest))
    before = rss()
    run = {"coremlrt": _coremlrt, "llama.cpp": _llama_cpp, "openvino": _openvino}[args.child]
    load, after_load, at_end, results = run(manifest, args.form, args.threads, args.runs)
    print(json.dumps({"load_s": load, "rss_before": before, "rss_load": after_load, "rss_end": at_end,
                      "runs": results}))
    return 0


# -- the parent: rounds of fresh processes -------------------------------------------------------

def bandwidth(threads):
    exe = os.path.join(ROOT, "build", "bench-tools", "read_bandwidth")
    if not os.path.exists(exe):
        os.makedirs(os.path.dirname(exe), exist_ok=True)
        subprocess.run(["cc", "-O3", "-march=native", "-pthread", os.path.join(ROOT, "benchmarks", "read_bandwidth.c"),
                        "-o", exe], check=True)
    out = subprocess.run([exe, str(threads), "1024", "10"], check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def measure(args, manifest_path, contender, form):
    env = dict(os.environ)
    if contender == "llama.cpp":
        env["PYTHONPATH"] = os.pathsep.join([args.llama_cpp, env.get("PYTHONPATH", "")])
    command = [sys.executable, os.path.abspath(__file__), "--child", contender, "--form", form, "--manifest",
               manifest_path, "--threads", str(args.threads), "--runs", str(args.runs)]
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"{contender} {form} failed:\n{run.stderr[-4000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def decode_bytes(manifest, contender, form):
    """Weight bytes one decode step reads: the weights at their stored size less the embedding
    table (a step gathers one row), in proportion to its share of the parameters."""
    if contender == "coremlrt":
        path = manifest["coreml"][form]
        weights = os.path.join(path, "Data", "com.apple.CoreML", "weights")
        total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(weights) for f in fs)
    elif contender == "llama.cpp":
        total = os.path.getsize(manifest["gguf"][form])
    else:
        total = os.path.getsize(manifest["openvino"][form][:-4] + ".bin")
    return total * (1 - manifest["embedding_params"] / manifest["params"])


def summarize(samples):
    """Medians over processes of each process's median run."""
    med = lambda key, runs: statistics.median(r[key] for r in runs)  # noqa: E731
    out = {"prefill_s": statistics.median(med("prefill_s", s["runs"]) for s in samples),
           "decode_s": statistics.median(med("decode_s", s["runs"]) for s in samples),
           "load_s": statistics.median(s["load_s"] for s in samples)}
    for key in ("rss_load", "rss_end"):
        out[key] = [statistics.median(s[key][i] for s in samples) for i in (0, 1)]
    if "overhead" in samples[0]["runs"][0]:
        out["overhead"] = statistics.median(med("overhead", s["runs"]) for s in samples)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--form", help=argparse.SUPPRESS)
    parser.add_argument("--manifest", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3, help="prefill + 64 tokens per process")
    parser.add_argument("--processes", type=int, default=2, help="fresh processes per contender and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each in the opposite order of the last")
    parser.add_argument("--only", nargs="*", default=None, choices=["coremlrt", "llama.cpp", "openvino"])
    parser.add_argument("--llama-cpp", default=llm_models.LLAMA_CPP)
    parser.add_argument("--sdist", default=llm_models.SDIST_DIR)
    parser.add_argument("--dir", default=llm_models.DEFAULT_DIR)
    parser.add_argument("--tiny", action="store_true", help="a small model: the smoke test")
    parser.add_argument("--write-report", action="store_true", help="write docs/reports/performance.md's section")
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    contenders = [c for c in CONTENDERS if not args.only or c[0] in args.only]
    kinds = {{"coremlrt": "coreml", "openvino": "openvino", "llama.cpp": "gguf"}[c] for c, _ in contenders}
    manifest = llm_models.build(args.dir, args.tiny, args.llama_cpp, args.sdist, tuple(sorted(kinds)))
    manifest_path = os.path.join(args.dir, "tiny" if args.tiny else "", "manifest.json")
    samples = {c: [] for c in contenders}
    bandwidths = []
    for round_ in range(args.rounds):
        bandwidths.append(bandwidth(args.threads))
        for contender, form in (contenders if round_ % 2 == 0 else contenders[::-1]):
            for _ in range(args.processes):
                samples[(contender, form)].append(measure(args, manifest_path, contender, form))
                print(f"round {round_ + 1}: {contender} {form} done", file=sys.stderr, flush=True)
        bandwidths.append(bandwidth(args.threads))
    table = report(manifest, {c: summarize(s) for c, s in samples.items()}, bandwidths, args)
    print(table)
    if args.write_report and not args.tiny:
        write_report(table)
    return 0


def report(manifest, results, bandwidths, args):
    best_bw = max(bandwidths)
    cfg = manifest["config"]
    lines = [f"Measured by `python3 benchmarks/bench_llm.py --processes {args.processes} --runs {args.runs} "
             f"--rounds {args.rounds} --threads {args.threads}` on {datetime.date.today().isoformat()}: a LLaMA model of TinyLlama-1.1B's "
             f"shape (hidden {cfg['hidden']}, {cfg['layers']} layers, {cfg['heads']} heads, {cfg['kv_heads']} KV "
             f"heads, SwiGLU {cfg['intermediate']}, vocabulary {cfg['vocab']}; {manifest['params'] / 1e9:.2f} B "
             f"parameters, random weights), prompt {cfg['prompt']} tokens, {NEW_TOKENS} greedy tokens, "
             f"{args.threads} threads. Medians of {args.rounds * args.processes} fresh processes per row "
             f"({args.runs} runs each; {args.rounds} rounds, each in the opposite order of the last). Read bandwidth measured in the same run "
             f"(benchmarks/read_bandwidth.c, {args.threads} threads): "
             + ", ".join(f"{b:.1f}" for b in bandwidths) + f" GB/s; the best, {best_bw:.1f} GB/s, is the "
             "reference for \"of bandwidth\".", "",
             "| format | runtime | decode ms/token | decode tokens/s | weights read per token | weights streamed | "
             f"of bandwidth | prefill ms ({cfg['prompt']} tokens) | prefill tokens/s | load s | RSS anon / file after load (MB) | "
             "after prefill + 64 tokens (MB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (contender, form), r in results.items():
        per_token = decode_bytes(manifest, contender, form)
        streamed = per_token / r["decode_s"] / 1e9
        lines.append(f"| {form} | {contender} ({FORM_NAMES[(contender, form)]}) | {r['decode_s'] * 1e3:.1f} | "
                     f"{1 / r['decode_s']:.1f} | {per_token / 1e9:.2f} GB | {streamed:.1f} GB/s | "
                     f"{streamed / best_bw:.0%} | {r['prefill_s'] * 1e3:,.0f} | {cfg['prompt'] / r['prefill_s']:.0f} | "
                     f"{r['load_s']:.2f} | {r['rss_load'][0]:.0f} / {r['rss_load'][1]:.0f} | "
                     f"{r['rss_end'][0]:.0f} / {r['rss_end'][1]:.0f} |")
    lines += ["", "| target | figure | goal |", "|---|---|---|"]
    get = lambda c, f: results.get((c, f))  # noqa: E731
    for form, peer in (("int4", "Q4_0"), ("fp16", "F16")):
        ours, cpp, ov = get("coremlrt", form), get("llama.cpp", form), get("openvino", form)
        if ours and cpp:
            lines.append(f"| {form} decode tokens/s / llama.cpp {peer} | {cpp['decode_s'] / ours['decode_s']:.2f} | "
                         f"≥ 1.0 |")
        if ours:
            streamed = decode_bytes(manifest, "coremlrt", form) / ours["decode_s"] / 1e9
            lines.append(f"| {form} decode: weights streamed / measured bandwidth | {streamed / best_bw:.0%} | ≥ 85 % |")
        if ours and cpp:
            lines.append(f"| {form} prefill tokens/s / llama.cpp | {cpp['prefill_s'] / ours['prefill_s']:.2f} | ≥ 1.0 |")
        if ours and ov:
            lines.append(f"| {form} prefill time / OpenVINO's | {ours['prefill_s'] / ov['prefill_s']:.2f} | ≤ 1.0 |")
        if ours and cpp:
            mine, theirs = sum(ours["rss_end"]), sum(cpp["rss_end"])
            lines.append(f"| {form} RSS after generating / llama.cpp's | {mine / theirs:.2f} ({mine:,.0f} / "
                         f"{theirs:,.0f} MB) | no higher than before |")
        if ours and "overhead" in ours:
            lines.append(f"| {form} generate() time around predict / decode step | {ours['overhead']:.2%} | ≤ 2 % |")
    return "\n".join(lines)


def write_report(table):
    path = os.path.join(ROOT, "docs", "reports", "performance.md")
    with open(path) as f:
        text = f.read()
    heading = "## Language models"
    section = f"{heading}\n\n{table}\n"
    if heading in text:
        start = text.index(heading)
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + section + (text[end:] if end >= 0 else "")
    else:
        marker = "\n## Measurements behind code choices"
        i = text.find(marker)
        text = text[:i] + "\n" + section + text[i:] if i >= 0 else text.rstrip() + "\n\n" + section
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
