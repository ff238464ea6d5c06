"""lm-evaluation-harness against ``coremlrt serve``: the same loglikelihood task run by
``lm_eval --model local-completions`` (the OpenAI-compatible /v1/completions of coremlrt serve,
serving the Core ML model) and by ``lm_eval --model hf`` (transformers on the torch weights the
Core ML model was converted from); prints both accuracies and how many answers agree.

    python3 benchmarks/eval_llm.py [--python build/llm-venv/bin/python] [--questions 60]

The model is the small LLaMA-shaped model of tests/python/llm/llm_models.py (random weights, so
its accuracy is near chance: what counts is that both runs give the same one). The task is
defined from a local file (nothing may be downloaded): multiple-choice questions whose choices
are spans of tests/python/llama_helpers.SAMPLE_TEXT. lm-eval is a heavy optional tool: install
it beside the system's packages, e.g. ``python3 -m venv --system-site-packages build/llm-venv &&
build/llm-venv/bin/pip install lm-eval openai`` and pass that interpreter with --python.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python", "llm"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python", "serving"))

TASK = "coremlrt_local_mc"


def write_task(directory, questions, seed=0):
    import numpy as np

    from llama_helpers import SAMPLE_TEXT

    rng = np.random.default_rng(seed)
    words = SAMPLE_TEXT.split()
    rows = []
    for _ in range(questions):
        start = int(rng.integers(0, len(words) - 12))
        context = " ".join(words[start:start + 6])
        true = " ".join(words[start + 6:start + 9])
        others = [" ".join(words[s:s + 3]) for s in rng.integers(0, len(words) - 3, 3)]
        choices = [true] + others
        order = rng.permutation(4)
        rows.append({"question": context, "choices": [" " + choices[i] for i in order],
                     "answer": int(np.nonzero(order == 0)[0][0])})
    data = os.path.join(directory, "questions.jsonl")
    with open(data, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    with open(os.path.join(directory, f"{TASK}.yaml"), "w") as f:
        f.write(f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
                "test_split: test\noutput_type: multiple_choice\ndoc_to_text: \"{{question}}\"\n"
                "doc_to_choice: \"{{choices}}\"\ndoc_to_target: \"{{answer}}\"\n"
                "metric_list:\n  - metric: acc\n  - metric: acc_norm\n")
    return directory


def run_lm_eval(python, model, model_args, task_dir, out_dir, extra=()):
    command = [python, "-m", "lm_eval", "--model", model, "--model_args", model_args, "--tasks", TASK,
               "--include_path", task_dir, "--output_path", out_dir, "--log_samples", "--batch_size", "1", *extra]
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    started = time.monotonic()
    run = subprocess.run(command, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}")
    results = json.load(open(sorted(glob.glob(os.path.join(out_dir, "**", "results_*.json"), recursive=True))[-1]))
    samples = sorted(glob.glob(os.path.join(out_dir, "**", f"samples_{TASK}_*.jsonl"), recursive=True))[-1]
    with open(samples) as f:
        predictions = {}
        for line in f:
            s = json.loads(line)
            predictions[s["doc_id"]] = [float(r[0][0]) for r in s["resps"]]
    return results["results"][TASK], predictions, time.monotonic() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter that has lm_eval")
    parser.add_argument("--questions", type=int, default=60)
    args = parser.parse_args(argv)
    import llm_models as M
    import server_helpers as SH

    hf_dir, package = M.path("hf"), M.package("mask_fp16")
    max_length = M.config().max_len
    work = tempfile.mkdtemp(prefix="coremlrt-lm-eval-")
    os.makedirs(os.path.join(work, "task"))
    task_dir = write_task(os.path.join(work, "task"), args.questions)
    with SH.serve(package, "--tokenizer", M.path("tokenizer"), models=["model"]) as server:
        local, local_choices, local_s = run_lm_eval(
            args.python, "local-completions",
            f"model=model,base_url=http://{server.http_url}/v1/completions,tokenizer={hf_dir},"
            f"tokenizer_backend=huggingface,tokenized_requests=True,add_bos_token=True,num_concurrent=1,max_retries=1,"
            f"max_length={max_length}", task_dir, os.path.join(work, "local"))
    hf, hf_choices, hf_s = run_lm_eval(args.python, "hf", f"pretrained={hf_dir},dtype=float32,max_length={max_length}",
                                       task_dir, os.path.join(work, "hf"), ("--device", "cpu"))
    import numpy as np

    agree = sum(int(np.argmax(local_choices[d]) == np.argmax(hf_choices[d])) for d in hf_choices)
    diff = max(abs(a - b) for d in hf_choices for a, b in zip(local_choices[d], hf_choices[d]))
    print(f"| run | acc | acc_norm | seconds |\n|---|---|---|---|")
    print(f"| lm_eval --model local-completions (coremlrt serve, Core ML fp16) | {local['acc,none']:.4f} | "
          f"{local['acc_norm,none']:.4f} | {local_s:.0f} |")
    print(f"| lm_eval --model hf (transformers, fp32) | {hf['acc,none']:.4f} | {hf['acc_norm,none']:.4f} | {hf_s:.0f} |")
    print(f"questions: {len(hf_choices)}; same choice picked: {agree}; largest log-likelihood difference: {diff:.4f}")
    same = local["acc,none"] == hf["acc,none"] and local["acc_norm,none"] == hf["acc_norm,none"]
    print("same accuracy" if same else "ACCURACY DIFFERS")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
