"""Classifier outputs, as the ai.onnx.ml domain writes them.

``classify`` (src/ops/classify.h) turns a probability vector into the predicted label and the
{label: probability} dictionary. Exported: the label as a tensor of one element per example
([N]: ai.onnx.ml's convention, where coremlrt returns a scalar for the one example), from an
ArgMax over the classes, and the dictionary as ``ZipMap`` (a sequence with one map per example).
"""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from .graph import Unsupported
from .registry import translates


def class_labels(constant):
    """(labels, integer) of classify's `classes` constant: a list of scalars or a 1-D tensor."""
    if constant.items:
        values = [item.scalar() for item in constant.items]
    elif constant.strings is not None:
        values = list(constant.strings)
    elif constant.array is not None:
        values = [v.item() for v in constant.array.reshape(-1)]
    else:
        raise Unsupported("classes of an unknown form")
    integer = all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in values)
    if not integer and not all(isinstance(x, str) for x in values):
        raise Unsupported("classes mixing strings and integers")
    return values, integer


@translates("classify")
def classify(v):
    b = v.builder
    labels, integer = class_labels(v.constant("classes", required=True))
    probabilities = v.input("probabilities")
    if v.dtype("probabilities") != "float32":
        probabilities = b.node("Cast", [probabilities], to=TensorProto.FLOAT)
    rows = b.node("Reshape", [probabilities, b.const_int64([-1, len(labels)], "rows")])
    index = b.node("ArgMax", [rows], axis=1, keepdims=0)
    table = b.initializer(np.asarray(labels, dtype=np.int64 if integer else object), "class_labels")
    b.node("Gather", [table, index], [v.output(0)], axis=0)
    label_type = TensorProto.INT64 if integer else TensorProto.STRING
    b.output_types[v.outputs[0]["name"]] = helper.make_tensor_type_proto(label_type, ["N"])
    if len(v.outputs) > 1:
        attribute = {"classlabels_int64s": labels} if integer else {"classlabels_strings": labels}
        b.node("ZipMap", [rows], [v.output(1)], domain="ai.onnx.ml", **attribute)
        b.output_types[v.outputs[1]["name"]] = helper.make_sequence_type_proto(
            helper.make_map_type_proto(label_type, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))


def feature_row(v):
    """The op's variadic input features (src/ops/feature_vector.h: the model's inputs in
    description order, flattened and joined) as one fp64 row [1, width]."""
    b = v.builder
    parts = []
    for i in range(len(v.bindings("x"))):
        value = v.input("x", i)
        if v.type_of("x", i)["dtype"] != "float64":
            value = b.node("Cast", [value], to=TensorProto.DOUBLE)
        parts.append(b.node("Reshape", [value, b.const_int64([1, -1], "row")]))
    return parts[0] if len(parts) == 1 else b.node("Concat", parts, axis=1)


def _declared(v, value):
    """`value` ([1, n] fp64) in the output's declared shape and dtype."""
    b = v.builder
    dims = v.outputs[0]["type"]["dims"]
    shaped = b.node("Reshape", [value, b.const_int64(dims if all(d >= 0 for d in dims) else [-1], "declared")])
    b.node("Cast", [shaped], [v.output()], to=b.onnx_type(v.output_dtype()))


def _two_classes(b, p):
    """[1, 1] probability of the second class -> [1, 2]: [1 - p, p]."""
    one = b.initializer(np.ones([1, 1]), "one")
    return b.node("Concat", [b.node("Sub", [one, p]), p], axis=1)


