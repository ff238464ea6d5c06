#!/usr/bin/env python3
"""Runs coremltools' own MIL op tests with predictions made by coremlrt, and reports.

    python3 scripts/coremltools_op_tests.py                 # full run (about an hour on 2 cores)
    python3 scripts/coremltools_op_tests.py --sample 25 --check   # CI: every 25th case, no regressions
    python3 scripts/coremltools_op_tests.py --suite runtime --report docs/reports/coremltools-runtime-tests.md

``--suite ops_neuralnetwork`` runs the op tests' neuralnetwork-backend cases (the op suite
leaves them out). ``--suite neural_network``, ``sklearn``, ``xgboost`` and ``pipeline`` run
``coremltools/test/neural_network``, ``test/sklearn_tests``, ``test/xgboost_tests`` and
``test/pipeline``. In these five suites a model coremlrt refuses fails its case, the cause
naming the refused layer kind or model type; each has its recorded results
(tests/conformance/recorded_<suite>_results.json) and its section of docs/reports/conformance.md
(``--report docs/reports/conformance.md``).

The sklearn suite's SVM files import libsvm's modules by their old top-level names
(``import svmutil``); tests/conformance/libsvm_toplevel/ gives those names to libsvm-official's
``libsvm.svmutil`` and ``libsvm.svm`` for its test processes. Cases that cannot run here because
their data set download fails (coremltools/test/utils.py's load_boston needs the network) are
counted as "unavailable", apart from passes and failures; load_boston (the Boston housing
data) reads tests/conformance/data/ instead of the network (tests/conformance/offline_datasets.py),
so no case of these suites needs it.

The xgboost suite runs with numpy 1 (on numpy 2 coremltools 9's scikit-learn GradientBoosting
converter, which the suite also tests, fails) and XGBoost 1.7.6, the last 1.x release (2.0.3 and
2.1.4 reject the numpy-array feature names the tests give DMatrix). scripts/xgboost_tested_env.sh installs
them into build/xgboost-1.7.6 (pip --target, the system's packages stay as they are; setup.sh
runs it); the suite runs on it with ``PYTHONPATH=build/xgboost-1.7.6:<coremlrt> python3
scripts/coremltools_op_tests.py --suite xgboost``. The report names the library versions the
tests ran with.

``--suite runtime`` runs coremltools' runtime API tests instead (``coremltools/test/api``,
``test/modelpackage``, ``test/ml_program``, ``test/blob``: compiled models, compute plans,
model structure, assets, weights), a few minutes, with its own recorded results
(tests/conformance/recorded_runtime_results.json) and report.

Each test file of the installed ``coremltools/converters/mil/mil/ops/tests`` runs in its own
pytest process with the plugin tests/conformance/coremltools_op_suite.py, which records one
JSON line per case. A process that dies (a crash in a kernel, say) is restarted after the
case it was running, which is recorded as a crash; the other cases of the file still run.

A full run writes docs/reports/conformance.md (``--report``) and, with ``--record``, the list of
cases that did not pass to tests/conformance/recorded_results.json. ``--check`` compares a
run with that list and exits non-zero when a case recorded as passing fails or crashes.
"""

import argparse
import collections
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
PLUGIN_DIR = REPO / "tests" / "conformance"
RECORDED = PLUGIN_DIR / "recorded_results.json"
RECORDED_RUNTIME = PLUGIN_DIR / "recorded_runtime_results.json"
# The op suite predicting through ONNX exports (--via onnx): its cases that did not pass.
RECORDED_ONNX = PLUGIN_DIR / "recorded_onnx_results.json"
# coremltools' runtime API test folders (inside the installed coremltools package).
RUNTIME_FOLDERS = ("test/api", "test/modelpackage", "test/ml_program", "test/blob")
KNOWN_DIFFERENCES = PLUGIN_DIR / "known_differences.json"
KNOWN_RUNTIME_DIFFERENCES = PLUGIN_DIR / "known_runtime_differences.json"
FILE_TIMEOUT_S = 1800  # one test file; a hang past this is recorded like a crash
NOT_PASSING = ("failed", "crash")
# Suites of models of every type: suite -> (folders inside the installed coremltools, or None
# for the op tests' folder; the plugin's --coremlrt-mode).
MODEL_SUITES = {
    "ops_neuralnetwork": (None, "neuralnetwork"),
    "neural_network": (("test/neural_network",), "models"),
    "sklearn": (("test/sklearn_tests",), "models"),
    "xgboost": (("test/xgboost_tests",), "models"),
    "pipeline": (("test/pipeline",), "models"),
}
# coremltools' SVM tests (test/sklearn_tests/test_SVC.py, test_SVR.py, test_NuSVC.py, test_NuSVR.py)
# `import svmutil` and `from svm import ...` by libsvm's old top-level names; this folder gives
# those names to the modules libsvm-official installs as libsvm.svmutil and libsvm.svm.
LIBSVM_TOPLEVEL = PLUGIN_DIR / "libsvm_toplevel"


