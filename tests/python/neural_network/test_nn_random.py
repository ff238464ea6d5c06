"""neuralNetwork random layers (randomNormal/Uniform/Bernoulli in their Static, Like and Dynamic
forms) built with coremltools' NeuralNetworkBuilder and run by coremlrt. Core ML's generator is
not documented, so values are checked by their distribution (moments with bounds of six
standard errors, so a correct sampler fails about once in 10^8 runs), by the seed's meaning
(a seed >= 0 repeats its values at every prediction, -1 does not) and by exact edge cases
(bernoulli with prob 0 and 1, uniform inside [minVal, maxVal))."""


import numpy as np
import pytest

import coremlrt

pytest.importorskip("coremltools")

from nn_helpers import build_and_load  # noqa: E402

SHAPE = (4, 250, 200)  # 200,000 samples
N = int(np.prod(SHAPE))
SIGMAS = 6.0


def load(tmp_path, add_layer, inputs={"x": SHAPE}):
    return build_and_load(tmp_path, inputs, add_layer)


def feeds():
    return {"x": np.zeros(SHAPE, np.float32)}


# Each form of each distribution: (builder method, how the shape is given).
FORMS = ["static", "like", "dynamic"]


def add_random(builder, kind, form, **params):
    method = getattr(builder, f"add_random_{kind}_{form}")
    if form == "static":
        method("rand", "out", output_shape=list(SHAPE), **params)
    elif form == "like":
        method("rand", "x", "out", **params)
    else:
        method("rand", ["shape"], "out", **params)


def model_for(tmp_path, kind, form, **params):
    inputs = {"shape": (len(SHAPE),)} if form == "dynamic" else {"x": SHAPE}
    return load(tmp_path, lambda b: add_random(b, kind, form, **params), inputs)


def feeds_for(form):
    return {"shape": np.array(SHAPE, np.float32)} if form == "dynamic" else feeds()


def draw(model, form):
    out = np.asarray(model.predict(feeds_for(form))["out"])
    assert out.shape == SHAPE and out.dtype == np.float32
    return out.astype(np.float64)


@pytest.mark.parametrize("form", FORMS)
def test_normal_moments(tmp_path, form):
    mean, std = 1.5, 2.0
    out = draw(model_for(tmp_path, "normal", form, mean=mean, stddev=std, seed=7), form)
    assert abs(out.mean() - mean) < SIGMAS * std / np.sqrt(N)
    # The sample variance's standard error is sigma^2 * sqrt(2 / (N - 1)) for a normal.
    assert abs(out.var(ddof=1) - std**2) < SIGMAS * std**2 * np.sqrt(2 / (N - 1))
    p = 0.682689492137  # P(|z| < 1)
    assert abs(np.mean(np.abs(out - mean) < std) - p) < SIGMAS * np.sqrt(p * (1 - p) / N)


@pytest.mark.parametrize("form", FORMS)
def test_uniform_range_and_moments(tmp_path, form):
    low, high = -3.0, 5.0
    out = draw(model_for(tmp_path, "uniform", form, minval=low, maxval=high, seed=11), form)
    assert out.min() >= low and out.max() < high
    width = high - low
    assert abs(out.mean() - (low + high) / 2) < SIGMAS * width / np.sqrt(12 * N)
    # Var of (u - mean)^2 for u ~ U: width^4 / 180.
    assert abs(out.var(ddof=1) - width**2 / 12) < SIGMAS * width**2 / np.sqrt(180 * N)
    # Each eighth of the interval holds an eighth of the samples.
    counts = np.histogram(out, bins=8, range=(low, high))[0] / N
    assert np.all(np.abs(counts - 1 / 8) < SIGMAS * np.sqrt((1 / 8) * (7 / 8) / N))


@pytest.mark.parametrize("form", FORMS)
def test_bernoulli_rate(tmp_path, form):
    p = 0.3
    out = draw(model_for(tmp_path, "bernoulli", form, prob=p, seed=3), form)
    assert set(np.unique(out)) <= {0.0, 1.0}
    assert abs(out.mean() - p) < SIGMAS * np.sqrt(p * (1 - p) / N)


@pytest.mark.parametrize("prob", [0.0, 1.0])
def test_bernoulli_certain_outcomes(tmp_path, prob):
    out = draw(model_for(tmp_path, "bernoulli", "like", prob=prob, seed=-1), "like")
    np.testing.assert_array_equal(out, np.full(SHAPE, prob))


@pytest.mark.parametrize("kind,params", [("normal", {"mean": 0.0, "stddev": 1.0}), ("uniform", {}),
                                         ("bernoulli", {"prob": 0.5})])
def test_seed_repeats_values_and_unseeded_does_not(tmp_path, kind, params):
    def model(folder, seed):
        (tmp_path / folder).mkdir()
        return model_for(tmp_path / folder, kind, "static", seed=seed, **params)

    seeded = model("seeded", 42)
    first = draw(seeded, "static")
    np.testing.assert_array_equal(first, draw(seeded, "static"))
    # Another model with the same seed draws the same values; another seed does not.
    np.testing.assert_array_equal(first, draw(model("same_seed", 42), "static"))
    assert np.mean(first != draw(model("other_seed", 43), "static")) > 0.4
    unseeded = model("unseeded", -1)
    assert np.mean(draw(unseeded, "static") != draw(unseeded, "static")) > 0.4


def test_dynamic_shape_follows_the_input(tmp_path):
    model = model_for(tmp_path, "uniform", "dynamic", seed=1)
    for shape in [(2, 3, 5), (1, 1, 7)]:
        out = np.asarray(model.predict({"shape": np.array(shape, np.float32)})["out"])
        assert out.shape == shape


def test_like_shape_follows_the_input(tmp_path):
    builder_inputs = {"x": (2, 3)}
    model = load(tmp_path, lambda b: b.add_random_normal_like("rand", "x", "out", mean=0.0, stddev=1.0, seed=5),
                 builder_inputs)
    assert np.asarray(model.predict({"x": np.ones((2, 3), np.float32)})["out"]).shape == (2, 3)


@pytest.mark.parametrize("kind,params,reason", [
    ("normal", {"mean": 0.0, "stddev": -1.0}, "stdDev"),
    ("uniform", {"minval": 2.0, "maxval": 1.0}, "maxVal"),
    ("bernoulli", {"prob": 1.5}, "prob"),
])
def test_invalid_parameters_are_refused(tmp_path, kind, params, reason):
    with pytest.raises(Exception, match=reason):
        model_for(tmp_path, kind, "static", seed=1, **params)
