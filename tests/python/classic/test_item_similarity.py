"""itemSimilarityRecommender (src/format/classic/recommender_reader.cc, src/ops/recommender.cc;
docs/design/recommender.md): models built with coremltools' protobuf messages (coremltools has
no builder for this type), each prediction compared with the small reference of the algorithm
written below, not with the engine's own output."""

import numpy as np
import pytest

import coremlrt

pytest.importorskip("coremltools")

from coremltools.models.utils import save_spec  # noqa: E402
from coremltools.proto import FeatureTypes_pb2, Model_pb2  # noqa: E402

N = 7
# reference item -> (its score adjustment, [(connected item, similarity)])
SIMILARITIES = {
    0: (0.5, [(1, 0.9), (2, 0.3), (4, -0.2)]),
    1: (0.0, [(0, 0.9), (3, 0.7)]),
    2: (1.25, [(0, 0.3), (5, 0.45), (6, 0.1)]),
    4: (-0.5, [(3, 0.6), (6, 0.8)]),
    6: (0.0, [(2, 0.25)]),
}
INT64_IDS = [101, -7, 5000000000, 42, 3, 77, 9]
STRING_IDS = ["apple", "pear", "fig", "kiwi", "plum", "lime", "date"]


def reference(ids, observed, count=None, restriction=None, exclusion=None, sims=SIMILARITIES):
    """(recommended ids best first, {id: score}) for `observed` {item index: value}; restriction
    and exclusion are sets of item indices."""
    n = len(ids)
    score = [0.0] * n
    for i in sorted(observed):
        shift, links = sims.get(i, (0.0, []))
        for k, s in links:
            score[k] += s * (observed[i] - shift)
    excluded = set(observed) if exclusion is None else set(exclusion)
    candidates = [j for j in range(n) if j not in excluded and (restriction is None or j in restriction)]
    candidates.sort(key=lambda j: (-score[j], j))
    if count is not None:
        candidates = candidates[:count]
    return [ids[j] for j in candidates], {ids[j]: score[j] for j in candidates}


def _set(feature, name, kind, element):
    feature.name = name
    t = feature.type
    if kind == "dict":
        (t.dictionaryType.stringKeyType if element == "string" else t.dictionaryType.int64KeyType).SetInParent()
    elif kind == "seq":
        (t.sequenceType.stringType if element == "string" else t.sequenceType.int64Type).SetInParent()
    elif kind == "array":
        t.multiArrayType.dataType = FeatureTypes_pb2.ArrayFeatureType.DOUBLE
        t.multiArrayType.shape.append(3)
        t.multiArrayType.shapeRange.sizeRanges.add(lowerBound=0, upperBound=-1)
    elif kind == "int64":
        t.int64Type.SetInParent()
    else:
        raise ValueError(kind)


def make_spec(id_kind="int64", items="dict", count=False, restriction=None, exclusion=None,
              outputs=("list", "score"), sims=SIMILARITIES, n=N):
    spec = Model_pb2.Model()
    spec.specificationVersion = 3
    element = "string" if id_kind == "string" else "int64"
    r = spec.itemSimilarityRecommender
    for i, (shift, links) in sims.items():
        entry = r.itemItemSimilarities.add(itemId=i, itemScoreAdjustment=shift)
        for k, s in links:
            entry.similarItemList.add(itemId=k, similarityScore=s)
    if id_kind == "int64":
        r.itemInt64Ids.vector.extend(INT64_IDS[:n])
    elif id_kind == "string":
        r.itemStringIds.vector.extend(STRING_IDS[:n])
    _set(spec.description.input.add(), "items", items, element)
    r.itemInputFeatureName = "items"
    if count:
        _set(spec.description.input.add(), "k", "int64", element)
        r.numRecommendationsInputFeatureName = "k"
    if restriction:
        _set(spec.description.input.add(), "only", restriction, element)
        r.itemRestrictionInputFeatureName = "only"
    if exclusion:
        _set(spec.description.input.add(), "not", exclusion, element)
        r.itemExclusionInputFeatureName = "not"
    if "list" in outputs:
        _set(spec.description.output.add(), "recommendations", "seq", element)
        r.recommendedItemListOutputFeatureName = "recommendations"
    if "score" in outputs:
        _set(spec.description.output.add(), "scores", "dict", element)
        r.recommendedItemScoreOutputFeatureName = "scores"
    return spec


def load(tmp_path, spec, name="rec"):
    path = str(tmp_path / f"{name}.mlmodel")
    save_spec(spec, path)
    return coremlrt.MLModel(path)


def ids_of(id_kind):
    return {"int64": INT64_IDS, "string": STRING_IDS, "index": list(range(N))}[id_kind]