def recorded_path(suite):
    if suite == "ops":
        return RECORDED
    if suite == "runtime":
        return RECORDED_RUNTIME
    return PLUGIN_DIR / f"recorded_{suite}_results.json"


# Suites that can predict through the ONNX export (--via onnx), and where their runs are recorded.
ONNX_SUITES = ("ops", "ops_neuralnetwork", "neural_network", "pipeline", "sklearn")


def recorded_onnx_path(suite):
    return RECORDED_ONNX if suite == "ops" else PLUGIN_DIR / f"recorded_onnx_{suite}_results.json"


def known_differences_path(suite):
    if suite == "ops":
        return KNOWN_DIFFERENCES
    if suite == "runtime":
        return KNOWN_RUNTIME_DIFFERENCES
    return PLUGIN_DIR / f"known_{suite}_differences.json"


def plugin_mode(suite):
    return MODEL_SUITES[suite][1] if suite in MODEL_SUITES else "mlprogram"


def coremltools_dir():
    import importlib.util
    spec = importlib.util.find_spec("coremltools")
    if spec is None:
        sys.exit("coremltools is not installed")
    return pathlib.Path(spec.origin).parent


def suite_dir(suite="ops"):
    """The folder node ids are relative to: the op tests' folder, or coremltools' package."""
    if suite == "runtime" or MODEL_SUITES.get(suite, (None,))[0]:
        return coremltools_dir()
    return coremltools_dir() / "converters" / "mil" / "mil" / "ops" / "tests"


def test_files(root, only, suite="ops"):
    if suite == "runtime":
        files = sorted(p for folder in RUNTIME_FOLDERS for p in (root / folder).rglob("test_*.py"))
    elif MODEL_SUITES.get(suite, (None,))[0]:
        files = sorted(p for folder in MODEL_SUITES[suite][0] for p in (root / folder).rglob("test_*.py"))
    else:
        files = sorted(root.rglob("test_*.py"))
    return [p for p in files if not only or any(o in str(p.relative_to(root)) for o in only)]


def run_group(paths, name, root, out_dir, sample, mode="mlprogram", extra_path=(), skip_slow=False, via="coremlrt"):
    """Runs test files in one pytest process to the end, restarting it after each crash.
    Returns their records."""
    results = out_dir / (name + ".jsonl")
    current = out_dir / (name + ".current")
    results.unlink(missing_ok=True)
    ini = out_dir / "pytest.ini"  # an empty configuration: none of our repository's settings
    env = dict(os.environ, COREMLRT_SUITE_CURRENT=str(current), PYTHONHASHSEED="0")
    # Absolute entries: the tests run in out_dir, where a relative PYTHONPATH (build-dev/python)
    # would silently fall back to an installed coremlrt.
    caller_path = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGIN_DIR)] + [str(p) for p in extra_path] + caller_path)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ini),
               "--rootdir", str(root), "-p", "coremltools_op_suite", "--coremlrt-results", str(results),
               "--coremlrt-sample", str(sample), "--coremlrt-mode", mode, "--coremlrt-via", via] + (["--coremlrt-skip-slow"] if skip_slow else []) \
        + [str(p) for p in paths]
    resume = []
    while True:
        current.unlink(missing_ok=True)
        try:
            proc = subprocess.run(command + resume, cwd=out_dir, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=FILE_TIMEOUT_S)
            code, tail = proc.returncode, proc.stdout.decode(errors="replace")[-2000:]
        except subprocess.TimeoutExpired:
            code, tail = "timeout", ""
        # pytest exits 0-5 on its own; anything else (a signal, an abort) is a crash.
        if code in (0, 1, 5):
            break
        recorded = _read(results)
        running = current.read_text() if current.exists() else None
        if running is None or running in {r["nodeid"] for r in recorded}:
            # Died outside a case (collection, start-up): record the files as broken entries.
            for path in paths:
                relative = str(path.relative_to(root))
                _append(results, {"nodeid": relative, "file": relative, "op": "(file)", "outcome": "crash",
                                  "cause": "test file did not run", "detail": f"exit {code}: {tail[-300:]}"})
            break
        _append(results, {"nodeid": running, "file": running.split("::")[0],
                          "op": _op_of(running), "outcome": "crash",
                          "cause": {"timeout": "timeout", 3: "pytest internal error"}.get(code, "crash"),
                          "detail": f"process ended with {code}"})
        resume = ["--coremlrt-resume"]
    return _read(results)


