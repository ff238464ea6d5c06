"""Non-maximum suppression (src/ops/detection.cc, docs/design/detection.md) as ONNX operators.

ONNX's NonMaxSuppression is not Core ML's: it selects per class (Core ML ranks a box by its best
class and suppresses across classes unless per-class suppression is asked for), it keeps a box
whose score equals the threshold (the ops need one above it), its IoU of corner boxes treats a
box of zero area differently, and it returns [class, box] triples rather than the kept rows best
first. The greedy selection is therefore written out: a box's best score and class (NaN scores
skipped; its class the first one at the best), the candidates (a score above the threshold for
the ops, at or above it for the model type), their order (TopK: best first, lower index first
among equal scores, as the kernel's stable sort), then a Loop over that order keeping a box
unless a kept box (of its class, with per-class suppression) overlaps it with an IoU above the
threshold, until max_boxes are kept. The IoU is the kernel's, in fp64 and in its order of
operations: corners from (centre, size) with min/max (a negative size spans the same extent),
no overlap when the intersection's width or height is not positive, 0 when the union is not.
"""

import numpy as np
from onnx import TensorProto

from .graph import Unsupported
from .registry import translates

_INF = float("inf")


def _scalar_double(v, b, param):
    value = b.node("Reshape", [v.input(param), b.const_int64([], "scalar")])
    if v.dtype(param) != "float64":
        value = b.node("Cast", [value], to=TensorProto.DOUBLE)
    return value


