"""The folder the doc examples run in (doc_examples.prepare_workdir), made once per test file."""

import pytest

from doc_examples import prepare_workdir


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("doc-examples"))
    prepare_workdir(directory)
    return directory