@translates("glm")
def glm(v):
    """Core ML's generalized linear models in fp64 (src/ops/glm.cc): z = weights . x + offsets,
    the link's inverse (logit: the logistic function; probit: the normal CDF), then the encoding."""
    b = v.builder
    weights = v.constant("weights", required=True).array.astype(np.float64)
    offsets = v.constant("offsets", required=True).array.astype(np.float64)
    z = b.node("Add", [b.node("MatMul", [feature_row(v), b.initializer(np.ascontiguousarray(weights.T), "glm_w")]),
                       b.initializer(offsets[None, :], "glm_offsets")])
    transform = v.scalar("transform")
    if transform == "logit":
        z = b.node("Sigmoid", [z])
    elif transform == "probit":
        # 0.5 * erfc(-z / sqrt 2) = 0.5 * (1 + erf(z / sqrt 2)); ONNX Runtime's Erf is fp32 only.
        scaled = b.node("Cast", [b.node("Mul", [z, b.initializer(np.asarray(1 / np.sqrt(2.0)), "inv_sqrt2")])],
                        to=TensorProto.FLOAT)
        erf = b.node("Cast", [b.node("Erf", [scaled])], to=TensorProto.DOUBLE)
        z = b.node("Mul", [b.node("Add", [erf, b.initializer(np.asarray(1.0), "one")]),
                           b.initializer(np.asarray(0.5), "half")])
    elif transform != "none":
        raise Unsupported("transform '%s'" % transform)
    encoding = v.scalar("encoding")
    if encoding == "regression":
        _declared(v, z)
        return
    rows = weights.shape[0]
    if rows == 1:
        _declared(v, _two_classes(b, z))
    else:
        # One vs rest: each class's score over their sum (when positive, as the kernel does).
        total = b.node("ReduceSum", [z, b.const_int64([1], "axes")], keepdims=1)
        positive = b.node("Greater", [total, b.initializer(np.asarray(0.0), "zero")])
        _declared(v, b.node("Where", [positive, b.node("Div", [z, total]), z]))


# node_behaviour codes (src/ops/tree_ensemble.cc) as ai.onnx.ml node modes.
_TREE_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "LEAF"]


@translates("tree_ensemble")
def tree_ensemble(v):
    """ai.onnx.ml TreeEnsembleRegressor summing the leaves from `base`, one tree per root; the
    transform and the two-class layout follow as ONNX ops. Thresholds, leaf values and the base
    are fp64 tensors and the features an fp64 row, so branches are chosen in fp64 as Core ML
    chooses them; ONNX Runtime returns the sums as fp32 (TreeEnsembleRegressor's output type)."""
    b = v.builder
    arrays = {name: v.constant(name, required=True).array for name in (
        "node_feature", "node_threshold", "node_behaviour", "node_true", "node_false", "node_missing_true",
        "leaf_start", "leaf_dimension", "leaf_value", "roots", "base")}
    behaviour = arrays["node_behaviour"].astype(int)
    nodes = len(behaviour)
    tree_of = np.full(nodes, -1)
    for tree, root in enumerate(arrays["roots"].astype(int)):
        pending = [root]
        while pending:
            node = pending.pop()
            if tree_of[node] >= 0:
                continue
            tree_of[node] = tree
            if behaviour[node] != 6:
                pending += [int(arrays["node_true"][node]), int(arrays["node_false"][node])]
    used = np.nonzero(tree_of >= 0)[0]
    target_trees, target_nodes, target_ids, target_weights = [], [], [], []
    for node in used:
        for i in range(int(arrays["leaf_start"][node]), int(arrays["leaf_start"][node + 1])):
            target_trees.append(int(tree_of[node]))
            target_nodes.append(int(node))
            target_ids.append(int(arrays["leaf_dimension"][i]))
            target_weights.append(float(arrays["leaf_value"][i]))
    dims = len(arrays["base"])
    branch = [behaviour[n] != 6 for n in used]
    scores = b.node("TreeEnsembleRegressor", [feature_row(v)], domain="ai.onnx.ml", n_targets=dims,
                    nodes_treeids=[int(tree_of[n]) for n in used], nodes_nodeids=[int(n) for n in used],
                    nodes_featureids=[int(arrays["node_feature"][n]) if br else 0 for n, br in zip(used, branch)],
                    nodes_values_as_tensor=numpy_helper.from_array(
                        np.asarray([arrays["node_threshold"][n] for n in used], np.float64)),
                    nodes_modes=[_TREE_MODES[behaviour[n]] for n in used],
                    nodes_truenodeids=[int(arrays["node_true"][n]) if br else 0 for n, br in zip(used, branch)],
                    nodes_falsenodeids=[int(arrays["node_false"][n]) if br else 0 for n, br in zip(used, branch)],
                    nodes_missing_value_tracks_true=[int(arrays["node_missing_true"][n]) for n in used],
                    target_treeids=target_trees, target_nodeids=target_nodes, target_ids=target_ids,
                    target_weights_as_tensor=numpy_helper.from_array(np.asarray(target_weights, np.float64)),
                    base_values_as_tensor=numpy_helper.from_array(np.asarray(arrays["base"], np.float64)),
                    aggregate_function="SUM", post_transform="NONE")
    scores = b.node("Cast", [scores], to=TensorProto.DOUBLE)
    transform = v.scalar("transform")
    if transform == "logistic":
        scores = b.node("Sigmoid", [scores])
    elif transform == "softmax":
        scores = b.node("Softmax", [scores], axis=1)
    elif transform == "softmax_zero_reference":
        scores = b.node("Softmax", [b.node("Concat", [b.initializer(np.zeros([1, 1]), "zero"), scores], axis=1)],
                        axis=1)
    elif transform != "none":
        raise Unsupported("transform '%s'" % transform)
    if v.scalar("mode") == "classification" and dims == 1 and transform != "softmax_zero_reference" and \
            int(np.prod(v.outputs[0]["type"]["dims"])) == 2:
        scores = _two_classes(b, scores)
    _declared(v, scores)


