"""The generated test models (tests/python/fixtures.py) against their numpy and torch
references: the cases other tests build on are right before anything relies on them."""

import pytest

import coremlrt
from corpus import load_case, mismatches, model_path, step_arrays, step_states

CASES = ["fixture_add", "fixture_stateful_accumulator", "fixture_multifunction/adapter_a",
         "fixture_multifunction/adapter_b", "fixture_fuzz_predict", "fixture_lstm", "fixture_attention"]


@pytest.mark.parametrize("name", CASES)
def test_generated_case(name):
    case = load_case(name)
    model = coremlrt.MLModel(model_path(name, case), function_name=case.get("function_name"))
    state = model.make_state() if case.get("states") else None
    for step in range(case["steps"]):
        inputs, expected = step_arrays(name, case, step)
        problems = mismatches(case, expected, model.predict(inputs, state=state))
        assert not problems, f"step {step}: " + "; ".join(problems)
        for state_name, want in step_states(name, step).items():
            problems = mismatches(case, {state_name: want}, {state_name: state.read_state(state_name)})
            assert not problems, f"state after step {step}: " + "; ".join(problems)