def _greedy(b, boxes, scores, iou_threshold, score_threshold, at_threshold, best_fallback, max_boxes, per_class):
    """Kept box indices (int64 [r], best first) of boxes [B, 4] and scores [B, K] (fp64).
    score_threshold: a scalar or None; at_threshold: a score equal to it passes; best_fallback:
    when no box passes, the best-scoring one is kept (the ops' rule); max_boxes: an int64 scalar."""
    axes1 = b.const_int64([1], "axes")
    nan = b.node("IsNaN", [scores])
    ranked_scores = b.node("Where", [nan, b.initializer(np.asarray(-_INF), "minus_inf"), scores])
    best = b.node("ReduceMax", [ranked_scores, axes1], keepdims=0)                       # [B]
    # A box with no score but NaN has nothing to be ranked by.
    ranked = b.node("Cast", [b.node("ReduceMax", [b.node("Cast", [b.node("Not", [nan])], to=TensorProto.INT64), axes1],
                                    keepdims=0)], to=TensorProto.BOOL)
    # Its class: the first one at the best score (Equal is false at NaN).
    at_best = b.node("Cast", [b.node("Equal", [scores, b.node("Unsqueeze", [best, axes1])])], to=TensorProto.INT32)
    label = b.node("ArgMax", [at_best], axis=1, keepdims=0, select_last_index=0)
    candidate = ranked
    if score_threshold is not None:
        passes = b.node("GreaterOrEqual" if at_threshold else "Greater", [best, score_threshold])
        candidate = b.node("And", [ranked, passes])
    # Candidates best first, lower index first among equals; the rest are visited and skipped.
    key = b.node("Where", [candidate, best, b.initializer(np.asarray(-_INF), "minus_inf")])
    count = b.node("Shape", [best])
    order = b.node("TopK", [key, count], outputs=[b.fresh("nms_key"), b.fresh("nms_order")], axis=0, largest=1,
                   sorted=1)[1]
    # Corners and areas, as the kernel's corners() and iou().
    column = [b.node("Gather", [boxes, b.const_int64(c, "coordinate")], axis=1) for c in range(4)]
    half = b.initializer(np.asarray(2.0), "two")
    low, high = [], []
    for centre, size in ((column[0], column[2]), (column[1], column[3])):
        half_size = b.node("Div", [size, half])
        a, c = b.node("Sub", [centre, half_size]), b.node("Add", [centre, half_size])
        low.append(b.node("Min", [a, c]))
        high.append(b.node("Max", [a, c]))
    area = b.node("Mul", [b.node("Sub", [high[0], low[0]]), b.node("Sub", [high[1], low[1]])])
    positions = b.node("Range", [b.const_int64(0, "zero_i"), b.node("Reshape", [count, b.const_int64([], "scalar")]),
                                 b.const_int64(1, "one_i")])
    zero = b.initializer(np.asarray(0.0), "zero")

    step, go_in, keep_in, kept_in = b.fresh("nms_step"), b.fresh("nms_go"), b.fresh("nms_keep"), b.fresh("nms_kept")

    def body():
        index = b.node("Gather", [order, step], axis=0)
        at = lambda values: b.node("Gather", [values, index], axis=0)  # noqa: E731
        width = b.node("Sub", [b.node("Min", [high[0], at(high[0])]), b.node("Max", [low[0], at(low[0])])])
        height = b.node("Sub", [b.node("Min", [high[1], at(high[1])]), b.node("Max", [low[1], at(low[1])])])
        inter = b.node("Mul", [width, height])
        union = b.node("Sub", [b.node("Add", [at(area), area]), inter])
        overlap = b.node("And", [b.node("And", [b.node("Greater", [width, zero]), b.node("Greater", [height, zero])]),
                                 b.node("Greater", [union, zero])])
        iou = b.node("Where", [overlap, b.node("Div", [inter, union]), zero])
        hit = b.node("And", [keep_in, b.node("Greater", [iou, iou_threshold])])
        if per_class:
            hit = b.node("And", [hit, b.node("Equal", [label, at(label)])])
        suppressed = b.node("Greater", [b.node("ReduceSum", [b.node("Cast", [hit], to=TensorProto.INT64),
                                                             b.const_int64([0], "axes")], keepdims=0),
                                        b.const_int64(0, "zero_i")])
        take = b.node("And", [at(candidate), b.node("Not", [suppressed])])
        keep = b.node("Or", [keep_in, b.node("And", [b.node("Equal", [positions, index]), take])])
        kept = b.node("Add", [kept_in, b.node("Cast", [take], to=TensorProto.INT64)])
        return [(b.node("Less", [kept, max_boxes]), TensorProto.BOOL), (keep, TensorProto.BOOL),
                (kept, TensorProto.INT64)]

    graph = b.subgraph("nms_body", [(step, TensorProto.INT64, []), (go_in, TensorProto.BOOL, []),
                                    (keep_in, TensorProto.BOOL, ["B"]), (kept_in, TensorProto.INT64, [])], body)
    start_keep = b.node("Cast", [b.node("ConstantOfShape", [count])], to=TensorProto.BOOL)
    keep, total = b.node("Loop", [b.node("Reshape", [count, b.const_int64([], "scalar")]),
                                  b.node("Greater", [max_boxes, b.const_int64(0, "zero_i")]),
                                  start_keep, b.const_int64(0, "zero_i")], outputs=2, hint="nms_loop", body=graph)
    kept = b.node("Compress", [order, b.node("Gather", [keep, order], axis=0)], axis=0)
    if not best_fallback:
        return kept
    # No candidate: the best-scoring ranked box (the first among equals), when any and max_boxes > 0.
    none = b.node("Equal", [b.node("ReduceSum", [b.node("Cast", [candidate], to=TensorProto.INT64),
                                                 b.const_int64([0], "axes")], keepdims=0), b.const_int64(0, "zero_i")])
    any_ranked = b.node("Greater", [b.node("ReduceSum", [b.node("Cast", [ranked], to=TensorProto.INT64),
                                                         b.const_int64([0], "axes")], keepdims=0),
                                    b.const_int64(0, "zero_i")])
    use = b.node("And", [b.node("And", [none, any_ranked]), b.node("Greater", [max_boxes, b.const_int64(0, "zero_i")])])

    def fallback():
        ranked_best = b.node("Where", [ranked, best, b.initializer(np.asarray(-_INF), "minus_inf")])
        top = b.node("ReduceMax", [ranked_best, b.const_int64([0], "axes")], keepdims=1)
        first = b.node("ArgMax", [b.node("Cast", [b.node("And", [ranked, b.node("Equal", [ranked_best, top])])],
                                          to=TensorProto.INT32)], axis=0, keepdims=1)
        return [(first, TensorProto.INT64)]

    return b.node("If", [use], hint="nms_pick", then_branch=b.subgraph("nms_fallback", [], fallback),
                  else_branch=b.subgraph("nms_selected", [], lambda: [(kept, TensorProto.INT64)]))


def _rows(b, source, kept, axis, size):
    """The kept entries of the 2-D `source` along `axis`, then zeros up to `size` (int64 [1])."""
    picked = b.node("Gather", [source, kept], axis=axis)
    missing = b.node("Max", [b.node("Sub", [size, b.node("Shape", [kept])]), b.const_int64([0], "zero1")])
    end = [b.const_int64([0], "zero1")] * 2
    end[axis] = missing
    return b.node("Pad", [picked, b.node("Concat", [b.const_int64([0, 0], "pad_begin")] + end, axis=0)])