# Feature engineering (src/ops/feature_engineering.cc): each op reads its inputs as one fp64
# vector and writes its declared dtype and shape.

def _per_element(v, param, n):
    values = v.constant(param, required=True).array.astype(np.float64).reshape(-1)
    return v.builder.initializer(np.broadcast_to(values, [n]).reshape(1, n).copy(), param)


def _output_size(v):
    dims = v.outputs[0]["type"]["dims"]
    if any(d < 0 for d in dims):
        raise Unsupported("an output of unknown size")
    return int(np.prod(dims))


@translates("scaler")
def scaler(v):
    """(x + shift) * scale."""
    b = v.builder
    n = _output_size(v)
    shifted = b.node("Add", [feature_row(v), _per_element(v, "shift", n)])
    _declared(v, b.node("Mul", [shifted, _per_element(v, "scale", n)]))


@translates("imputer")
def imputer(v):
    """Every element equal to `missing` (every NaN when it is NaN) takes the imputed value."""
    b = v.builder
    n = _output_size(v)
    x = feature_row(v)
    missing = float(v.scalar("missing"))
    if np.isnan(missing):
        hit = b.node("IsNaN", [x])
    else:
        hit = b.node("Equal", [x, b.initializer(np.asarray(missing), "missing")])
    _declared(v, b.node("Where", [hit, _per_element(v, "imputed", n), x]))


@translates("normalizer")
def normalizer(v):
    """x / ||x|| (L1, L2 or max norm); a zero vector stays zero."""
    b = v.builder
    x = feature_row(v)
    norm = v.scalar("norm")
    axes = b.const_int64([1], "axes")
    if norm == "l1":
        size = b.node("ReduceL1", [x, axes], keepdims=1)
    elif norm == "l2":
        size = b.node("ReduceL2", [x, axes], keepdims=1)
    elif norm == "lmax":
        size = b.node("ReduceMax", [b.node("Abs", [x]), axes], keepdims=1)
    else:
        raise Unsupported("norm '%s'" % norm)
    positive = b.node("Greater", [size, b.initializer(np.asarray(0.0), "zero")])
    _declared(v, b.node("Where", [positive, b.node("Div", [x, size]), x]))


@translates("class_confidence_thresholding")
def class_confidence_thresholding(v):
    """Every class taken, as the format defines the model for now (src/ops/feature_engineering.cc):
    [2, C], row 0 the confidences x [C] in the output's dtype, row 1 ones."""
    b = v.builder
    out_dtype = v.output_dtype(0)
    x = v.input("x")
    if b.float_dtype(v.dtype("x")) != b.float_dtype(out_dtype):
        x = b.node("Cast", [x], to=b.onnx_type(out_dtype))
    row = b.node("Unsqueeze", [x, b.const_int64([0], "axes")])
    ones = b.node("Expand", [b.const_like(1, out_dtype, "one"), b.node("Shape", [row])])
    b.node("Concat", [row, ones], [v.output(0)], axis=0)


@translates("feature_vectorizer")
def feature_vectorizer(v):
    """Its inputs joined in order, input j filling dims[j] places; a dense one-hot dictionary
    (sparse[j]) narrower than its place is padded with zeros."""
    b = v.builder
    dims = v.constant("dims", required=True).ints()
    sparse = v.constant("sparse", required=True).ints()
    parts = []
    for j, (place, is_sparse) in enumerate(zip(dims, sparse)):
        value = v.input("x", j)
        if v.type_of("x", j)["dtype"] != "float64":
            value = b.node("Cast", [value], to=TensorProto.DOUBLE)
        value = b.node("Reshape", [value, b.const_int64([1, -1], "row")])
        if is_sparse:
            width = v.type_of("x", j)["dims"]
            if any(d < 0 for d in width):
                raise Unsupported("a dictionary input of unknown width")
            width = int(np.prod(width))
            if width > place:
                raise Unsupported("a dictionary input wider than its place")
            if width < place:
                value = b.node("Pad", [value, b.const_int64([0, 0, 0, place - width], "pads")])
        parts.append(value)
    _declared(v, parts[0] if len(parts) == 1 else b.node("Concat", parts, axis=1))


