import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # serve_models, server_helpers

# The server runs in a subprocess, as users run it (its messages and tritonclient's could share
# a process: protocol/grpc_inference.proto has a package of its own).
for module in ("uvicorn", "grpc"):
    if importlib.util.find_spec(module) is None:
        pytest.skip("coremlrt serve needs the serve extra (pip install coremlrt[serve])", allow_module_level=True)
pytest.importorskip("tritonclient.grpc", reason="the serving tests use tritonclient (the serve extra)")

import fixtures  # noqa: E402
import serve_models as SM  # noqa: E402
import server_helpers as SH  # noqa: E402


@pytest.fixture(scope="session")
def model_paths():
    return {"tiny": SM.model_path("tiny"), "conv": SM.model_path("conv"), "lm": SM.model_path("lm"),
            "multi": os.path.join(fixtures.case_dir("fixture_multifunction"), "model.mlpackage")}


@pytest.fixture(scope="session")
def server(model_paths, tmp_path_factory):
    """One server for the folder of every test model, with a short batching wait so that
    concurrent requests for the conv model surely merge."""
    folder = SH.model_folder(str(tmp_path_factory.mktemp("models")), model_paths)
    with SH.serve(folder, "--max-wait-ms", "20", "--workers", "2", models=list(model_paths)) as s:
        yield s
