"""Non-maximum suppression through the ONNX export (ops_detection.py): the ML program op
(iOS15 with its score threshold and count output, iOS17 without) and the nonMaximumSuppression
model type, ONNX Runtime on the export against coremlrt's prediction, compared exactly (the
kept rows are copies of the inputs, so any difference is a different selection).

The data make the rules matter: scores on a coarse grid (equal best scores, where the lower box
index goes first), scores exactly at the threshold (kept by the model type, dropped by the op),
boxes of zero area and negative size, NaN scores, heavily overlapping boxes of different
classes (per-class suppression), fewer candidates than max_boxes and more.
"""

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
ct = pytest.importorskip("coremltools")

import coremlrt  # noqa: E402
from coremlrt.onnx_export import export_onnx  # noqa: E402
from coremlrt.onnx_export.runner import ExportedModel  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from detection_helpers import CLASSES, nms_spec  # noqa: E402


def _boxes_and_scores(rng, count, classes, dtype):
    centres = rng.integers(0, 6, (count, 2)) / 5.0
    sizes = rng.integers(-1, 4, (count, 2)) / 5.0            # zero and negative sizes among them
    boxes = np.concatenate([centres, sizes], axis=1).astype(dtype)
    scores = (rng.integers(0, 5, (count, classes)) / 4.0).astype(dtype)  # 0, 0.25, ... 1: many ties
    if count > 3:
        scores[2, :] = np.nan                                   # nothing to rank it by
        scores[3, 0] = np.nan
    return boxes, scores


def _nms_model(tmp_path, **kwargs):
    path = str(tmp_path / "nms.mlmodel")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ct.models.MLModel(nms_spec(**kwargs)).save(path)
    export_onnx(path, tmp_path / "nms.onnx")
    model = coremlrt.MLModel(path)
    return model, ExportedModel(model, tmp_path / "nms.onnx")


@pytest.mark.parametrize("dtype", ["float32", "double"])
@pytest.mark.parametrize("per_class", [False, True])
@pytest.mark.parametrize("rows", [(0, -1), (6, -1), (0, 2)])
def test_nms_model_type_through_onnx(dtype, per_class, rows, tmp_path):
    model, runner = _nms_model(tmp_path, dtype=dtype, per_class=per_class, rows=rows, confidence=0.5)
    np_dtype = np.float32 if dtype == "float32" else np.float64
    rng = np.random.default_rng(3)
    counts = set()
    for trial in range(12):
        boxes, scores = _boxes_and_scores(rng, [0, 1, 5, 9, 16, 30][trial % 6], CLASSES, np_dtype)
        feed = {"raw_confidence": scores, "raw_coordinates": boxes}
        if trial % 3 == 1:
            feed.update(iouThreshold=0.0, confidenceThreshold=0.25)  # the optional inputs override
        want, got = model.predict(feed), runner.predict(feed)
        for name in ("confidence", "coordinates"):
            assert got[name].dtype == want[name].dtype
            np.testing.assert_array_equal(got[name], want[name], err_msg="%s, trial %d" % (name, trial))
        counts.add(int((np.abs(want["coordinates"]).sum(1) + np.abs(want["confidence"]).sum(1) > 0).sum()))
    assert len(counts) > 2  # the trials keep different numbers of boxes


def _op_program(ios17, count, classes, iou, score, max_boxes, per_class):
    from coremltools.converters.mil import Builder as mb
    target = ct.target.iOS17 if ios17 else ct.target.iOS15
    box_shape, score_shape = ((1, 4, count), (1, classes, count)) if ios17 else ((1, count, 4), (1, count, classes))

    @mb.program(input_specs=[mb.TensorSpec(box_shape), mb.TensorSpec(score_shape)], opset_version=target)
    def program(boxes, scores):
        if ios17:
            return mb.non_maximum_suppression(boxes=boxes, scores=scores, iou_threshold=iou, max_boxes=max_boxes,
                                              per_class_suppression=per_class)
        return mb.non_maximum_suppression(boxes=boxes, scores=scores, iou_threshold=iou, score_threshold=score,
                                          max_boxes=max_boxes, per_class_suppression=per_class)
    return program, target


