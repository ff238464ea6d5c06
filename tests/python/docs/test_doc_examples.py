"""Every example of README.md and docs/guide/ runs as written (tests/python/docs/doc_examples.py
says how examples are found and marked). C++ examples are compiled and run by
tests/cpp/runtime/doc_examples_test.cc; here they are checked to be that test's code. The
batch and serving guides' examples run in test_doc_examples_services.py, so that the two test
workers share the slow ones."""

import os

import pytest

pytest.importorskip("coremltools")
pytest.importorskip("pyarrow")

from doc_examples import KINDS, REPO, SERVICE_DOCUMENTS, all_examples, named_paths, run_example  # noqa: E402

EXAMPLES = all_examples()
RUNNABLE = [e for e in EXAMPLES if e.language in ("python", "bash") and e.kind == ""]

CPP_TEST = os.path.join(REPO, "tests", "cpp", "runtime", "doc_examples_test.cc")


def test_examples_are_found():
    """The collector sees the documents' examples: the README's quick start among them."""
    documents = {e.document for e in EXAMPLES}
    assert "README.md" in documents and len(documents) >= 10, documents
    assert any(e.document == "README.md" and "coremlrt.MLModel(" in e.code for e in RUNNABLE)
    for example in EXAMPLES:
        assert example.language in ("python", "bash", "cpp", ""), f"{example.id}: unknown language {example.language}"
        assert example.kind in ("",) + KINDS, f"{example.id}: unknown marker '{example.kind}'"


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.kind in ("run by CI", "long run")], ids=lambda e: e.id)
def test_examples_not_run_here_name_real_commands(example):
    """Examples left to CI or to their own long runs name scripts and tests that exist."""
    assert example.reason, f"{example.id}: a marked example says why it is not run here"
    paths = named_paths(example.code)
    assert paths, f"{example.id}: names no script of the repository"
    for path in paths:
        assert os.path.exists(os.path.join(REPO, path)), f"{example.id}: {path} does not exist"


@pytest.mark.parametrize("example", [e for e in RUNNABLE if e.document not in SERVICE_DOCUMENTS], ids=lambda e: e.id)
def test_example_runs(example, workdir):
    run_example(example, workdir)


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.language == "cpp"], ids=lambda e: e.id)
def test_cpp_examples_are_the_tested_code(example):
    """A C++ example's lines appear, in order and together, in doc_examples_test.cc (its
    #include lines anywhere in that file), so the example compiles and runs under ctest."""
    with open(CPP_TEST, encoding="utf-8") as f:
        tested = [line.strip() for line in f.read().split("\n")]
    lines = [line.strip() for line in example.code.split("\n") if line.strip()]
    includes = [line for line in lines if line.startswith("#include")]
    body = [line for line in lines if not line.startswith("#include")]
    for include in includes:
        assert include in tested, f"{example.id}: {include} is not in {CPP_TEST}"
    starts = [i for i, line in enumerate(tested) if line == body[0]]
    assert any(tested[i:i + len(body)] == body for i in starts), (
        f"{example.id}: its code is not in {CPP_TEST} as written:\n" + "\n".join(body))