def _op_of(nodeid):
    from coremltools_op_suite import op_of  # PLUGIN_DIR is on sys.path (see __main__)
    return op_of(nodeid)


def _read(path):
    if not path.exists():
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _append(path, record):
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def summarize(records):
    counts = collections.Counter(r["outcome"] for r in records)
    ran = counts["passed"] + counts["failed"] + counts["crash"]
    return counts, ran, (counts["passed"] / ran if ran else 0.0)


def check_against_recorded(records, sample, recorded_path=None):
    """Problems of this run compared with the recorded full run (empty when it holds)."""
    recorded = json.loads((recorded_path or RECORDED).read_text())
    not_passed = recorded["not_passed"]
    problems = []
    for r in records:
        if r["outcome"] in NOT_PASSING and r["nodeid"] not in not_passed:
            problems.append(f"regression: {r['nodeid']}: {r['outcome']} ({r.get('cause')}: {r.get('detail')})")
    ran = sum(1 for r in records if r["outcome"] not in ("not_applicable", "slow_not_run"))
    # A recording may itself be a sample (every N-th case: the suites too long to run whole in
    # the test command); it then holds recorded["applicable"] of about that many times as many.
    # Cases left out as slow (--skip-slow, each recorded once) are not expected to run.
    slow = sum(1 for r in records if r["outcome"] == "slow_not_run")
    expected = (recorded["applicable"] * recorded.get("sample", 1) - slow) / sample
    if ran < 0.9 * expected:  # a sample that silently shrank would prove nothing
        problems.append(f"only {ran} cases ran; the recorded suite has {recorded['applicable']} "
                        f"applicable cases, so about {expected:.0f} were expected at --sample {sample}")
    return problems


def record(records, version, recorded_path=None, sample=1):
    applicable = [r for r in records if r["outcome"] != "not_applicable"]
    (recorded_path or RECORDED).write_text(json.dumps({
        "coremltools": version,
        "sample": sample,
        "applicable": len(applicable),
        "not_passed": {r["nodeid"]: f"{r['outcome']}: {r.get('cause') or r.get('detail')}"
                       for r in applicable if r["outcome"] != "passed"},
    }, indent=1, sort_keys=True) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=1, help="run every N-th case of each file")
    parser.add_argument("--jobs", type=int, default=2, help="test files run at once")
    parser.add_argument("--only", action="append", help="run test files whose path contains this")
    parser.add_argument("--suite", choices=("ops", "runtime") + tuple(MODEL_SUITES), default="ops",
                        help="ops: the MIL op tests; runtime: coremltools' runtime API tests; "
                             "ops_neuralnetwork, neural_network, sklearn, xgboost, pipeline: models of "
                             "every type (see the module text)")
    parser.add_argument("--out", help="folder for per-file results (default build/coremltools-<suite>-suite)")
    parser.add_argument("--report", help="write the markdown report here (docs/reports/conformance.md)")
    parser.add_argument("--record", action="store_true", help=f"write {RECORDED.relative_to(REPO)}")
    parser.add_argument("--check", action="store_true", help="fail on a regression from the recorded run")
    parser.add_argument("--skip-slow", action="store_true",
                        help="leave out the cases coremltools marks slow (stress tests), for a quick --check; "
                             "not with --record or --report")
    parser.add_argument("--via", choices=("coremlrt", "onnx"), default="coremlrt",
                        help="onnx: predict through each model's ONNX export (coremlrt.export_onnx) run by ONNX "
                             "Runtime; --check then compares with tests/conformance/recorded_onnx_results.json, "
                             "--report writes the pass rate per op against the native run (ops suite only)")
    parser.add_argument("--from-results", action="store_true",
                        help="run nothing: report on the per-file results already in --out (a full run "
                             "whose files were partly rerun with --only, say)")
    args = parser.parse_args()
    if args.skip_slow and (args.record or args.report):
        parser.error("--skip-slow runs part of the suite: it cannot be recorded or reported")
    if args.via == "onnx" and args.suite not in ONNX_SUITES:
        parser.error(f"--via onnx runs the suites {', '.join(ONNX_SUITES)}")

    import coremltools
    root = suite_dir(args.suite)
    args.out = args.out or str(REPO / "build" / ({"ops": "coremltools-op-suite",
                                                  "runtime": "coremltools-runtime-suite"}.get(
                                                     args.suite, f"coremltools-{args.suite}-suite")
                                                 + ("-onnx" if args.via == "onnx" else "")))
    # Absolute: each test file's pytest runs inside this folder and is handed paths in it.
    args.out = os.path.abspath(args.out)
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "pytest.ini").write_text("[pytest]\n")
    files = test_files(root, args.only, args.suite)
    if args.from_results:
        results = sorted(out_dir.glob("*.jsonl"))
        finish(args, [r for path in results for r in _read(path)], coremltools.__version__, None, len(results))
        return
    started = time.monotonic()
    # A full run gives each file its own process, so that one file's crash or hang costs only
    # that file's time; a sample is mostly start-up cost (importing coremltools and torch), so
    # it runs one process per job.
    if args.sample == 1:
        groups = {str(f.relative_to(root)): [f] for f in files}
    else:
        groups = {f"sample-{i}": files[i::args.jobs] for i in range(args.jobs)}
    records = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_group, paths, name.replace("/", "__"), root, out_dir, args.sample,
                               plugin_mode(args.suite),
                               (LIBSVM_TOPLEVEL,) if args.suite == "sklearn" else (), args.skip_slow, args.via): name
                   for name, paths in groups.items() if paths}
        for future in concurrent.futures.as_completed(futures):
            file_records = future.result()
            records += file_records
            counts, ran, _ = summarize(file_records)
            print(f"{futures[future]}: {counts['passed']}/{ran} passed, "
                  f"{counts['failed']} failed, {counts['crash']} crashed, {counts['skipped']} skipped, "
                  f"{counts['unavailable']} unavailable, {counts['not_applicable']} n/a", flush=True)
    finish(args, records, coremltools.__version__, time.monotonic() - started, len(files))