@pytest.mark.parametrize("ios17", [False, True])
@pytest.mark.parametrize("per_class", [False, True])
@pytest.mark.parametrize("max_boxes", [1, 4, 40])
def test_nms_op_through_onnx(ios17, per_class, max_boxes, tmp_path):
    count, classes = 20, 3
    program, target = _op_program(ios17, count, classes, 0.3, 0.5, max_boxes, per_class)
    path = str(tmp_path / "m.mlpackage")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ct.convert(program, convert_to="mlprogram", minimum_deployment_target=target,
                   compute_precision=ct.precision.FLOAT32).save(path)
    export_onnx(path, tmp_path / "m.onnx")
    model = coremlrt.MLModel(path)
    runner = ExportedModel(model, tmp_path / "m.onnx")
    rng = np.random.default_rng(5)
    kept = set()
    for trial in range(10):
        boxes, scores = _boxes_and_scores(rng, count, classes, np.float32)
        if trial == 3:
            scores = np.minimum(scores, 0.5)  # none above the threshold: iOS15 keeps the best one
        if trial == 4:
            scores[:] = 0.5                   # every box ties
        if ios17:
            boxes, scores = boxes.T, scores.T
        feed = {"boxes": boxes[None], "scores": scores[None]}
        want, got = model.predict(feed), runner.predict(feed)
        assert set(got) == set(want)
        for name in want:
            assert got[name].dtype == want[name].dtype, name
            np.testing.assert_array_equal(got[name], want[name], err_msg="%s, trial %d" % (name, trial))
        indices = next(v for v in want.values() if v.dtype == np.int32 and v.ndim == 2)
        kept.add(int((indices >= 0).sum()))
    assert len(kept) > 1 or max_boxes < 40  # below max_boxes, the selection decides the count


@pytest.mark.parametrize("form", ["mlprogram", "neuralnetwork"])
@pytest.mark.parametrize("per_class", [False, True])
def test_detector_pipeline_through_onnx(form, per_class, tmp_path, monkeypatch):
    """A torch detector (an ML program or a neural network) then a nonMaximumSuppression model,
    joined by coremltools' make_pipeline, as exported detectors are built (docs/design/detection.md)."""
    import tempfile
    torch = pytest.importorskip("torch")
    from detection_helpers import IMAGE, Detector
    traced = torch.jit.trace(Detector(), torch.zeros(IMAGE))
    options = dict(inputs=[ct.TensorType(name="image", shape=IMAGE)],
                   outputs=[ct.TensorType(name="raw_confidence"), ct.TensorType(name="raw_coordinates")])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # make_pipeline's temporary packages
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if form == "neuralnetwork":
            detector = ct.convert(traced, convert_to="neuralnetwork", **options)
        else:
            detector = ct.convert(traced, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                                  minimum_deployment_target=ct.target.iOS16, **options)
        pipeline = ct.utils.make_pipeline(detector, ct.models.MLModel(nms_spec(per_class=per_class)))
    path = str(tmp_path / ("d.mlpackage" if form == "mlprogram" else "d.mlmodel"))
    pipeline.save(path)
    export_onnx(path, tmp_path / "d.onnx")
    model = coremlrt.MLModel(path)
    runner = ExportedModel(model, tmp_path / "d.onnx")
    rows = set()
    for seed, scale in [(1, 20), (2, 40), (3, 0)]:
        image = np.random.default_rng(seed).standard_normal(IMAGE).astype(np.float32) * scale
        for thresholds in ({}, {"iouThreshold": 0.2, "confidenceThreshold": 0.4}):
            want, got = model.predict({"image": image, **thresholds}), runner.predict({"image": image, **thresholds})
            for name in ("confidence", "coordinates"):
                # The detector's arithmetic may differ in the last bits between the two runtimes;
                # the selection (which rows, in which order) must be the same.
                assert got[name].shape == want[name].shape, (name, seed, thresholds)
                np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
            rows.add(want["coordinates"].shape[0])
    assert len(rows) > 1
