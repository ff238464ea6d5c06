"""Seed inputs for the fuzz targets (fuzz/README.md), one folder per target under OUT.

Sources: every case of ../shared/corpus when it is present (COREMLRT_CORPUS overrides), and
always the models tests/python/fixtures.py generates, a neuralNetwork MLP converted here and the
detection, linked-model and classConfidenceThresholding specs made here, so a fresh clone has
seeds too. Files over 256 KiB are left out (they slow the fuzzer down without covering more of
the readers).

    python3 fuzz/make_seeds.py OUT
"""

import glob
import hashlib
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import fixtures  # noqa: E402

MAX_SEED = 256 << 10
SPEC = os.path.join("Data", "com.apple.CoreML", "model.mlmodel")
WEIGHTS = os.path.join("Data", "com.apple.CoreML", "weights", "weight.bin")


def packages():
    corpus = os.environ.get("COREMLRT_CORPUS", os.path.join(HERE, "..", "..", "shared", "corpus"))
    found = sorted(glob.glob(os.path.join(corpus, "*", "*.mlpackage")))
    if found:
        print(f"seeds from the corpus at {os.path.abspath(corpus)}: {len(found)} packages")
    else:
        print(f"no corpus at {os.path.abspath(corpus)}: seeds from generated models only")
    for name in fixtures.BUILDERS:
        found += glob.glob(os.path.join(fixtures.case_dir(name), "*.mlpackage"))
    return found


def neural_network_models(out_dir):
    """Serialized neuralNetwork specs: the corpus' .mlmodel cases and an MLP converted here."""
    import numpy as np
    import coremltools as ct
    import torch

    corpus = os.environ.get("COREMLRT_CORPUS", os.path.join(HERE, "..", "..", "shared", "corpus"))
    paths = sorted(glob.glob(os.path.join(corpus, "*", "*.mlmodel")))
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4), torch.nn.Softmax(-1))
    model = ct.convert(torch.jit.trace(net.eval(), torch.zeros(1, 16)), convert_to="neuralnetwork",
                       inputs=[ct.TensorType(name="x", shape=(1, 16), dtype=np.float32)])
    generated = os.path.join(out_dir, "mlp.mlmodel")
    model.save(generated)
    return paths + [generated]


def detection_and_classic_specs():
    """Serialized specs of the detection readers: a nonMaximumSuppression model (float32,
    thresholds as inputs; double with a fixed row count and int64 labels), a pipeline of a
    neuralNetwork detector and such a model, and a neuralNetwork NonMaximumSuppression layer;
    a pipeline with a linkedModel stage; a classConfidenceThresholding model; two
    itemSimilarityRecommender models."""
    import numpy as np
    import coremltools as ct
    import torch
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    import detection_helpers as dh

    specs = [dh.nms_spec(), dh.nms_spec(dtype="double", rows=(4, 4), labels=[3, 5, 7], threshold_inputs=None)]
    detector = ct.convert(torch.jit.trace(dh.Detector(), torch.zeros(dh.IMAGE)), convert_to="neuralnetwork",
                          inputs=[ct.TensorType(name="image", shape=dh.IMAGE, dtype=np.float32)],
                          outputs=[ct.TensorType(name="raw_confidence"), ct.TensorType(name="raw_coordinates")])
    specs.append(ct.utils.make_pipeline(detector, ct.models.MLModel(dh.nms_spec())).get_spec())
    builder = NeuralNetworkBuilder([("boxes", datatypes.Array(1, 8, 4)), ("scores", datatypes.Array(1, 8, 2))],
                                   [(name, None) for name in ("b", "s", "i", "n")], disable_rank5_shape_mapping=True)
    builder.add_nms("nms", ["boxes", "scores"], ["b", "s", "i", "n"], iou_threshold=0.4, score_threshold=0.1,
                    max_boxes=3, per_class_suppression=True)
    specs.append(builder.spec)
    # A pipeline whose first stage is a linkedModel (the file it names is not beside the seed).
    from coremltools.models import _interface_management as interface
    from coremltools.proto import Model_pb2
    pipeline, linked = Model_pb2.Model(), Model_pb2.Model()
    for spec, outputs in ((pipeline, [("h", datatypes.Array(3))]), (linked, [("h", datatypes.Array(3))])):
        spec.specificationVersion = 4
        interface.set_transform_interface_params(spec, [("x", datatypes.Array(3))], outputs)
    linked.linkedModel.linkedModelFile.linkedModelFileName.defaultValue = "stage.mlmodelc"
    linked.linkedModel.linkedModelFile.linkedModelSearchPath.defaultValue = "models:."
    pipeline.pipeline.models.add().CopyFrom(linked)
    specs.append(pipeline)
    # classConfidenceThresholding: confidences [3] in, [2, 3] out, a precision-recall curve per class.
    thresholding = Model_pb2.Model()
    thresholding.specificationVersion = 8
    interface.set_transform_interface_params(thresholding, [("c", datatypes.Array(3))], [("f", datatypes.Array(2, 3))])
    for _ in range(3):
        curve = thresholding.classConfidenceThresholding.precisionRecallCurves.add()
        for values in (curve.precisionValues, curve.precisionConfidenceThresholds, curve.recallValues,
                       curve.recallConfidenceThresholds):
            values.vector.extend([0.25, 0.5])
    specs.append(thresholding)
    specs += recommender_specs()
    return [spec.SerializeToString() for spec in specs]


