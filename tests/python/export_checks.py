"""The check the ONNX export tests of single ops share (tests/python/export/): export a saved
model, run onnx's full checker, ask for ONNX op types, and compare ONNX Runtime's outputs with
coremlrt's prediction. Callers skip first when onnx, onnxruntime or coremltools are missing."""

import numpy as np


def export_and_compare(path, out, inputs, rtol=0.0, atol=0.0, ops=None):
    """Exports the model at `path` to `out`; every op type in `ops` must be in the graph; each
    output of ONNX Runtime must have coremlrt's shape and values within rtol/atol. Returns
    coremlrt's outputs."""
    import onnx

    import coremlrt
    from coremlrt.onnx_export import export_onnx
    from coremlrt.onnx_export.runner import ExportedModel

    export_onnx(path, out)
    onnx.checker.check_model(str(out), full_check=True)
    if ops is not None:
        assert set(ops) <= {n.op_type for n in onnx.load(str(out)).graph.node}
    model = coremlrt.MLModel(path)
    want = model.predict(inputs)
    got = ExportedModel(model, out).predict(inputs)
    assert set(got) == set(want)
    for name in want:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol, err_msg=name)
    return want
