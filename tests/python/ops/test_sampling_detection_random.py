"""Sampling (resample, affine), non_maximum_suppression, random ops, quantize/dequantize and
classify.

Each test builds a small MIL program with pip's coremltools, runs it with coremlrt and
compares with a reference computed here: torch's grid_sample/affine_grid, and numpy for the
rest. Random ops cannot match Apple's generator, so they are checked for determinism per seed
and statistically.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

import backend_check
from coremlrt import _core
from detection_helpers import op_reference_nms
from mil_helpers import save_program

RNG = np.random.default_rng(4321)


def load(prog, tmp_path, target=ct.target.iOS18, fp16=False, name="model", expect_ops=()):
    path = save_program(prog, tmp_path, name=name, fp16=fp16, target=target)
    counts = _core.inspect(path)["functions"][0]["op_counts"]
    for op in expect_ops:  # the op under test must survive coremltools' graph passes
        assert counts.get(op), f"{op} missing from the saved program: {counts}"
    return backend_check.load(path)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# ----------------------------------------------------------------------------- resample

def to_pixel(v, n, mode, align):
    """Coordinate value -> pixel position (0 = first pixel centre), per coordinates_mode."""
    if mode == "unnormalized":
        return v
    if mode == "normalized_zero_to_one":
        v = 2 * v - 1
    return (v + 1) / 2 * (n - 1) if align else ((v + 1) * n - 1) / 2


def padded_reference(x, grid, sampling, padding, value, coords_mode, align, margin=8):
    """grid_sample on an explicitly padded image: the op's "image padded with ..." model.

    np.pad's modes are Core ML's: constant, edge (border), reflect (reflection: edge not
    repeated) and symmetric (edge repeated). Positions are pixel positions in the padded
    image, sampled with torch (align_corners=True maps -1/1 to the first/last pixel centres).
    """
    np_mode = {"constant": "constant", "border": "edge", "reflection": "reflect", "symmetric": "symmetric"}[padding]
    kwargs = {"constant_values": value} if padding == "constant" else {}
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (margin, margin), (margin, margin)], mode=np_mode, **kwargs)
    h, w = x.shape[2:]
    px = to_pixel(grid[..., 0].astype(np.float64), w, coords_mode, align) + margin
    py = to_pixel(grid[..., 1].astype(np.float64), h, coords_mode, align) + margin
    assert px.min() > 0 and py.min() > 0 and px.max() < w + 2 * margin - 1 and py.max() < h + 2 * margin - 1
    hp, wp = xp.shape[2:]
    g = np.stack([2 * px / (wp - 1) - 1, 2 * py / (hp - 1) - 1], axis=-1)
    return F.grid_sample(torch.from_numpy(xp), torch.from_numpy(g), mode=sampling, padding_mode="zeros",
                         align_corners=True).numpy()


RESAMPLE_CASES = [  # (sampling, padding, padding_value, coordinates_mode, align_corners)
    (s, p, v, c, a)
    for s in ("bilinear", "nearest")
    for p, v in (("constant", 0.0), ("constant", 1.5), ("border", 0.0), ("reflection", 0.0), ("symmetric", 0.0))
    for c in ("normalized_minus_one_to_one", "normalized_zero_to_one", "unnormalized")
    for a in (True, False)
]


def grid_for(mode, shape, h, w):
    """Coordinates (x, y) covering the image and up to ~1.5 image sizes beyond it."""
    u = RNG.uniform(-1.6, 1.6, size=shape + (2,))
    if mode == "normalized_zero_to_one":
        u = (u + 1) / 2
    elif mode == "unnormalized":
        u = np.stack([(u[..., 0] + 1) / 2 * (w - 1), (u[..., 1] + 1) / 2 * (h - 1)], axis=-1)
    return u.astype(np.float32)


def test_resample_all_modes(tmp_path):
    x = rand(2, 3, 5, 6)
    grids = {c: grid_for(c, (2, 4, 7), 5, 6) for c in {case[3] for case in RESAMPLE_CASES}}

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)] + [mb.TensorSpec(shape=(2, 4, 7, 2)) for _ in range(3)],
                opset_version=ct.target.iOS18)
    def prog(x, g_m11, g_01, g_px):
        g = {"normalized_minus_one_to_one": g_m11, "normalized_zero_to_one": g_01, "unnormalized": g_px}
        return tuple(
            mb.resample(x=x, coordinates=g[c], sampling_mode=s, padding_mode=p, padding_value=v,
                        coordinates_mode=c, align_corners=a, name=f"r{i}")
            for i, (s, p, v, c, a) in enumerate(RESAMPLE_CASES))

    model = load(prog, tmp_path, expect_ops=["resample"])
    out = model.predict({"x": x, "g_m11": grids["normalized_minus_one_to_one"],
                         "g_01": grids["normalized_zero_to_one"], "g_px": grids["unnormalized"]})
    for i, (s, p, v, c, a) in enumerate(RESAMPLE_CASES):
        want = padded_reference(x, grids[c], s, p, v, c, a)
        np.testing.assert_allclose(out[f"r{i}"], want, rtol=0, atol=2e-5, err_msg=str(RESAMPLE_CASES[i]))

    # The PyTorch modes directly against grid_sample (reflection without align_corners is
    # Core ML's symmetric, as coremltools' converter maps it).
    g = grids["normalized_minus_one_to_one"]
    for i, (s, p, v, c, a) in enumerate(RESAMPLE_CASES):
        if c != "normalized_minus_one_to_one" or v != 0 or (p == "reflection" and not a) or (p == "symmetric" and a):
            continue
        torch_mode = {"constant": "zeros", "border": "border", "reflection": "reflection", "symmetric": "reflection"}[p]
        want = F.grid_sample(torch.from_numpy(x), torch.from_numpy(g), mode=s, padding_mode=torch_mode,
                             align_corners=a).numpy()
        np.testing.assert_allclose(out[f"r{i}"], want, rtol=0, atol=2e-5, err_msg=str(RESAMPLE_CASES[i]))


def test_resample_fp16_and_int_coordinates(tmp_path):
    x = rand(1, 2, 4, 5)
    coords = RNG.integers(-2, 7, size=(1, 3, 4, 2)).astype(np.int32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape, dtype=types.fp16), mb.TensorSpec(shape=coords.shape, dtype=types.int32),
                             mb.TensorSpec(shape=(1, 3, 4, 2))], opset_version=ct.target.iOS18)
    def prog(x, c, g):
        return (mb.resample(x=x, coordinates=c, sampling_mode="bilinear", padding_mode="border", padding_value=np.float16(0),
                            coordinates_mode="unnormalized", align_corners=False, name="int_coords"),
                mb.resample(x=x, coordinates=mb.cast(x=g, dtype="fp16"), sampling_mode="bilinear",
                            padding_mode="constant", padding_value=np.float16(0), coordinates_mode="normalized_minus_one_to_one",
                            align_corners=True, name="fp16_coords"))

    g = grid_for("normalized_minus_one_to_one", (1, 3, 4), 4, 5)
    out = load(prog, tmp_path, fp16=True, expect_ops=["resample"]).predict({"x": x, "c": coords, "g": g})
    xh = x.astype(np.float16).astype(np.float32)
    # Integer coordinates sit on pixel centres: border padding is a clamped gather.
    want = xh[0][:, np.clip(coords[0, ..., 1], 0, 3), np.clip(coords[0, ..., 0], 0, 4)][None]
    np.testing.assert_array_equal(out["int_coords"], want)
    gh = g.astype(np.float16).astype(np.float32)
    want = F.grid_sample(torch.from_numpy(xh), torch.from_numpy(gh), mode="bilinear", padding_mode="zeros",
                         align_corners=True).numpy()
    np.testing.assert_allclose(out["fp16_coords"], want, rtol=0, atol=4e-3)


# ----------------------------------------------------------------------------- affine

def test_affine_matches_affine_grid(tmp_path):
    x = rand(2, 3, 6, 5)
    theta = (np.eye(2, 3)[None] + RNG.uniform(-0.4, 0.4, size=(2, 2, 3))).astype(np.float32)
    const_theta = np.array([[0.8, -0.3, 0.1, 0.2, 1.1, -0.2]], np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape), mb.TensorSpec(shape=(2, 6))], opset_version=ct.target.iOS18)
    def prog(x, m):
        outs = []
        for align in (True, False):
            outs.append(mb.affine(x=x, transform_matrix=m, output_height=4, output_width=7, sampling_mode="bilinear",
                                  padding_mode="constant", padding_value=0.0,
                                  coordinates_mode="normalized_minus_one_to_one", align_corners=align,
                                  name=f"batch_{align}"))
            outs.append(mb.affine(x=x, transform_matrix=const_theta, output_height=6, output_width=5,
                                  sampling_mode="bilinear", padding_mode="constant", padding_value=0.0,
                                  coordinates_mode="normalized_minus_one_to_one", align_corners=align,
                                  name=f"shared_{align}"))
        return tuple(outs)

    out = load(prog, tmp_path, expect_ops=["affine"]).predict({"x": x, "m": theta.reshape(2, 6)})
    xt = torch.from_numpy(x)
    for align in (True, False):
        grid = F.affine_grid(torch.from_numpy(theta), [2, 3, 4, 7], align_corners=align)
        want = F.grid_sample(xt, grid, mode="bilinear", padding_mode="zeros", align_corners=align).numpy()
        np.testing.assert_allclose(out[f"batch_{align}"], want, rtol=0, atol=2e-5)
        grid = F.affine_grid(torch.from_numpy(const_theta.reshape(1, 2, 3)).expand(2, 2, 3), [2, 3, 6, 5],
                             align_corners=align)
        want = F.grid_sample(xt, grid, mode="bilinear", padding_mode="zeros", align_corners=align).numpy()
        np.testing.assert_allclose(out[f"shared_{align}"], want, rtol=0, atol=2e-5)


# ----------------------------------------------------------------------------- NMS

def make_boxes(n, count, classes):
    """Clusters of overlapping boxes, so that suppression has work to do."""
    centers = RNG.uniform(0, 10, size=(n, count // 4 + 1, 2))
    which = RNG.integers(0, centers.shape[1], size=(n, count))
    xy = np.take_along_axis(centers, which[..., None].repeat(2, -1), axis=1) + RNG.normal(0, 0.4, size=(n, count, 2))
    wh = RNG.uniform(1, 3, size=(n, count, 2))
    boxes = np.concatenate([xy, wh], axis=-1).astype(np.float32)
    scores = RNG.uniform(0, 1, size=(n, count, classes)).astype(np.float32)
    return boxes, scores


@pytest.mark.parametrize("ios17", [False, True])
def test_non_maximum_suppression(tmp_path, ios17):
    n, count, classes, max_boxes = 2, 24, 3, 10
    boxes, scores = make_boxes(n, count, classes)
    iou_t, score_t = 0.3, 0.25
    target = ct.target.iOS17 if ios17 else ct.target.iOS15
    layout = (lambda a: a.transpose(0, 2, 1)) if ios17 else (lambda a: a)

    @mb.program(input_specs=[mb.TensorSpec(shape=layout(boxes).shape), mb.TensorSpec(shape=layout(scores).shape)],
                opset_version=target)
    def prog(b, s):
        outs = []
        for per_class in (False, True):
            extra = {} if ios17 else {"score_threshold": score_t}
            res = mb.non_maximum_suppression(boxes=b, scores=s, iou_threshold=iou_t, max_boxes=max_boxes,
                                             per_class_suppression=per_class, **extra)
            # indices are int32 outputs; the rest are float
            outs += [mb.identity(x=r, name=f"{name}_{per_class}") for r, name in zip(res, ["boxes", "scores", "indices", "count"])]
        return tuple(outs)

    model = load(prog, tmp_path, target=target, expect_ops=["non_maximum_suppression"])
    out = model.predict({"b": layout(boxes), "s": layout(scores)})
    for per_class in (False, True):
        for b in range(n):
            kept = op_reference_nms(boxes[b], scores[b], iou_t, -np.inf if ios17 else score_t, max_boxes, per_class)
            assert len(kept) > 2, "test data should keep several boxes"
            want_idx = np.full(max_boxes, -1, np.int32)
            want_idx[:len(kept)] = kept
            want_boxes = np.zeros((max_boxes, 4), np.float32)
            want_boxes[:len(kept)] = boxes[b, kept]
            want_scores = np.zeros((max_boxes, classes), np.float32)
            want_scores[:len(kept)] = scores[b, kept]
            np.testing.assert_array_equal(out[f"indices_{per_class}"][b], want_idx)
            got_boxes, got_scores = out[f"boxes_{per_class}"][b], out[f"scores_{per_class}"][b]
            if ios17:
                got_boxes, got_scores = got_boxes.T, got_scores.T
            np.testing.assert_array_equal(got_boxes, want_boxes)
            np.testing.assert_array_equal(got_scores, want_scores)
            if not ios17:
                assert out[f"count_{per_class}"][b] == len(kept)
    # per-class suppression keeps at least as many boxes (it compares fewer pairs)
    assert (out["indices_True"] >= 0).sum() >= (out["indices_False"] >= 0).sum()


def test_non_maximum_suppression_keeps_the_best_box_when_none_passes(tmp_path):
    """Every score at or below the threshold: the iOS15 op still returns the best box, count 1
    (coremltools' reference of Core ML's op); a score equal to the threshold does not pass."""
    boxes, scores = make_boxes(2, 8, 3)
    scores[1] *= 0.4
    scores[1, 5, 2] = 0.5  # the best box of entry 1, exactly at the threshold

    @mb.program(input_specs=[mb.TensorSpec(shape=boxes.shape), mb.TensorSpec(shape=scores.shape)],
                opset_version=ct.target.iOS15)
    def prog(b, s):
        res = mb.non_maximum_suppression(boxes=b, scores=s, iou_threshold=0.3, score_threshold=0.5, max_boxes=4)
        return tuple(mb.identity(x=r, name=name) for r, name in zip(res, ["boxes", "scores", "indices", "count"]))

    out = load(prog, tmp_path, target=ct.target.iOS15, expect_ops=["non_maximum_suppression"]).predict(
        {"b": boxes, "s": scores})
    for b in range(2):
        kept = op_reference_nms(boxes[b], scores[b], 0.3, 0.5, 4, False)
        assert out["count"][b] == len(kept)
        np.testing.assert_array_equal(out["indices"][b][:len(kept)], kept)
    assert list(out["indices"][1]) == [5, -1, -1, -1] and out["count"][1] == 1
    np.testing.assert_array_equal(out["boxes"][1][0], boxes[1, 5])


# ----------------------------------------------------------------------------- random ops

def test_random_ops_seeded_and_unseeded(tmp_path):
    shape = [200, 500]

    @mb.program(input_specs=[mb.TensorSpec(shape=(2,), dtype=types.int32)], opset_version=ct.target.iOS18)
    def prog(shape):
        logits = np.log(np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.0 + 1e-30, 0.2, 0.1]], np.float32))
        return (
            mb.random_uniform(shape=shape, low=-2.0, high=3.0, seed=7, name="uniform"),
            mb.random_uniform(shape=shape, seed=8, name="uniform_other_seed"),
            mb.random_uniform(shape=shape, name="uniform_unseeded"),
            mb.random_normal(shape=shape, mean=1.5, stddev=2.0, seed=3, name="normal"),
            mb.random_bernoulli(shape=shape, prob=0.3, seed=5, name="bernoulli"),
            mb.random_categorical(x=logits, size=50000, seed=11, name="categorical_logits"),
            mb.random_categorical(x=np.array([[1.0, 3.0, 0.0, 4.0]], np.float32), mode="probs", size=50000, seed=12,
                                  name="categorical_probs"),
        )

    model = load(prog, tmp_path, expect_ops=["random_uniform", "random_normal", "random_bernoulli", "random_categorical"])
    feed = {"shape": np.array(shape, np.int32)}
    a, b = model.predict(feed), model.predict(feed)
    for name in ("uniform", "normal", "bernoulli", "categorical_logits", "categorical_probs"):
        np.testing.assert_array_equal(a[name], b[name], err_msg=f"{name}: a seed must give the same values every run")
    assert not np.array_equal(a["uniform_unseeded"], b["uniform_unseeded"]), "unseeded values must change between runs"
    assert not np.array_equal(a["uniform"], a["uniform_other_seed"])

    u = a["uniform"]
    assert u.shape == tuple(shape) and u.dtype == np.float32
    assert u.min() >= -2.0 and u.max() < 3.0
    assert abs(u.mean() - 0.5) < 0.03 and abs(u.var() - 25 / 12) < 0.05
    hist = np.histogram(u, bins=10, range=(-2, 3))[0] / u.size
    assert np.all(np.abs(hist - 0.1) < 0.005)
    u01 = a["uniform_other_seed"]
    assert u01.min() >= 0 and u01.max() < 1 and abs(u01.mean() - 0.5) < 0.01

    z = a["normal"]
    assert abs(z.mean() - 1.5) < 0.03 and abs(z.std() - 2.0) < 0.03
    standard = (z - 1.5) / 2
    assert abs(np.mean(standard ** 3)) < 0.03 and abs(np.mean(standard ** 4) - 3) < 0.1  # skew 0, kurtosis 3
    assert abs(np.mean(np.abs(standard) < 1) - 0.6827) < 0.01

    bern = a["bernoulli"]
    assert set(np.unique(bern)) <= {0.0, 1.0} and abs(bern.mean() - 0.3) < 0.01

    cat = a["categorical_logits"]
    assert cat.shape == (2, 50000)
    for row, probs in zip(cat, ([0.1, 0.2, 0.3, 0.4], [0.7, 0.0, 0.2, 0.1])):
        freq = np.bincount(row.astype(np.int64), minlength=4) / row.size
        np.testing.assert_allclose(freq, probs, atol=0.01)
    assert not np.any(cat[1] == 1), "a class of probability ~0 is never drawn"
    freq = np.bincount(a["categorical_probs"][0].astype(np.int64), minlength=4) / 50000
    np.testing.assert_allclose(freq, [0.125, 0.375, 0.0, 0.5], atol=0.01)


# ----------------------------------------------------------------------------- quantization

def quantize_ref(x, scale, zp, dtype):
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale) + zp, info.min, info.max).astype(dtype)  # np.round: half to even


def test_quantize_dequantize(tmp_path):
    x = rand(3, 4, 5, scale=3.0)
    x[0, 0, :] = np.array([0.5, 1.5, 2.5, -0.5, -2.5], np.float32) * 0.25  # exact ties at scale 0.25
    x[0, 1, :] = [1e3, -1e3, 0, 40.0, -40.0]  # clipped
    scale_axis = np.array([0.25, 0.1, 0.05, 0.5], np.float32)
    zp_axis_u8 = np.array([128, 0, 3, 250], np.uint8)
    zp_axis_i8 = np.array([0, -5, 7, 100], np.int8)
    q_in = RNG.integers(-128, 128, size=(3, 4, 5)).astype(np.int8)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape), mb.TensorSpec(shape=q_in.shape, dtype=types.int8)],
                opset_version=ct.target.iOS18)
    def prog(x, q):
        q_t = mb.quantize(input=x, scale=0.25, zero_point=np.int8(3), output_dtype="int8", name="q_tensor_i8")
        q_a = mb.quantize(input=x, scale=scale_axis, zero_point=zp_axis_u8, axis=1, output_dtype="uint8", name="q_axis_u8")
        q_n = mb.quantize(input=x, scale=0.25, output_dtype="uint8", name="q_no_zp")
        return (
            mb.cast(x=q_t, dtype="int32", name="qt"),
            mb.cast(x=q_a, dtype="int32", name="qa"),
            mb.cast(x=q_n, dtype="int32", name="qn"),
            mb.dequantize(input=q, scale=scale_axis, zero_point=zp_axis_i8, axis=-2, name="dq_axis"),
            mb.dequantize(input=q, scale=np.float32(0.5), name="dq_tensor"),
            mb.dequantize(input=q_a, scale=scale_axis, zero_point=zp_axis_u8, axis=1, name="roundtrip"),
        )

    model = load(prog, tmp_path, expect_ops=["quantize", "dequantize"])
    out = model.predict({"x": x, "q": q_in})
    np.testing.assert_array_equal(out["qt"], quantize_ref(x, np.float32(0.25), 3, np.int8))
    s4, z4 = scale_axis.reshape(1, 4, 1), zp_axis_u8.reshape(1, 4, 1).astype(np.float32)
    qa = quantize_ref(x, s4, z4, np.uint8)
    np.testing.assert_array_equal(out["qa"], qa)
    np.testing.assert_array_equal(out["qn"], quantize_ref(x, np.float32(0.25), 0, np.uint8))
    assert list(out["qt"][0, 0]) == [3, 5, 5, 3, 1]  # 0.5 1.5 2.5 -0.5 -2.5 round half to even, + 3
    want = s4 * (q_in.astype(np.float32) - zp_axis_i8.reshape(1, 4, 1).astype(np.float32))
    np.testing.assert_array_equal(out["dq_axis"], want)
    np.testing.assert_array_equal(out["dq_tensor"], np.float32(0.5) * q_in.astype(np.float32))
    np.testing.assert_array_equal(out["roundtrip"], s4 * (qa.astype(np.float32) - z4))


def test_quantize_fp16(tmp_path):
    x = rand(2, 6)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape, dtype=types.fp16)], opset_version=ct.target.iOS18)
    def prog(x):
        q = mb.quantize(input=x, scale=np.float16(0.125), zero_point=np.uint8(10), output_dtype="uint8")
        return mb.dequantize(input=q, scale=np.float16(0.125), zero_point=np.uint8(10), name="y")

    out = load(prog, tmp_path, fp16=True, expect_ops=["quantize", "dequantize"]).predict({"x": x})
    xh = x.astype(np.float16).astype(np.float32)
    want = (quantize_ref(xh, np.float32(0.125), 10, np.uint8).astype(np.float32) - 10) * 0.125
    np.testing.assert_array_equal(out["y"], want)


# ----------------------------------------------------------------------------- classify

@pytest.mark.parametrize("labels", [[10, 20, 30, 7], ["cat", "dog", "bird", "fish"]])
def test_classify_labels_and_dict(tmp_path, labels):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.softmax(x=x, axis=-1)

    model = ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                       minimum_deployment_target=ct.target.iOS18, skip_model_load=True,
                       classifier_config=ct.ClassifierConfig(labels))
    path = str(tmp_path / "classifier.mlpackage")
    model.save(path)
    m = backend_check.load(path)
    for row in ([[0.1, 2.0, -1.0, 0.5]], [[3.0, 2.0, -1.0, 0.5]], [[0.0, 0.0, 0.0, 4.0]]):
        x = np.array(row, np.float32)
        out = m.predict({"x": x})
        probs = np.exp(x[0] - x[0].max())
        probs /= probs.sum()
        label = out["classLabel"]
        assert type(label) is type(labels[0]) and label == labels[int(np.argmax(probs))]
        d = out["classLabel_probs"]
        assert list(d) == labels and all(type(v) is float for v in d.values())
        np.testing.assert_allclose([d[k] for k in labels], probs, rtol=1e-6, atol=1e-7)
