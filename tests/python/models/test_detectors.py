"""Object detectors as exporters write them: a detector network (ML program or neuralNetwork,
converted from torch) whose outputs are per-box class confidences [B, C] and boxes [B, 4], then a
nonMaximumSuppression model, joined into one pipeline (docs/design/detection.md). Every
prediction is compared with `reference_nms`, a numpy implementation of the algorithm the format
describes, applied to the detector stage's own outputs (run alone through coremlrt, itself
checked against torch)."""

import tempfile
import warnings

import numpy as np
import pytest

import coremlrt

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")

from detection_helpers import CLASSES, IMAGE, Detector, nms_spec, op_reference_nms, reference_nms  # noqa: E402


def _convert(tmp_path, form):
    traced = torch.jit.trace(Detector(), torch.zeros(IMAGE))
    options = dict(inputs=[ct.TensorType(name="image", shape=IMAGE)],
                   outputs=[ct.TensorType(name="raw_confidence"), ct.TensorType(name="raw_coordinates")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if form == "neuralnetwork":
            return ct.convert(traced, convert_to="neuralnetwork", **options)
        precision = ct.precision.FLOAT32 if form == "fp32" else ct.precision.FLOAT16
        model = ct.convert(traced, convert_to="mlprogram", compute_precision=precision,
                           minimum_deployment_target=ct.target.iOS16, **options)
        if form == "palettized":
            from coremltools.optimize.coreml import OpPalettizerConfig, OptimizationConfig, palettize_weights

            config = OptimizationConfig(global_config=OpPalettizerConfig(nbits=4, mode="uniform", weight_threshold=0))
            model = palettize_weights(model, config)
        return model


def _pipeline(tmp_path, monkeypatch, detector, nms, name, thresholds_on_pipeline=False):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # make_pipeline's temporary packages
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nms_model = ct.models.MLModel(nms)
        pipeline = ct.utils.make_pipeline(detector, nms_model)
    if thresholds_on_pipeline:
        # As exporters write it: the NMS stage declares only the two arrays, the pipeline the
        # thresholds (required doubles).
        spec = pipeline.get_spec()
        for feature_name in ("iouThreshold", "confidenceThreshold"):
            feature = spec.description.input.add()
            feature.name = feature_name
            feature.type.doubleType.SetInParent()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pipeline = ct.models.MLModel(spec, weights_dir=pipeline.weights_dir)
    path = str(tmp_path / (name + (".mlpackage" if detector.get_spec().WhichOneof("Type") == "mlProgram" else ".mlmodel")))
    pipeline.save(path)
    return path


def _detector_path(tmp_path, detector, form):
    path = str(tmp_path / f"detector_{form}.{'mlmodel' if form == 'neuralnetwork' else 'mlpackage'}")
    detector.save(path)
    return path


IMAGES = {
    "objects": np.random.default_rng(1).standard_normal(IMAGE).astype(np.float32) * 20,
    "more objects": np.random.default_rng(2).standard_normal(IMAGE).astype(np.float32) * 40,
    "nothing": np.zeros(IMAGE, np.float32),
}


@pytest.fixture(scope="module", params=["fp32", "fp16", "palettized", "neuralnetwork"])
def detector(request, tmp_path_factory):
    return request.param, _convert(tmp_path_factory.mktemp(request.param), request.param)


def _raw(detector_path, image):
    out = coremlrt.MLModel(detector_path).predict({"image": image})
    return out["raw_confidence"], out["raw_coordinates"]


def test_the_detector_stage_matches_torch(detector, tmp_path):
    """The stage the suppression's reference reads. Palettized weights are other numbers than
    torch's: that model is checked against itself with every weight decoded at load."""
    form, model = detector
    path = _detector_path(tmp_path, model, form)
    module = Detector()
    for image in IMAGES.values():
        confidence, coordinates = _raw(path, image)
        if form == "palettized":
            folded = coremlrt.MLModel(path, packed_weights=False).predict({"image": image})
            np.testing.assert_allclose(confidence, folded["raw_confidence"], rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(coordinates, folded["raw_coordinates"], rtol=1e-6, atol=1e-6)
            continue
        with torch.no_grad():
            expected = [t.numpy() for t in module(torch.from_numpy(image))]
        tolerance = 1e-5 if form in ("fp32", "neuralnetwork") else 3e-2
        np.testing.assert_allclose(confidence, expected[0], rtol=tolerance, atol=tolerance)
        np.testing.assert_allclose(coordinates, expected[1], rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("per_class", [False, True], ids=["class-agnostic", "per-class"])
def test_pipeline_equals_the_reference_on_the_detector_outputs(detector, per_class, tmp_path, monkeypatch):
    form, model = detector
    raw_path = _detector_path(tmp_path, model, form)
    path = _pipeline(tmp_path, monkeypatch, model, nms_spec(per_class=per_class), f"pipeline_{form}")
    pipeline = coremlrt.MLModel(path)
    seen_suppression = seen_empty = False
    for image_name, image in IMAGES.items():
        raw = _raw(raw_path, image)
        for thresholds in [{}, {"iouThreshold": 0.3, "confidenceThreshold": 0.5},
                           {"iouThreshold": 1.0, "confidenceThreshold": 0.0}]:
            out = pipeline.predict(dict({"image": image}, **thresholds))
            expected = reference_nms(*raw, thresholds.get("iouThreshold", 0.45),
                                     thresholds.get("confidenceThreshold", 0.25), per_class)
            np.testing.assert_array_equal(out["confidence"], expected[0], err_msg=f"{image_name} {thresholds}")
            np.testing.assert_array_equal(out["coordinates"], expected[1], err_msg=f"{image_name} {thresholds}")
            candidates = int((raw[0].max(1) >= thresholds.get("confidenceThreshold", 0.25)).sum())
            seen_suppression |= 0 < len(expected[0]) < candidates
            seen_empty |= image_name == "nothing" and len(expected[0]) == 0
            if thresholds.get("iouThreshold") == 1.0:  # nothing suppressed, nothing below 0
                assert len(out["confidence"]) == len(raw[0])
    assert seen_suppression and seen_empty, "the images must exercise suppression and an empty result"


def test_thresholds_declared_by_the_pipeline_only(tmp_path, monkeypatch):
    """Exporters declare the threshold inputs on the pipeline, not on the NMS stage, and declare
    them required: the stage reads them by name all the same, and a caller who leaves them out
    (Vision passes only the image) gets the NMS message's own thresholds, as on Apple platforms."""
    model = _convert(tmp_path, "fp32")
    raw_path = _detector_path(tmp_path, model, "fp32")
    path = _pipeline(tmp_path, monkeypatch, model, nms_spec(iou=0.45, confidence=0.25, per_class=True,
                                                            threshold_inputs="pipeline"), "exported",
                     thresholds_on_pipeline=True)
    spec = ct.utils.load_spec(path)
    assert not any(f.type.isOptional for f in spec.description.input), "the export declares every input required"
    pipeline = coremlrt.MLModel(path)
    inputs = {f["name"]: f for f in pipeline._function["inputs"]}
    assert {"iouThreshold", "confidenceThreshold"} <= set(inputs)
    assert inputs["iouThreshold"]["optional"] and inputs["iouThreshold"]["default_value"] == 0.45
    assert inputs["confidenceThreshold"]["optional"] and inputs["confidenceThreshold"]["default_value"] == 0.25
    assert inputs["iouThreshold"]["type"] == "double (optional, default 0.45)"
    assert not inputs["image"]["optional"]
    image = IMAGES["objects"]
    raw = _raw(raw_path, image)
    results = set()
    for iou, threshold in [(0.45, 0.25), (0.1, 0.6), (0.9, 0.05)]:
        out = pipeline.predict({"image": image, "iouThreshold": iou, "confidenceThreshold": threshold})
        expected = reference_nms(*raw, iou, threshold, True)
        np.testing.assert_array_equal(out["confidence"], expected[0])
        np.testing.assert_array_equal(out["coordinates"], expected[1])
        results.add(len(expected[0]))
    assert len(results) == 3, "the thresholds must change the result"
    # The image alone: the stored defaults, exactly as if passed.
    alone = pipeline.predict({"image": image})
    explicit = pipeline.predict({"image": image, "iouThreshold": 0.45, "confidenceThreshold": 0.25})
    assert len(alone["confidence"]) > 0
    for name in ("confidence", "coordinates"):
        np.testing.assert_array_equal(alone[name], explicit[name])
    # One override: the other threshold is the stored one.
    for given, expected in [({"confidenceThreshold": 0.6}, reference_nms(*raw, 0.45, 0.6, True)),
                            ({"iouThreshold": 0.1}, reference_nms(*raw, 0.1, 0.25, True))]:
        out = pipeline.predict(dict({"image": image}, **given))
        np.testing.assert_array_equal(out["confidence"], expected[0])
        np.testing.assert_array_equal(out["coordinates"], expected[1])
    with pytest.raises(coremlrt.Error, match="missing input 'image'"):
        pipeline.predict({"iouThreshold": 0.3})


@pytest.mark.parametrize("rows", [(5, 5), (0, 3), (6, -1)], ids=["fixed 5", "at most 3", "at least 6"])
def test_output_rows_follow_the_declared_shape(rows, tmp_path, monkeypatch):
    """A fixed row count pads with zero rows or cuts the worst boxes off; a range does both at
    its two ends."""
    model = _convert(tmp_path, "fp32")
    raw_path = _detector_path(tmp_path, model, "fp32")
    path = _pipeline(tmp_path, monkeypatch, model, nms_spec(rows=rows), f"rows_{rows[0]}_{rows[1]}")
    pipeline = coremlrt.MLModel(path)
    for image in IMAGES.values():
        raw = _raw(raw_path, image)
        for thresholds in [{}, {"iouThreshold": 1.0, "confidenceThreshold": 0.0}]:
            out = pipeline.predict(dict({"image": image}, **thresholds))
            expected = reference_nms(*raw, thresholds.get("iouThreshold", 0.45),
                                     thresholds.get("confidenceThreshold", 0.25), False, *rows)
            np.testing.assert_array_equal(out["confidence"], expected[0])
            np.testing.assert_array_equal(out["coordinates"], expected[1])
            assert len(expected[0]) >= rows[0] and (rows[1] < 0 or len(expected[0]) <= rows[1])
            if thresholds and rows[1] >= 0:  # 16 candidates, none suppressed: the best rows[1] stay
                assert len(out["confidence"]) == rows[1]


def _nms_alone(tmp_path, **kwargs):
    path = str(tmp_path / "nms.mlmodel")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ct.models.MLModel(nms_spec(**kwargs)).save(path)
    return coremlrt.MLModel(path)


@pytest.mark.parametrize("dtype", ["float32", "double"])
def test_a_model_of_its_own_with_ties_and_degenerate_boxes(dtype, tmp_path):
    """Equal confidences keep the lower index first; a zero-area box overlaps nothing; a box
    exactly at the threshold stays; absent optional thresholds take the message's."""
    model = _nms_alone(tmp_path, dtype=dtype, labels=[7, 8, 9])
    assert [p["op_type"] for p in model.placements()] == ["non_maximum_suppression_model"]
    np_dtype = np.float32 if dtype == "float32" else np.float64
    confidence = np.array([[0.9, 0.0, 0.0], [0.0, 0.9, 0.0], [0.25, 0.0, 0.0], [0.2, 0.1, 0.0],
                           [0.5, 0.5, 0.0], [0.6, 0.0, 0.0]], np_dtype)
    coordinates = np.array([[0.5, 0.5, 0.2, 0.2], [0.5, 0.5, 0.2, 0.2], [0.9, 0.9, 0.1, 0.1],
                            [0.1, 0.1, 0.1, 0.1], [0.5, 0.5, 0.0, 0.0], [0.52, 0.5, 0.2, 0.2]], np_dtype)
    out = model.predict({"raw_confidence": confidence, "raw_coordinates": coordinates})
    expected = reference_nms(confidence, coordinates, 0.45, 0.25, False)
    np.testing.assert_array_equal(out["confidence"], expected[0])
    np.testing.assert_array_equal(out["coordinates"], expected[1])
    assert out["confidence"].dtype == np_dtype
    # Box 0 beats its equal twin 1 (lower index), 5 overlaps 0, the zero-area box 4 and the box
    # at exactly the threshold (2) stay; 3 is below it.
    np.testing.assert_array_equal(out["coordinates"], coordinates[[0, 4, 2]])
    per_class = _nms_alone(tmp_path, dtype=dtype, per_class=True)
    out = per_class.predict({"raw_confidence": confidence, "raw_coordinates": coordinates})
    np.testing.assert_array_equal(out["coordinates"], coordinates[[0, 1, 4, 2]])  # 1 is another class than 0
    # No boxes at all.
    empty = model.predict({"raw_confidence": np.zeros((0, CLASSES), np_dtype),
                           "raw_coordinates": np.zeros((0, 4), np_dtype)})
    assert empty["confidence"].shape == (0, CLASSES) and empty["coordinates"].shape == (0, 4)


def test_bad_inputs_and_messages_are_refused(tmp_path):
    model = _nms_alone(tmp_path)
    confidence = np.full((4, CLASSES), 0.5, np.float32)
    with pytest.raises(coremlrt.Error, match="coordinates"):
        model.predict({"raw_confidence": confidence, "raw_coordinates": np.zeros((3, 4), np.float32)})
    with pytest.raises(coremlrt.Error, match="NaN"):
        model.predict({"raw_confidence": confidence, "raw_coordinates": np.zeros((4, 4), np.float32),
                       "iouThreshold": float("nan")})
    for change, message in [(lambda s: setattr(s.nonMaximumSuppression, "iouThreshold", 1.5), "iouThreshold"),
                            (lambda s: setattr(s.nonMaximumSuppression, "confidenceThreshold", -0.1),
                             "confidenceThreshold"),
                            (lambda s: setattr(s.nonMaximumSuppression, "coordinatesInputFeatureName", "boxes"),
                             "coordinatesInputFeatureName"),
                            (lambda s: setattr(s.nonMaximumSuppression, "confidenceOutputFeatureName", "scores"),
                             "confidenceOutputFeatureName")]:
        spec = nms_spec()
        change(spec)
        path = str(tmp_path / "bad.mlmodel")
        with open(path, "wb") as f:
            f.write(spec.SerializeToString())
        with pytest.raises(coremlrt.Error, match=message):
            coremlrt.MLModel(path)


def test_coremltools_predict_through_the_stand_in(tmp_path, monkeypatch):
    """coremltools' own MLModel.predict on Linux (coremlrt.coremltools_backend): an image input
    given as a PIL image, the two thresholds as numbers; a model coremlrt refuses raises its
    load error at predict."""
    from PIL import Image

    from coremlrt import coremltools_backend

    traced = torch.jit.trace(Detector(), torch.zeros(IMAGE))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        detector = ct.convert(traced, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS16,
                              inputs=[ct.ImageType(name="image", shape=IMAGE, scale=20 / 255, bias=[-10, -10, -10])],
                              outputs=[ct.TensorType(name="raw_confidence"), ct.TensorType(name="raw_coordinates")])
    raw_path = _detector_path(tmp_path, detector, "image")
    path = _pipeline(tmp_path, monkeypatch, detector, nms_spec(per_class=True), "image_pipeline")
    # As detector exporters write it: the thresholds declared by the pipeline, required.
    exported_path = _pipeline(tmp_path, monkeypatch, detector, nms_spec(per_class=True, threshold_inputs="pipeline"),
                              "exported_pipeline", thresholds_on_pipeline=True)
    bad = nms_spec()
    bad.nonMaximumSuppression.iouThreshold = 2.0
    bad_path = _pipeline(tmp_path, monkeypatch, detector, bad, "refused_pipeline")
    picture = Image.fromarray(np.random.default_rng(3).integers(0, 256, (32, 32, 3), dtype=np.uint8), "RGB")
    coremltools_backend.enable()
    try:
        raw_out = ct.models.MLModel(raw_path).predict({"image": picture})
        raw = raw_out["raw_confidence"], raw_out["raw_coordinates"]
        out = ct.models.MLModel(path).predict({"image": picture, "iouThreshold": 0.1, "confidenceThreshold": 0.4})
        exported = ct.models.MLModel(exported_path)
        alone = exported.predict({"image": picture})  # as Vision calls it: the image only
        stored = exported.predict({"image": picture, "iouThreshold": 0.45, "confidenceThreshold": 0.25})
        with pytest.raises(RuntimeError, match=r"^Unable to compute the prediction using a pipeline model: .*NaN"):
            exported.predict({"image": picture, "iouThreshold": float("nan")})
        refused = ct.models.MLModel(bad_path)
        with pytest.raises(coremlrt.Error, match="iouThreshold is 2"):
            refused.predict({"image": picture})
    finally:
        coremltools_backend.disable()
    expected = reference_nms(*raw, 0.1, 0.4, True)
    assert 0 < len(expected[0]) < (raw[0].max(1) >= 0.4).sum(), "the picture must exercise suppression"
    np.testing.assert_array_equal(out["confidence"], expected[0])
    np.testing.assert_array_equal(out["coordinates"], expected[1])
    expected = reference_nms(*raw, 0.45, 0.25, True)
    assert len(expected[0]) > 0
    for result in (alone, stored):
        np.testing.assert_array_equal(result["confidence"], expected[0])
        np.testing.assert_array_equal(result["coordinates"], expected[1])


@pytest.mark.parametrize("dynamic", [False, True], ids=["parameters", "inputs"])
@pytest.mark.parametrize("per_class", [False, True], ids=["class-agnostic", "per-class"])
@pytest.mark.parametrize("classes", [1, 4])
def test_neural_network_nms_layer(dynamic, per_class, classes, tmp_path):
    """The NonMaximumSuppression layer as coremltools' builder writes it (its own test,
    test_numpy_nn_layers.py test_nms_cpu, needs TensorFlow): thresholds and maxBoxes as
    parameters or as inputs 3-5; outputs padded to maxBoxes (indices with -1), with the best
    box kept when no score passes the threshold."""
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    rng = np.random.default_rng(classes + 2 * per_class)
    batch, boxes_in, max_boxes = 2, 40, 12
    boxes = rng.random((batch, boxes_in, 4)).astype(np.float32)
    scores = rng.random((batch, boxes_in, classes)).astype(np.float32)
    inputs = [("boxes", datatypes.Array(batch, boxes_in, 4)), ("scores", datatypes.Array(batch, boxes_in, classes))]
    names = ["boxes", "scores"]
    if dynamic:
        inputs += [(name, datatypes.Array(1)) for name in ("iou_threshold", "score_threshold", "max_boxes")]
        names += ["iou_threshold", "score_threshold", "max_boxes"]
    outputs = ["selected_boxes", "selected_scores", "selected_box_ids", "number_of_boxes"]
    builder = NeuralNetworkBuilder(inputs, [(name, None) for name in outputs], disable_rank5_shape_mapping=True)
    settings = [(0.3, 0.5), (0.0, 0.2), (1.0, 2.0)]  # the last: no score passes
    if dynamic:
        builder.add_nms("nms", names, outputs, per_class_suppression=per_class)
    else:
        builder.add_nms("nms", names, outputs, iou_threshold=settings[0][0], score_threshold=settings[0][1],
                        max_boxes=max_boxes, per_class_suppression=per_class)
    path = str(tmp_path / "nms_layer.mlmodel")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ct.models.MLModel(builder.spec).save(path)
    model = coremlrt.MLModel(path)
    for iou, threshold in settings if dynamic else settings[:1]:
        feed = {"boxes": boxes, "scores": scores}
        if dynamic:
            feed.update(iou_threshold=np.array([iou], np.float32), score_threshold=np.array([threshold], np.float32),
                        max_boxes=np.array([max_boxes], np.float32))
        out = model.predict(feed)
        for b in range(batch):
            kept = op_reference_nms(boxes[b], scores[b], iou, threshold, max_boxes, per_class)
            ids = np.full(max_boxes, -1.0, np.float32)
            ids[:len(kept)] = kept
            np.testing.assert_array_equal(out["selected_box_ids"][b], ids)
            assert out["number_of_boxes"][b] == len(kept)
            want_boxes = np.zeros((max_boxes, 4), np.float32)
            want_boxes[:len(kept)] = boxes[b, kept]
            want_scores = np.zeros((max_boxes, classes), np.float32)
            want_scores[:len(kept)] = scores[b, kept]
            np.testing.assert_array_equal(out["selected_boxes"][b], want_boxes)
            np.testing.assert_array_equal(out["selected_scores"][b], want_scores)
            if threshold > 1:
                assert len(kept) == 1
            elif iou == 0.3:
                assert 1 < len(kept) < (scores[b].max(1) > threshold).sum(), "suppression must have work to do"
    if dynamic:
        with pytest.raises(coremlrt.Error, match="max_boxes must be a whole number"):
            model.predict(dict(feed, max_boxes=np.array([2.5], np.float32)))