# Support vector machines (src/ops/svm.cc, LibSVM's prediction), in fp64 ONNX ops rather than
# ai.onnx.ml's SVMClassifier / SVMRegressor: those output fp32 (Core ML's regression is fp64),
# their classifier scores without probabilities are the pairwise decision values (Core ML's are
# each class's share of the votes), and their two-class probabilities go through the coupling
# iteration (Core ML takes the pair's estimate directly). Every step below is the kernel's, in its
# order where the order changes results.

def _svm_kernel(v, b, x, vectors):
    """[1, count] kernel values K(sv_i, x)."""
    name = v.scalar("kernel")
    gamma = float(v.scalar("gamma", 0.0))
    c = float(v.scalar("c", 0.0))
    sv = b.initializer(np.ascontiguousarray(vectors.T), "svm_vectors_t")  # [width, count]
    if name == "rbf":
        # |x - v|^2 summed over the features, as the kernel does (not x.x - 2 x.v + v.v).
        diff = b.node("Sub", [b.node("Reshape", [x, b.const_int64([-1, 1], "column")]), sv])
        squared = b.node("ReduceSum", [b.node("Mul", [diff, diff]), b.const_int64([0], "axes")], keepdims=1)
        return b.node("Exp", [b.node("Mul", [squared, b.initializer(np.asarray(-gamma), "neg_gamma")])])
    dot = b.node("MatMul", [x, sv])
    if name == "linear":
        return dot
    affine = b.node("Add", [b.node("Mul", [dot, b.initializer(np.asarray(gamma), "gamma")]),
                            b.initializer(np.asarray(c), "coef0")])
    if name == "poly":
        return b.node("Pow", [affine, b.initializer(np.asarray(float(v.scalar("degree", 0))), "degree")])
    if name == "sigmoid":
        return b.node("Tanh", [affine])
    raise Unsupported("kernel '%s'" % name)


def _svm_couple(b, pairwise, k):
    """LibSVM's multiclass_probability over r ([k, k] fp64, r[i][j] = P(i | i or j)) -> [1, k]:
    Q from r, then up to max(100, k) sweeps, each stopping when max |Qp - p'Qp| < 0.005 / k, and
    otherwise updating p one class at a time (unrolled over the k classes)."""
    rt = b.node("Transpose", [pairwise], perm=[1, 0])                     # rt[t][j] = r[j][t]
    off = b.initializer((1 - np.eye(k)), "off_diagonal")
    eye = b.initializer(np.eye(k), "eye")
    diagonal = b.node("ReduceSum", [b.node("Mul", [b.node("Mul", [rt, rt]), off]), b.const_int64([1], "axes")],
                      keepdims=1)                                          # [k, 1]: sum_j!=t r[j][t]^2
    # Q[t][j] = -r[j][t] * r[t][j] off the diagonal (symmetric).
    q = b.node("Add", [b.node("Mul", [b.node("Neg", [b.node("Mul", [rt, pairwise])]), off]),
                       b.node("Mul", [diagonal, eye])])
    eps = b.initializer(np.asarray(0.005 / k), "couple_eps")
    one = b.initializer(np.asarray(1.0), "one")
    two = b.initializer(np.asarray(2.0), "two")
    axes0 = b.const_int64([0], "axes")
    p_in, cond_in, iteration = b.fresh("couple_p"), b.fresh("couple_cond"), b.fresh("couple_iter")

    def body():
        qp = b.node("MatMul", [q, p_in])                                   # [k, 1]
        pqp = b.node("ReduceSum", [b.node("Mul", [p_in, qp]), axes0], keepdims=1)  # [1, 1]
        error = b.node("ReduceMax", [b.node("Abs", [b.node("Sub", [qp, pqp])]), axes0], keepdims=1)
        go = b.node("Reshape", [b.node("Not", [b.node("Less", [error, eps])]), b.const_int64([], "scalar")])
        p = p_in
        for t in range(k):
            qtt = b.node("Slice", [b.node("Slice", [q, b.const_int64([t], "s"), b.const_int64([t + 1], "e"),
                                                    b.const_int64([0], "a")]),
                                   b.const_int64([t], "s"), b.const_int64([t + 1], "e"), b.const_int64([1], "a")])
            qpt = b.node("Slice", [qp, b.const_int64([t], "s"), b.const_int64([t + 1], "e"), b.const_int64([0], "a")])
            diff = b.node("Div", [b.node("Add", [b.node("Neg", [qpt]), pqp]), qtt])
            unit = b.initializer(np.eye(k)[:, t:t + 1].copy(), "unit")
            p = b.node("Add", [p, b.node("Mul", [diff, unit])])
            scale = b.node("Add", [one, diff])
            pqp = b.node("Div", [b.node("Div", [
                b.node("Add", [pqp, b.node("Mul", [diff, b.node("Add", [b.node("Mul", [diff, qtt]),
                                                                         b.node("Mul", [two, qpt])])])]),
                scale]), scale])
            column = b.node("Slice", [q, b.const_int64([t], "s"), b.const_int64([t + 1], "e"), b.const_int64([1], "a")])
            qp = b.node("Div", [b.node("Add", [qp, b.node("Mul", [diff, column])]), scale])
            p = b.node("Div", [p, scale])
        return [(go, TensorProto.BOOL), (b.node("Where", [go, p, p_in]), TensorProto.DOUBLE)]

    graph = b.subgraph("couple", [(iteration, TensorProto.INT64, []), (cond_in, TensorProto.BOOL, []),
                                  (p_in, TensorProto.DOUBLE, [k, 1])], body)
    start = b.initializer(np.full([k, 1], 1.0 / k), "couple_start")
    p = b.node("Loop", [b.initializer(np.asarray(max(100, k), np.int64), "couple_iterations"),
                        b.initializer(np.asarray(True), "true"), start], body=graph)
    return b.node("Reshape", [p, b.const_int64([1, k], "row")])