def check(model, ids, data, observed, **kwargs):
    want_list, want_scores = reference(ids, observed, **kwargs)
    got = model.predict(data)
    if "recommendations" in got:
        assert got["recommendations"] == want_list
    if "scores" in got:
        assert got["scores"].keys() == want_scores.keys()
        for key, value in want_scores.items():
            assert got["scores"][key] == pytest.approx(value, rel=1e-12, abs=1e-12)
    return got


@pytest.mark.parametrize("id_kind", ["int64", "string", "index"])
def test_dictionary_input(tmp_path, id_kind):
    ids = ids_of(id_kind)
    model = load(tmp_path, make_spec(id_kind))
    assert [p["op_type"] for p in model.placements()] == ["item_similarity_recommender"]
    for observed in [{0: 3.0}, {0: 0.0, 2: 4.5}, {1: 2.0, 4: -1.0, 6: 0.5}, {}, {j: 1.0 for j in range(N)}]:
        got = check(model, ids, {"items": {ids[i]: v for i, v in observed.items()}}, observed)
        assert isinstance(got["recommendations"], list)
    # an item rated 0 is a rated item: it is excluded and its links count (0 - shift)
    got = model.predict({"items": {ids[2]: 0.0}})
    assert ids[2] not in got["recommendations"] and got["scores"][ids[5]] == pytest.approx(0.45 * -1.25)
    # ids the model does not know are ignored
    unknown = "banana" if id_kind == "string" else 123456
    check(model, ids, {"items": {unknown: 5.0, ids[1]: 2.0}}, {1: 2.0})


@pytest.mark.parametrize("id_kind", ["int64", "string"])
def test_optional_restriction_and_exclusion_may_be_left_out(tmp_path, id_kind):
    """As recommender exporters declare them: the restriction and exclusion sequences optional.
    Left out, every item is a candidate and the user's items are excluded; an empty exclusion
    list given excludes nothing."""
    ids = ids_of(id_kind)
    spec = make_spec(id_kind, items="dict", count=True, restriction="seq", exclusion="seq")
    for feature in spec.description.input:
        if feature.name in ("only", "not"):
            feature.type.isOptional = True
    model = load(tmp_path, spec)
    observed = {0: 2.0, 4: 1.0}
    data = {"items": {ids[i]: v for i, v in observed.items()}, "k": 5}
    check(model, ids, data, observed, count=5)
    check(model, ids, dict(data, only=[ids[3], ids[0], ids[6]]), observed, count=5, restriction={0, 3, 6})
    check(model, ids, dict(data, **{"not": []}), observed, count=5, exclusion=set())
    check(model, ids, dict(data, **{"not": [ids[3]]}), observed, count=5, exclusion={3})
    # k left out recommends every candidate, whether it is declared required (as here) or
    # optional: the count's role gives it that default, as a detector's NMS thresholds have theirs.
    check(model, ids, {"items": data["items"]}, observed)
    k = next(f for f in model._function["inputs"] if f["name"] == "k")
    assert k["optional"] and k["default_value"] == 2.0 ** 53
    for feature in spec.description.input:
        if feature.name == "k":
            feature.type.isOptional = True
    model = load(tmp_path, spec, name="optional_k")
    check(model, ids, {"items": data["items"]}, observed)
    check(model, ids, {"items": data["items"], "k": 2}, observed, count=2)
    with pytest.raises(coremlrt.Error, match="missing input 'items'"):
        model.predict({"k": 2})  # the item input has no such role: still required


@pytest.mark.parametrize("id_kind", ["int64", "string"])
def test_sequence_input_with_count_restriction_exclusion(tmp_path, id_kind):
    ids = ids_of(id_kind)
    model = load(tmp_path, make_spec(id_kind, items="seq", count=True, restriction="seq", exclusion="seq"))
    cases = [
        ([0], 3, [1, 2, 3, 4, 5, 6], []),
        ([0, 4], 2, [0, 3, 6], [0]),      # exclusion replaces the default: item 0 may come back
        ([1, 2], 10, list(range(N)), [3, 5]),
        ([2, 2, 6], 0, list(range(N)), []),  # a repeated item counts once
        ([], 4, [], []),
    ]
    for items, k, only, exclude in cases:
        data = {"items": [ids[i] for i in items], "k": k, "only": [ids[j] for j in only],
                "not": [ids[j] for j in exclude]}
        check(model, ids, data, {i: 1.0 for i in items}, count=k, restriction=set(only), exclusion=set(exclude))
    # a numpy array is a sequence too (int64 ids), unknown ids are dropped
    if id_kind == "int64":
        data = {"items": np.array([INT64_IDS[0], 999]), "k": 5, "only": np.array(INT64_IDS), "not": []}
        check(model, ids, data, {0: 1.0}, count=5, restriction=set(range(N)), exclusion=set())
    with pytest.raises(coremlrt.Error, match="number of recommendations 'k' is -1"):
        model.predict({"items": [ids[0]], "k": -1, "only": [], "not": []})
    with pytest.raises(coremlrt.Error, match="'items'"):
        model.predict({"items": [1.5] if id_kind == "int64" else [1], "k": 1, "only": [], "not": []})
    with pytest.raises(coremlrt.Error, match="'items'"):
        model.predict({"items": "abc", "k": 1, "only": [], "not": []})


