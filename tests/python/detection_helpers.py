"""Object detectors for the tests (tests/python/models/test_detectors.py) and the fuzz seeds
(fuzz/make_seeds.py): a torch detector whose outputs are per-box class confidences [B, C] and
boxes [B, 4], nonMaximumSuppression messages as detector exporters write them, and a numpy
implementation of the format's suppression algorithm (docs/design/detection.md)."""

import numpy as np

CLASSES = 3
LABELS = ["cat", "dog", "bird"]
GRID = 4  # a 4 x 4 grid of boxes over a 32 x 32 image: B = 16
IMAGE = (1, 3, 32, 32)


def Detector():
    """One strided convolution: a box per grid cell, centred in its cell and 0.25-0.75 of the
    image wide, so neighbours overlap and suppression has work to do. The confidence logits'
    bias of -4 makes an all-zero image a picture of nothing (every confidence 0.018). Returns
    the torch module in eval mode (torch is imported here: callers without it never call this)."""
    import torch

    class Module(torch.nn.Module):
        def __init__(self):
            super().__init__()
            generator = torch.Generator().manual_seed(0)
            self.head = torch.nn.Conv2d(3, CLASSES + 4, kernel_size=8, stride=8)
            with torch.no_grad():
                self.head.weight.copy_(torch.randn(self.head.weight.shape, generator=generator) * 0.05)
                self.head.bias.copy_(torch.tensor([-4.0] * CLASSES + [0.0] * 4))
            gy, gx = torch.meshgrid(torch.arange(GRID, dtype=torch.float32),
                                    torch.arange(GRID, dtype=torch.float32), indexing="ij")
            self.register_buffer("cells", torch.stack([gx.flatten(), gy.flatten()], 1))

        def forward(self, image):
            t = self.head(image).flatten(2)[0].transpose(0, 1)  # [B, C + 4]
            confidence = torch.sigmoid(t[:, :CLASSES])
            centres = (self.cells + torch.sigmoid(t[:, CLASSES:CLASSES + 2])) / GRID
            sizes = 0.25 + 0.5 * torch.sigmoid(t[:, CLASSES + 2:])
            return confidence, torch.cat([centres, sizes], 1)

    return Module().eval()