@translates("svm")
def svm(v):
    b = v.builder
    vectors = v.constant("support_vectors", required=True).array.astype(np.float64)
    coefficients = v.constant("coefficients", required=True).array.astype(np.float64)
    rho = v.constant("rho", required=True).array.astype(np.float64).reshape(-1)
    per_class = [int(n) for n in v.constant("vectors_per_class", required=True).array.reshape(-1)]
    count, width = vectors.shape
    x = feature_row(v)
    features = sum(int(np.prod(v.type_of("x", i)["dims"])) if v.type_of("x", i)["rank"] >= 0 and
                   all(d >= 0 for d in v.type_of("x", i)["dims"]) else -1 for i in range(len(v.bindings("x"))))
    if features < 0:
        raise Unsupported("input features of unknown size")
    if features > width:
        raise Unsupported("%d input features for support vectors of %d" % (features, width))
    if features < width:  # sparse support vectors past the inputs' end: the kernel pads x with zeros
        x = b.node("Pad", [x, b.const_int64([0, 0, 0, width - features], "pads")])
    kernel = _svm_kernel(v, b, x, vectors)
    mode = v.scalar("mode")
    if mode == "regression":
        # sum_i coef_i K_i - rho: the kernel starts the sum at -rho and adds in order; a MatMul
        # sums the products first (results agree to fp64 rounding).
        total = b.node("MatMul", [kernel, b.initializer(coefficients.reshape(-1, 1), "svm_coef")])
        _declared(v, b.node("Sub", [total, b.initializer(rho.reshape(1, 1), "svm_rho")]))
        return
    classes = len(per_class)
    start = np.concatenate([[0], np.cumsum(per_class)]).astype(int)
    pairs = [(i, j) for i in range(classes) for j in range(i + 1, classes)]
    # decision[p] = sum_{s in class i} coef[j-1][s] K_s + sum_{s in class j} coef[i][s] K_s - rho[p]
    weights = np.zeros([count, len(pairs)])
    for p, (i, j) in enumerate(pairs):
        weights[start[i]:start[i + 1], p] = coefficients[j - 1, start[i]:start[i + 1]]
        weights[start[j]:start[j + 1], p] = coefficients[i, start[j]:start[j + 1]]
    decision = b.node("Sub", [b.node("MatMul", [kernel, b.initializer(weights, "svm_pair_weights")]),
                              b.initializer(rho.reshape(1, -1), "svm_rho")])      # [1, pairs]
    if mode == "votes":
        # The pair (i, j) votes i when its decision value is > 0, else j.
        to_i, to_j = np.zeros([len(pairs), classes]), np.zeros([len(pairs), classes])
        for p, (i, j) in enumerate(pairs):
            to_i[p, i] = to_j[p, j] = 1
        positive = b.node("Cast", [b.node("Greater", [decision, b.initializer(np.asarray(0.0), "zero")])],
                          to=TensorProto.DOUBLE)
        negative = b.node("Sub", [b.initializer(np.asarray(1.0), "one"), positive])
        votes = b.node("Add", [b.node("MatMul", [positive, b.initializer(to_i, "svm_votes_i")]),
                               b.node("MatMul", [negative, b.initializer(to_j, "svm_votes_j")])])
        _declared(v, b.node("Div", [votes, b.initializer(np.asarray(float(len(pairs))), "svm_pairs")]))
        return
    if mode != "probabilities":
        raise Unsupported("mode '%s'" % mode)
    prob_a = v.constant("prob_a", required=True).array.astype(np.float64).reshape(1, -1)
    prob_b = v.constant("prob_b", required=True).array.astype(np.float64).reshape(1, -1)
    f = b.node("Add", [b.node("Mul", [decision, b.initializer(prob_a, "svm_prob_a")]),
                       b.initializer(prob_b, "svm_prob_b")])
    estimate = b.node("Sigmoid", [b.node("Neg", [f])])                    # Platt: 1 / (1 + exp(f))
    # LibSVM's min(max(r, 1e-7), 1 - 1e-7) by its comparisons: a NaN estimate becomes 1e-7.
    low = b.initializer(np.asarray(1e-7), "svm_low")
    high = b.initializer(np.asarray(1 - 1e-7), "svm_high")
    raised = b.node("Where", [b.node("Greater", [estimate, low]), estimate, low])
    r = b.node("Where", [b.node("Less", [raised, high]), raised, high])   # [1, pairs]
    if classes == 2:
        _declared(v, b.node("Concat", [r, b.node("Sub", [b.initializer(np.ones([1, 1]), "one"), r])], axis=1))
        return
    # The [k, k] pairwise matrix: r at (i, j), 1 - r at (j, i), 0 on the diagonal.
    upper, lower = np.zeros([len(pairs), classes * classes]), np.zeros([len(pairs), classes * classes])
    for p, (i, j) in enumerate(pairs):
        upper[p, i * classes + j] = 1
        lower[p, j * classes + i] = 1
    complement = b.node("Sub", [b.initializer(np.ones([1, len(pairs)]), "ones"), r])
    matrix = b.node("Add", [b.node("MatMul", [r, b.initializer(upper, "svm_upper")]),
                            b.node("MatMul", [complement, b.initializer(lower, "svm_lower")])])
    _declared(v, _svm_couple(b, b.node("Reshape", [matrix, b.const_int64([classes, classes], "square")]), classes))