@pytest.mark.parametrize("id_kind", ["int64", "index"])
def test_multiarray_inputs(tmp_path, id_kind):
    ids = ids_of(id_kind)
    model = load(tmp_path, make_spec(id_kind, items="array", restriction="array", exclusion="array"))
    for items, only, exclude in [([0, 4], [1, 2, 3, 5], [5]), ([2], [0, 1, 3, 5, 6], [])]:
        data = {"items": np.array([ids[i] for i in items], np.float64),
                "only": np.array([ids[j] for j in only], np.float64),
                "not": np.array([ids[j] for j in exclude], np.float64)}
        check(model, ids, data, {i: 1.0 for i in items}, restriction=set(only), exclusion=set(exclude))


def test_only_the_list_or_only_the_scores(tmp_path):
    list_only = load(tmp_path, make_spec(outputs=("list",)), "list_only")
    got = check(list_only, INT64_IDS, {"items": {INT64_IDS[4]: 2.0}}, {4: 2.0})
    assert set(got) == {"recommendations"}
    scores_only = load(tmp_path, make_spec("string", items="seq", count=True, outputs=("score",)), "scores_only")
    got = check(scores_only, STRING_IDS, {"items": ["apple", "plum"], "k": 2}, {0: 1.0, 4: 1.0}, count=2)
    assert set(got) == {"scores"} and len(got["scores"]) == 2


def test_description_shows_sequences(tmp_path):
    model = load(tmp_path, make_spec("string", items="seq"))
    text = repr(model)
    assert "sequence of string" in text
    assert model.input_description is not None


def test_coremltools_stand_in(tmp_path):
    import coremltools as ct
    from coremlrt import coremltools_backend as backend

    path = str(tmp_path / "standin.mlmodel")
    save_spec(make_spec("int64", items="seq", count=True), path)
    backend.enable()
    try:
        model = ct.models.MLModel(path)
        got = model.predict({"items": [INT64_IDS[1]], "k": 3})
    finally:
        backend.disable()
    want_list, want_scores = reference(INT64_IDS, {1: 1.0}, count=3)
    assert list(got["recommendations"]) == want_list
    assert got["scores"] == pytest.approx(want_scores)


def _damaged(tmp_path, spec, match):
    path = str(tmp_path / "damaged.mlmodel")
    save_spec(spec, path)
    with pytest.raises(coremlrt.Error, match=match) as e:
        coremlrt.MLModel(path)
    assert "itemSimilarityRecommender" in str(e.value)


def test_damaged_models_are_refused(tmp_path):
    spec = make_spec()
    spec.itemSimilarityRecommender.itemStringIds.vector.extend(STRING_IDS)
    _damaged(tmp_path, spec, "both int64 and string item ids")
    spec = make_spec()
    spec.itemSimilarityRecommender.itemInt64Ids.vector[3] = INT64_IDS[0]
    _damaged(tmp_path, spec, "listed twice")
    _damaged(tmp_path, make_spec(n=5), "out of range")
    spec = make_spec()
    spec.itemSimilarityRecommender.itemItemSimilarities.add(itemId=0)
    _damaged(tmp_path, spec, "two similarity lists")
    spec = make_spec()
    spec.itemSimilarityRecommender.recommendedItemScoreOutputFeatureName = "missing"
    _damaged(tmp_path, spec, "output 'scores' is neither")
    del spec.description.output[1]
    _damaged(tmp_path, spec, "'missing' is not an output")
    spec = make_spec()
    spec.itemSimilarityRecommender.itemInputFeatureName = "nowhere"
    _damaged(tmp_path, spec, "'nowhere' is not an input")
    spec = make_spec(outputs=())
    _damaged(tmp_path, spec, "neither")
    spec = make_spec("string")  # a sequence of int64 where the ids are strings
    spec.description.output[0].type.sequenceType.int64Type.SetInParent()
    _damaged(tmp_path, spec, "string values")
    _damaged(tmp_path, make_spec("string", items="array"), "multi-array")
    spec = make_spec(sims={0: (0.0, [(1 << 30, 1.0)])}, id_kind="index")
    _damaged(tmp_path, spec, "more than")


def test_recommender_as_a_pipeline_stage(tmp_path):
    stage = make_spec("string", items="seq", count=True)
    pipeline = Model_pb2.Model()
    pipeline.specificationVersion = 3
    pipeline.description.CopyFrom(stage.description)
    pipeline.pipeline.models.add().CopyFrom(stage)
    model = load(tmp_path, pipeline, "pipeline")
    check(model, STRING_IDS, {"items": ["fig", "plum"], "k": 4}, {2: 1.0, 4: 1.0}, count=4)