def recommender_specs():
    """itemSimilarityRecommender: int64 ids with a dictionary input, the number of
    recommendations and both outputs; string ids with sequence inputs (items, restriction,
    exclusion) and the item list only."""
    from coremltools.proto import Model_pb2

    out = []
    for ids in ([11, 22, 33, 44], ["a", "b", "c", "d"]):
        spec = Model_pb2.Model()
        spec.specificationVersion = 3
        strings = isinstance(ids[0], str)
        r = spec.itemSimilarityRecommender
        for i, links in enumerate([[(1, 0.5), (2, 0.25)], [(0, 0.5)], [(3, 1.0)]]):
            entry = r.itemItemSimilarities.add(itemId=i, itemScoreAdjustment=0.25 * i)
            for k, s in links:
                entry.similarItemList.add(itemId=k, similarityScore=s)
        (r.itemStringIds if strings else r.itemInt64Ids).vector.extend(ids)

        def feature(features, name, kind):
            t = features.add(name=name).type
            if kind == "dictionary":
                (t.dictionaryType.stringKeyType if strings else t.dictionaryType.int64KeyType).SetInParent()
            elif kind == "sequence":
                (t.sequenceType.stringType if strings else t.sequenceType.int64Type).SetInParent()
                t.sequenceType.sizeRange.upperBound = -1
            else:
                t.int64Type.SetInParent()

        r.itemInputFeatureName = "items"
        r.recommendedItemListOutputFeatureName = "recommendations"
        feature(spec.description.output, "recommendations", "sequence")
        if strings:
            feature(spec.description.input, "items", "sequence")
            for field, name in (("itemRestrictionInputFeatureName", "only"), ("itemExclusionInputFeatureName", "not")):
                setattr(r, field, name)
                feature(spec.description.input, name, "sequence")
        else:
            feature(spec.description.input, "items", "dictionary")
            feature(spec.description.input, "k", "int64")
            r.numRecommendationsInputFeatureName = "k"
            r.recommendedItemScoreOutputFeatureName = "scores"
            feature(spec.description.output, "scores", "dictionary")
        out.append(spec)
    return out


def write(folder, data):
    if len(data) > MAX_SEED:
        return
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main(out):
    from coremltools.proto import Model_pb2

    for package in packages():
        manifest = read(os.path.join(package, "Manifest.json"))
        spec = read(os.path.join(package, SPEC))
        write(os.path.join(out, "package"), struct.pack("<H", len(manifest)) + manifest + spec)
        write(os.path.join(out, "program"), spec)
        if os.path.isfile(os.path.join(package, WEIGHTS)):
            write(os.path.join(out, "blob"), read(os.path.join(package, WEIGHTS)))
    for path in neural_network_models(out):
        model = Model_pb2.Model()
        model.ParseFromString(read(path))
        if model.WhichOneof("Type") == "neuralNetwork":
            write(os.path.join(out, "neural_network"), model.neuralNetwork.SerializeToString())
            write(os.path.join(out, "program"), read(path))
    for data in detection_and_classic_specs():
        write(os.path.join(out, "program"), data)
    rng = __import__("random").Random(7)
    for rows in (1, 3, 8):
        indices = struct.pack("<4i", *(rng.randrange(rows) for _ in range(4)))
        floats = struct.pack(f"<{rows * 16}f", *(rng.uniform(-4, 4) for _ in range(rows * 16)))
        write(os.path.join(out, "predict"), bytes([rows]) + indices + floats)
    for target in ("package", "program", "blob", "neural_network", "predict"):
        print(f"{target}: {len(os.listdir(os.path.join(out, target)))} seeds")


if __name__ == "__main__":
    main(sys.argv[1])