@translates("array_feature_extractor")
def array_feature_extractor(v):
    """The elements at `indices` of the input features (flattened and joined): ai.onnx.ml's
    ArrayFeatureExtractor over the fp64 row, which picks along its last axis."""
    b = v.builder
    indices = v.constant("indices", required=True).ints()
    _declared(v, b.node("ArrayFeatureExtractor", [feature_row(v), b.const_int64(indices, "indices")],
                        domain="ai.onnx.ml"))


@translates("one_hot_encoder")
def one_hot_encoder(v):
    """ai.onnx.ml's OneHotEncoder over int64 categories: 1 at the value's category, 0 elsewhere;
    `zeros` = ignore_unknown (0: an unknown value fails, as the kernel fails the prediction). The
    kernel compares the value as a double, where OneHotEncoder casts a double input to int64: a
    double input that is not a whole number (or NaN) is replaced by an int64 outside the
    categories, so it is unknown on both sides."""
    b = v.builder
    categories = v.constant("categories", required=True).ints()
    if len(set(categories)) != len(categories):
        raise Unsupported("a category listed twice (OneHotEncoder gives each category one place)")
    ignore = int(bool(v.scalar("ignore_unknown", 0)))
    dtype = v.type_of("x")["dtype"]
    value = b.node("Reshape", [v.input("x"), b.const_int64([1], "one_value")])
    if dtype in ("int64", "int32"):
        code = value if dtype == "int64" else b.node("Cast", [value], to=TensorProto.INT64)
    else:
        if dtype != "float64":
            value = b.node("Cast", [value], to=TensorProto.DOUBLE)
        outside = min(categories) - 1 if min(categories) > np.iinfo(np.int64).min else max(categories) + 1
        # Whole and within int64's range (|x| < 2^63): the cast is exact there.
        whole = b.node("And", [b.node("Equal", [b.node("Floor", [value]), value]),
                               b.node("Less", [b.node("Abs", [value]), b.initializer(np.asarray(2.0 ** 63), "int64_limit")])])
        safe = b.node("Where", [whole, value, b.initializer(np.asarray(0.0), "zero")])
        code = b.node("Where", [whole, b.node("Cast", [safe], to=TensorProto.INT64),
                                b.const_int64(outside, "unknown_category")])
    encoded = b.node("OneHotEncoder", [code], domain="ai.onnx.ml", cats_int64s=categories, zeros=ignore)
    _declared(v, b.node("Cast", [b.node("Reshape", [encoded, b.const_int64([1, -1], "row")])], to=TensorProto.DOUBLE))


