"""Cases in the corpus layout: the models the repository generates itself (tests/python/fixtures.py,
names starting 'fixture_') and the optional shared conformance corpus (../shared/corpus beside the
checkout, or COREMLRT_CORPUS), an extra set whose tests skip, saying so, when it is absent."""

import json
import os

import numpy as np
import pytest

import fixtures

CORPUS_DIR = os.environ.get(
    "COREMLRT_CORPUS",
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "corpus"))
CORPUS_PRESENT = os.path.isdir(CORPUS_DIR)
ABSENT_REASON = (f"the extra conformance corpus is not at {os.path.abspath(CORPUS_DIR)} "
                 "(place ../shared/corpus beside the checkout or set COREMLRT_CORPUS); its cases are skipped")
requires_corpus = pytest.mark.skipif(not CORPUS_PRESENT, reason=ABSENT_REASON)


def case_names():
    """Corpus case names for parametrize; one skipped placeholder, with the reason, when absent."""
    if not CORPUS_PRESENT:
        return [pytest.param("corpus-absent", marks=pytest.mark.skip(reason=ABSENT_REASON))]
    return sorted(n for n in os.listdir(CORPUS_DIR) if os.path.isfile(os.path.join(CORPUS_DIR, n, "case.json")))


def case_dir(name):
    if name.startswith("fixture_"):
        return fixtures.case_dir(name)
    return os.path.join(CORPUS_DIR, name)


def load_case(name):
    with open(os.path.join(case_dir(name), "case.json")) as f:
        return json.load(f)


def model_path(name, case):
    return os.path.normpath(os.path.join(case_dir(name), case.get("model_file", "model.mlpackage")))


def step_arrays(name, case, step):
    """(inputs, expected) dicts for one step of a case."""
    base = case_dir(name)
    if case["steps"] == 1:
        files = ("inputs.npz", "expected.npz")
    else:
        files = (f"step_{step}_inputs.npz", f"step_{step}_expected.npz")
    with np.load(os.path.join(base, files[0])) as i, np.load(os.path.join(base, files[1])) as e:
        return dict(i), dict(e)


def step_states(name, step):
    """Expected state contents after a step of a stateful case ({} when not recorded)."""
    path = os.path.join(case_dir(name), f"step_{step}_states.npz")
    if not os.path.isfile(path):
        return {}
    with np.load(path) as states:
        return dict(states)


def tolerance(case, output):
    override = (case.get("per_output_tolerance") or {}).get(output)
    if override:
        return float(override["rtol"]), float(override["atol"])
    return float(case["rtol"]), float(case["atol"])


def mismatches(case, expected, actual):
    """Describe every output that misses its tolerance (the corpus README's rule)."""
    problems = []
    for name, exp in expected.items():
        if name not in actual:
            problems.append(f"{name}: missing from outputs {sorted(actual)}")
            continue
        act = actual[name]
        if isinstance(act, dict):  # a classifier's {label: probability}: a vector in class_labels order
            labels = case.get("class_labels") or []
            if set(act) != set(labels):
                problems.append(f"{name}: labels {sorted(map(str, act))} != class_labels {sorted(map(str, labels))}")
                continue
            act = np.array([act[label] for label in labels], dtype=np.float64)
        act = np.asarray(act)
        exp = np.asarray(exp)
        if exp.dtype.kind in "US":
            if str(exp) != str(act):
                problems.append(f"{name}: {act!r} != {exp!r}")
            continue
        if act.shape != exp.shape:
            problems.append(f"{name}: shape {act.shape} != expected {exp.shape}")
            continue
        rtol, atol = tolerance(case, name)
        err = np.abs(act.astype(np.float64) - exp.astype(np.float64))
        bad = ~(err <= atol + rtol * np.abs(exp.astype(np.float64)))
        if bad.any():
            problems.append(f"{name}: {int(bad.sum())}/{bad.size} elements off, max abs err {err.max():.3g} "
                            f"(rtol {rtol}, atol {atol})")
    return problems