def box_iou(a, b):
    """IoU of two (centre x, centre y, width, height) boxes; a negative width or height spans
    the same extent as its magnitude; boxes without area overlap nothing."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    low_a, high_a = a[:2] - np.abs(a[2:]) / 2, a[:2] + np.abs(a[2:]) / 2
    low_b, high_b = b[:2] - np.abs(b[2:]) / 2, b[:2] + np.abs(b[2:]) / 2
    extent = np.clip(np.minimum(high_a, high_b) - np.maximum(low_a, low_b), 0, None)
    inter = extent[0] * extent[1]
    union = np.abs(a[2:]).prod() + np.abs(b[2:]).prod() - inter
    return inter / union if union > 0 else 0.0


def _greedy(boxes, best, label, candidates, iou_threshold, per_class, max_boxes):
    kept = []
    for i in candidates:
        if max_boxes >= 0 and len(kept) == max_boxes:
            break
        if any((not per_class or label[j] == label[i]) and box_iou(boxes[i], boxes[j]) > iou_threshold for j in kept):
            continue
        kept.append(int(i))
    return kept


def op_reference_nms(boxes, scores, iou_threshold, score_threshold, max_boxes, per_class):
    """The ML program op non_maximum_suppression (iOS15) and the neuralNetwork layer: boxes
    [N, 4], scores [N, C] -> kept indices, best first. As coremltools' reference of Core ML's op
    (iOS14/test_tensor_operation.py, _ref_non_maximum_suppression): a box needs a score above the
    threshold, and when none has one the best box is kept all the same."""
    scores = np.asarray(scores, np.float64)
    best, label = scores.max(axis=1), scores.argmax(axis=1)
    candidates = [i for i in np.argsort(-best, kind="stable") if best[i] > score_threshold]
    if not candidates and len(best) and max_boxes > 0:
        return [int(np.argmax(best))]
    return _greedy(boxes, best, label, candidates, iou_threshold, per_class, max_boxes)


def reference_nms(confidence, coordinates, iou_threshold, confidence_threshold, per_class, min_rows=0, max_rows=-1):
    """The nonMaximumSuppression model type's PickTop: boxes whose best confidence is below the
    threshold go; the rest, best first (ties: lower index first), are kept unless one already
    kept (of the same best class, with per_class) overlaps them with an IoU above the threshold.
    Rows past the kept ones, up to min_rows, are zeros."""
    scores = confidence.astype(np.float64)
    best, label = scores.max(1), scores.argmax(1)
    candidates = [i for i in np.argsort(-best, kind="stable") if best[i] >= confidence_threshold]
    kept = _greedy(coordinates, best, label, candidates, iou_threshold, per_class, max_rows)
    rows = max(len(kept), min_rows)
    out_confidence = np.zeros((rows, confidence.shape[1]), confidence.dtype)
    out_coordinates = np.zeros((rows, 4), coordinates.dtype)
    out_confidence[:len(kept)] = confidence[kept]
    out_coordinates[:len(kept)] = coordinates[kept]
    return out_confidence, out_coordinates


def nms_spec(iou=0.45, confidence=0.25, per_class=False, rows=(0, -1), threshold_inputs="stage", dtype="float32",
             labels=LABELS):
    """A nonMaximumSuppression model as detector exporters write it: inputs raw_confidence
    [B, C] and raw_coordinates [B, 4], outputs confidence and coordinates with a row range.
    threshold_inputs: "stage" declares iouThreshold / confidenceThreshold as optional double
    inputs of its own; "pipeline" names them in the message only (the pipeline declares them);
    None names none."""
    from coremltools.proto import FeatureTypes_pb2, Model_pb2

    array_type = FeatureTypes_pb2.ArrayFeatureType.FLOAT32 if dtype == "float32" else \
        FeatureTypes_pb2.ArrayFeatureType.DOUBLE
    spec = Model_pb2.Model()
    spec.specificationVersion = 5
    for name, columns, features in [("raw_confidence", CLASSES, spec.description.input),
                                    ("raw_coordinates", 4, spec.description.input),
                                    ("confidence", CLASSES, spec.description.output),
                                    ("coordinates", 4, spec.description.output)]:
        feature = features.add()
        feature.name = name
        array = feature.type.multiArrayType
        array.dataType = array_type
        lower, upper = (rows if features is spec.description.output else (0, -1))
        first = array.shapeRange.sizeRanges.add()
        first.lowerBound, first.upperBound = lower, upper
        second = array.shapeRange.sizeRanges.add()
        second.lowerBound = second.upperBound = columns
    nms = spec.nonMaximumSuppression
    nms.confidenceInputFeatureName, nms.coordinatesInputFeatureName = "raw_confidence", "raw_coordinates"
    nms.confidenceOutputFeatureName, nms.coordinatesOutputFeatureName = "confidence", "coordinates"
    nms.iouThreshold, nms.confidenceThreshold = iou, confidence
    nms.pickTop.perClass = per_class
    if labels and isinstance(labels[0], str):
        nms.stringClassLabels.vector.extend(labels)
    elif labels:
        nms.int64ClassLabels.vector.extend(labels)
    if threshold_inputs:
        nms.iouThresholdInputFeatureName, nms.confidenceThresholdInputFeatureName = "iouThreshold", "confidenceThreshold"
    if threshold_inputs == "stage":
        for name in ("iouThreshold", "confidenceThreshold"):
            feature = spec.description.input.add()
            feature.name = name
            feature.type.doubleType.SetInParent()
            feature.type.isOptional = True
    return spec