@translates("dict_vectorizer")
def dict_vectorizer(v):
    """Its input is already the dictionary laid out over the vocabulary (exporter.py makes it
    from the map input with DictVectorizer): written in the output's declared shape and dtype."""
    b = v.builder
    _declared(v, b.node("Reshape", [v.input("x"), b.const_int64([1, -1], "row")]))


# String features (src/ops/feature_engineering.cc). A string input reaches these ops as its code
# in the op's vocabulary, -1 for a string it does not list (exporter.py makes the code from the
# ONNX string input with CategoryMapper).

@translates("string_to_int64")
def string_to_int64(v):
    """categoricalMapping from strings: values[code], the default for code -1 (Gather reads index
    -1 as the last entry, where the default is put)."""
    b = v.builder
    values = v.constant("values", required=True).ints()
    default = v.constant("default", required=True).ints()
    if len(default) != 1:
        raise Unsupported("a default of %d values" % len(default))
    table = b.initializer(np.asarray(values + default, np.int64), "mapped_values")
    code = b.node("Reshape", [v.input("x"), b.const_int64([], "scalar")])
    b.node("Gather", [table, code], [v.output()], axis=0)


@translates("int64_to_string")
def int64_to_string(v):
    """categoricalMapping from int64: the program carries the string as its code in
    `output_vocabulary` (the mapped strings in key order, then the default), and such a value may
    only leave the function (src/format/feature_codes.cc), so the export gives the string itself:
    ai.onnx.ml's CategoryMapper over the keys, the default string for any other key. The output
    becomes an ONNX string tensor of the declared shape."""
    b = v.builder
    keys = v.constant("keys", required=True).ints()
    strings = list(v.constant("output_vocabulary", required=True).strings)
    if len(strings) != len(keys) + 1 or len(set(keys)) != len(keys):
        raise Unsupported("keys and output vocabulary that do not pair up")
    x = v.input("x")
    if v.dtype("x") != "int64":
        x = b.node("Cast", [x], to=TensorProto.INT64)
    out = v.outputs[0]
    shape = b.const_int64(list(out["type"]["dims"]), "declared")
    mapped = b.node("CategoryMapper", [b.node("Reshape", [x, b.const_int64([1], "one_value")])], domain="ai.onnx.ml",
                    cats_int64s=keys, cats_strings=strings[:-1], default_string=strings[-1])
    b.node("Reshape", [mapped, shape], [v.output()])
    b.types[out["name"]] = dict(out["type"], dtype="string")


@translates("string_one_hot_encoder")
def string_one_hot_encoder(v):
    """oneHotEncoder over string categories: 1 at the code's place; an unknown string (code -1)
    gives zeros under IgnoreUnknown and fails otherwise, as OneHotEncoder over the codes does
    (zeros = ignore_unknown)."""
    b = v.builder
    n = len(v.constant("vocabulary", required=True).strings)
    ignore = int(bool(v.scalar("ignore_unknown", 0)))
    code = b.node("Reshape", [v.input("x"), b.const_int64([1], "one_value")])
    if v.dtype("x") != "int64":
        code = b.node("Cast", [code], to=TensorProto.INT64)
    encoded = b.node("OneHotEncoder", [code], domain="ai.onnx.ml", cats_int64s=list(range(n)), zeros=ignore)
    _declared(v, b.node("Cast", [b.node("Reshape", [encoded, b.const_int64([1, -1], "row")])], to=TensorProto.DOUBLE))


