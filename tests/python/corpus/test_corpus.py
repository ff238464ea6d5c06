"""Every case of the shared corpus through coremlrt.MLModel(...).predict.

A case is an expected failure only when this build provably cannot run it yet: `inspect`
reports ops (or neuralNetwork layers) it cannot run, or a model type or layout it does not
run. Those are decided before predicting, never from the result, so a wrong answer is
always a failure. The cases in MUST_PASS may not be expected failures at all.
"""

import numpy as np
import pytest

import coremlrt
from coremlrt import _core
from corpus import case_names, load_case, mismatches, model_path, requires_corpus, step_arrays, step_states

MUST_PASS = {
    "repro_add", "repro_add_fp32", "torch_mlp", "torch_mlp_fp32",
    # elementwise binary and unary
    "mil_add_bcast", "mil_add_bcast_fp16", "mil_add_fp16_io", "mil_sub_bcast", "mil_mul_bcast",
    "mil_mul_bcast_fp16", "mil_real_div_bcast", "mil_floor_div_fp32", "mil_pow_bcast", "mil_maximum_bcast",
    "mil_minimum_bcast", "mil_equal_bcast", "mil_less_bcast", "mil_compare_logical", "mil_select",
    "mil_abs", "mil_exp", "mil_exp_fp16", "mil_log", "mil_sqrt", "mil_rsqrt", "mil_tanh", "mil_erf",
    "mil_round", "mil_clip", "mil_relu", "mil_sigmoid", "mil_silu", "mil_gelu_exact", "mil_gelu_exact_fp16",
    "mil_gelu_tanh",
    # reductions, softmax, matmul/linear, layout, cast
    "mil_reduce_sum_mean_max", "mil_reduce_argmax", "mil_softmax", "mil_softmax_fp16", "mil_matmul",
    "mil_matmul_fp16", "mil_matmul_const_weight", "mil_linear", "mil_linear_fp16", "mil_reshape_transpose",
    "mil_concat_split", "mil_slice", "mil_cast",
    # neuralNetwork models translated into the same program
    "nn_mlp",
}


def blockers(name, case):
    """Why this build cannot run the case yet, or None."""
    report = _core.inspect(model_path(name, case))
    if report["problem"]:
        return "unsupported: " + report["problem"]
    missing = sorted({u["op_type"] for f in report["functions"] for u in f["unsupported"]})
    if missing:
        return "missing ops: " + ", ".join(missing)
    return None


@pytest.mark.parametrize("name", case_names())
def test_corpus_case(name):
    case = load_case(name)
    reason = blockers(name, case)
    if reason:
        assert name not in MUST_PASS, f"{name} must pass but: {reason}"
        pytest.xfail(reason)
    path = model_path(name, case)
    functions = case.get("step_functions") or [case.get("function_name")] * case["steps"]
    models = {f: coremlrt.MLModel(path, function_name=f) for f in set(functions)}
    # One state carried across the steps, shared by the instances of every function.
    state = models[functions[0]].make_state() if case.get("states") else None
    for step, function in enumerate(functions):
        inputs, expected = step_arrays(name, case, step)
        outputs = models[function].predict(inputs, state=state)
        problems = mismatches(case, expected, outputs)
        assert not problems, f"step {step} ({function or 'default function'}): " + "; ".join(problems)
        if state is not None:
            expected_states = step_states(name, step)
            for state_name, value in expected_states.items():
                problems = mismatches(case, {state_name: value}, {state_name: state.read_state(state_name)})
                assert not problems, f"state after step {step}: " + "; ".join(problems)


@requires_corpus
def test_must_pass_cases_exist():
    names = set(case_names())
    assert MUST_PASS <= names, f"missing corpus cases: {sorted(MUST_PASS - names)}"