@translates("non_maximum_suppression")
def non_maximum_suppression(v):
    b = v.builder
    ios17 = len(v.outputs) == 3
    if not v.is_constant("max_boxes"):
        raise Unsupported("max_boxes known only at run time (the outputs' row count)")
    max_boxes = int(v.scalar("max_boxes"))
    per_class = bool(v.scalar("per_class_suppression", False))
    box_type, score_type = v.type_of("boxes"), v.type_of("scores")
    if box_type["rank"] != 3 or box_type["dims"][0] < 0:
        raise Unsupported("a batch size known only at run time")
    n = box_type["dims"][0]
    iou_threshold = _scalar_double(v, b, "iou_threshold")
    score_threshold = None if ios17 else _scalar_double(v, b, "score_threshold")
    limit = b.const_int64(max_boxes, "max_boxes")
    size = b.const_int64([max_boxes], "max_rows")
    boxes_in, scores_in = v.input("boxes"), v.input("scores")
    outs = {"boxes": [], "scores": [], "indices": [], "count": []}
    for i in range(n):
        entry = lambda x: b.node("Gather", [x, b.const_int64(i, "batch")], axis=0)  # noqa: E731
        boxes, scores = entry(boxes_in), entry(scores_in)                    # [B, 4] / [B, K] (iOS17: transposed)
        rows_boxes = b.node("Transpose", [boxes], perm=[1, 0]) if ios17 else boxes
        rows_scores = b.node("Transpose", [scores], perm=[1, 0]) if ios17 else scores
        kept = _greedy(b, b.node("Cast", [rows_boxes], to=TensorProto.DOUBLE),
                       b.node("Cast", [rows_scores], to=TensorProto.DOUBLE), iou_threshold, score_threshold,
                       False, not ios17, limit, per_class)
        axis = 1 if ios17 else 0
        outs["boxes"].append(_rows(b, boxes, kept, axis, size))
        outs["scores"].append(_rows(b, scores, kept, axis, size))
        outs["indices"].append(_index_row(b, b.node("Cast", [kept], to=TensorProto.INT32), size))
        outs["count"].append(b.node("Cast", [b.node("Shape", [kept])], to=TensorProto.INT32))
    names = ["boxes", "scores", "indices"] + ([] if ios17 else ["count"])
    for o, name in enumerate(names):
        parts = outs[name] if name == "count" else [b.node("Unsqueeze", [p, b.const_int64([0], "axes")]) for p in outs[name]]
        if len(parts) == 1:
            b.node("Identity", parts, [v.output(o)])
        else:
            b.node("Concat", parts, [v.output(o)], axis=0)


def _index_row(b, index, size):
    """Kept box indices (int32 [r]) padded with -1 up to `size`."""
    missing = b.node("Max", [b.node("Sub", [size, b.node("Shape", [index])]), b.const_int64([0], "zero1")])
    pads = b.node("Concat", [b.const_int64([0], "zero1"), missing], axis=0)
    return b.node("Pad", [index, pads, b.initializer(np.asarray(-1, np.int32), "minus_one_i32")])


@translates("non_maximum_suppression_model")
def non_maximum_suppression_model(v):
    """The nonMaximumSuppression model type: a box at the confidence threshold stays, no box
    passing gives no rows, the kept rows best first then zero rows up to min_boxes. A threshold
    input bound to a graph input gets the message's threshold as that input's initializer (an
    ONNX default the caller may override), as the kernel takes the message's when the optional
    input is absent."""
    b = v.builder
    per_class = bool(v.scalar("per_class", False))
    min_rows, max_rows = int(v.scalar("min_boxes")), int(v.scalar("max_boxes"))
    confidence, coordinates = v.input("confidence"), v.input("coordinates")
    thresholds = {}
    for param, default in (("iou_threshold", "default_iou_threshold"),
                           ("confidence_threshold", "default_confidence_threshold")):
        value = float(v.scalar(default))
        if v.has(param):
            name = v.input(param)
            if any(info.name == name for info in getattr(b, "graph_input_infos", [])) and \
                    not any(t.name == name for t in b.initializers):
                from onnx import numpy_helper
                b.initializers.append(numpy_helper.from_array(np.asarray(value, np.float64), name))
            thresholds[param] = _scalar_double(v, b, param)
        else:
            thresholds[param] = b.initializer(np.asarray(value), param)
    count = b.node("Shape", [confidence])
    rows = b.node("Slice", [count, b.const_int64([0], "s"), b.const_int64([1], "e")])
    limit = b.node("Reshape", [rows, b.const_int64([], "scalar")]) if max_rows < 0 else b.const_int64(max_rows, "max_boxes")
    kept = _greedy(b, b.node("Cast", [coordinates], to=TensorProto.DOUBLE),
                   b.node("Cast", [confidence], to=TensorProto.DOUBLE), thresholds["iou_threshold"],
                   thresholds["confidence_threshold"], True, False, limit, per_class)
    size = b.node("Max", [b.node("Shape", [kept]), b.const_int64([min_rows], "min_rows")])
    for o, source in enumerate((confidence, coordinates)):
        picked = b.node("Gather", [source, kept], axis=0)
        missing = b.node("Sub", [size, b.node("Shape", [kept])])
        pads = b.node("Concat", [b.const_int64([0, 0], "pad_begin"), missing, b.const_int64([0], "zero1")], axis=0)
        b.node("Pad", [picked, pads], [v.output(o)])