def _sequential_sum(b, x, axis, count, hint):
    """The sum of `x` along `axis` (kept, size `count`) added in index order, as the kernels add:
    a ReduceSum may add in another order and round differently, which would break exact ties."""
    if count > 256:
        return b.node("ReduceSum", [x, b.const_int64([axis], "axes")], keepdims=1)
    total = None
    for i in range(count):
        part = b.node("Slice", [x, b.const_int64([i], "s"), b.const_int64([i + 1], "e"), b.const_int64([axis], "a")],
                      hint=hint)
        total = part if total is None else b.node("Add", [total, part], hint=hint)
    return total


@translates("nearest_neighbors")
def nearest_neighbors(v):
    """kNearestNeighborsClassifier (src/ops/nearest_neighbors.cc), step by step in fp64: the
    Euclidean distance to every sample (squares added over the dimensions in order), TopK of the
    k smallest (ONNX's TopK puts the lower index first among equal values, as the kernel's sort
    does), each neighbour's weight (1, or 1 / distance; when a neighbour is at distance 0 those
    share all the weight), the weights added per class in neighbour order, each class's share as
    fp32. classify then takes the first maximum, as the kernel's caller does."""
    b = v.builder
    samples = v.constant("samples", required=True).array.astype(np.float64)
    sample_class = v.constant("sample_class", required=True).ints()
    k = int(v.scalar("k"))
    weighting = v.scalar("weighting")
    if weighting not in ("uniform", "inverse_distance"):
        raise Unsupported("weighting '%s'" % weighting)
    default_class = int(v.scalar("default_class", -1))
    classes = _output_size(v)
    count, dims = samples.shape
    shape = b.const_int64(list(v.outputs[0]["type"]["dims"]), "declared")
    if count == 0:  # no samples: the default class gets everything
        scores = np.zeros([classes], np.float32)
        scores[default_class] = 1
        b.node("Reshape", [b.initializer(scores, "knn_default"), shape], [v.output()])
        return
    x = feature_row(v)                                                      # [1, dims]
    diff = b.node("Sub", [x, b.initializer(samples, "knn_samples")])        # [count, dims]
    distance = b.node("Sqrt", [_sequential_sum(b, b.node("Mul", [diff, diff]), 1, dims, "knn_sq")])  # [count, 1]
    distance = b.node("Reshape", [distance, b.const_int64([1, count], "row")])
    n = min(k, count)
    nearest, index = b.node("TopK", [distance, b.const_int64([n], "k")], outputs=[b.fresh("knn_d"), b.fresh("knn_i")],
                            axis=1, largest=0, sorted=1)                   # [1, n] each
    if weighting == "uniform":
        weight = b.initializer(np.ones([1, n]), "knn_uniform")
    else:
        zero = b.initializer(np.asarray(0.0), "zero")
        at_zero = b.node("Equal", [nearest, zero])
        exact = b.node("ReduceMax", [b.node("Cast", [at_zero], to=TensorProto.INT64), b.const_int64([1], "axes")],
                       keepdims=1)
        safe = b.node("Where", [at_zero, b.initializer(np.asarray(1.0), "one"), nearest])
        inverse = b.node("Div", [b.initializer(np.asarray(1.0), "one"), safe])
        weight = b.node("Where", [b.node("Cast", [exact], to=TensorProto.BOOL),
                                  b.node("Cast", [at_zero], to=TensorProto.DOUBLE), inverse])
    neighbour_class = b.node("Gather", [b.initializer(np.asarray(sample_class, np.int64), "knn_class"), index], axis=0)
    one_hot = b.node("Cast", [b.node("Equal", [b.node("Reshape", [neighbour_class, b.const_int64([n, 1], "column")]),
                                               b.initializer(np.arange(classes, dtype=np.int64)[None, :], "knn_classes")])],
                     to=TensorProto.DOUBLE)                                # [n, classes]
    votes = b.node("Mul", [one_hot, b.node("Reshape", [weight, b.const_int64([n, 1], "column")])])
    per_class = _sequential_sum(b, votes, 0, n, "knn_vote")                # [1, classes]
    total = _sequential_sum(b, per_class, 1, classes, "knn_total")         # [1, 1]
    share = b.node("Cast", [b.node("Div", [per_class, total])], to=TensorProto.FLOAT)
    b.node("Reshape", [share, shape], [v.output()])