def finish(args, records, version, seconds, file_count):
    counts, ran, rate = summarize(records)
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    print(f"\n{file_count} files{took}: {counts['passed']} of {ran} cases passed ({rate:.2%}); "
          f"{counts['failed']} failed, {counts['crash']} crashed, {counts['skipped']} skipped by the tests, "
          f"{counts['unavailable']} unavailable here (data set download failed), "
          f"{counts['not_applicable']} not applicable")
    with open(pathlib.Path(args.out) / "results.json", "w") as f:
        json.dump(records, f)

    from coremltools_op_report import write_onnx_report, write_report, write_runtime_report
    from coremltools_suite_report import write_suite_section
    recorded = recorded_onnx_path(args.suite) if args.via == "onnx" else recorded_path(args.suite)
    if args.report and args.via == "onnx":
        write_onnx_report(records, pathlib.Path(args.report), version, args.sample, seconds,
                          json.loads(recorded_path(args.suite).read_text()), args.suite)
        print(f"report: {args.report}")
    elif args.report:
        if args.suite in MODEL_SUITES:
            write_suite_section(args.suite, records, pathlib.Path(args.report), version, args.sample, seconds,
                                _known_differences(known_differences_path(args.suite)),
                                library_versions(args.suite))
        elif args.suite == "runtime":
            write_runtime_report(records, pathlib.Path(args.report), version, seconds,
                                 _known_differences(KNOWN_RUNTIME_DIFFERENCES))
        else:
            write_report(records, pathlib.Path(args.report), version, args.sample, seconds, _known_differences())
        print(f"report: {args.report}")
    if args.record:
        record(records, version, recorded, args.sample)
        print(f"recorded: {recorded}")
    if args.check:
        problems = check_against_recorded(records, args.sample, recorded)
        for p in problems:
            print(p)
        if problems:
            sys.exit(1)
        print("no regression from the recorded run")


# The libraries each classic-model suite's tests convert from, named in its report.
SUITE_LIBRARIES = {
    "sklearn": ("scikit-learn", "libsvm-official", "numpy", "pandas"),
    "xgboost": ("xgboost", "scikit-learn", "numpy", "pandas"),
    "pipeline": ("scikit-learn", "libsvm-official", "numpy"),
}


def library_versions(suite):
    """"xgboost 1.4.2, numpy 1.26.4, ..." as this process imports them (the test processes get
    the same PYTHONPATH), or None for a suite without such a list."""
    import importlib

    versions = []
    for name in SUITE_LIBRARIES.get(suite, ()):
        module = {"scikit-learn": "sklearn", "libsvm-official": None}.get(name, name)
        try:
            if module is None:
                import importlib.metadata
                version = importlib.metadata.version(name)
            else:
                version = importlib.import_module(module).__version__
        except Exception:  # noqa: BLE001 - a library that is missing is reported as such
            version = "not installed"
        versions.append(f"{name} {version}")
    return ", ".join(versions) or None


def _known_differences(path=None):
    path = path or KNOWN_DIFFERENCES
    return json.loads(path.read_text()) if path.exists() else []


if __name__ == "__main__":
    sys.path.insert(0, str(PLUGIN_DIR))
    main()
