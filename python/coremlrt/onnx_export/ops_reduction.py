"""Reductions: reduce_* over axes, reduce_argmax and reduce_argmin (src/ops/reduction.cc)."""

from .registry import translates

_REDUCE = {
    "reduce_sum": "ReduceSum", "reduce_mean": "ReduceMean", "reduce_max": "ReduceMax", "reduce_min": "ReduceMin",
    "reduce_prod": "ReduceProd", "reduce_l1_norm": "ReduceL1", "reduce_l2_norm": "ReduceL2",
    "reduce_log_sum": "ReduceLogSum", "reduce_log_sum_exp": "ReduceLogSumExp", "reduce_sum_square": "ReduceSumSquare",
}


@translates(*_REDUCE)
def reduce(v):
    b = v.builder
    axes = v.ints("axes")
    rank = v.rank("x")
    keep = bool(v.scalar("keep_dims", False))
    if v.type in ("reduce_mean", "reduce_max") and rank == 4 and axes is not None and \
            sorted(a % rank for a in axes) == [2, 3]:
        # A spatial mean or max of an image as the global pooling op: ONNX Runtime keeps it in its
        # blocked layout after the convolutions, where ReduceMean first converts the whole tensor
        # back (measured on mobilenet_v2: 1.68x torch's own export with ReduceMean).
        pool = "GlobalAveragePool" if v.type == "reduce_mean" else "GlobalMaxPool"
        if keep:
            b.node(pool, [v.input("x")], [v.output()])
        else:
            b.node("Squeeze", [b.node(pool, [v.input("x")]), b.const_int64([2, 3], "axes")], [v.output()])
        return
    inputs = [v.input("x")]
    if axes is not None:
        inputs.append(b.const_int64(axes, "axes"))
    b.node(_REDUCE[v.type], inputs, [v.output()], keepdims=int(keep))


@translates("reduce_argmax", "reduce_argmin")
def reduce_arg(v):
    b = v.builder
    op = "ArgMax" if v.type == "reduce_argmax" else "ArgMin"
    index = b.node(op, [v.input("x")], axis=int(v.scalar("axis", -1)),
                   keepdims=int(bool(v.scalar("keep_dims", False))))
    b.node("Cast", [index], [v.output()], to=b.onnx_type(v.output_dtype()))
