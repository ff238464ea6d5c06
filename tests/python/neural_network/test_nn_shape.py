"""neuralNetwork data-movement layers built with coremltools' NeuralNetworkBuilder, run by
coremlrt and compared with numpy: the legacy layers on [Seq, Batch, C, H, W] blobs (reshape,
flatten, permute, concat, split, sequenceRepeat, slice, loadConstant) and the rank-N layers
of the exact-rank layout."""

import os
import warnings

import numpy as np
import pytest

import coremlrt

ct = pytest.importorskip("coremltools")

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: E402
from nn_helpers import save_and_load  # noqa: E402

rng = np.random.default_rng(0)
LAYOUTS = ["rank5", "exact"]


def make_builder(inputs, outputs=("out",), exact=True):
    """`inputs`: {name: shape}. In the rank5 layout shapes are [C] or [C, H, W] arrays."""
    return NeuralNetworkBuilder([(n, datatypes.Array(*s)) for n, s in inputs.items()], [(o, None) for o in outputs],
                                disable_rank5_shape_mapping=exact)


def predict(tmp_path, builder, feeds):
    return save_and_load(tmp_path, builder).predict(feeds)


def check(actual, expected):
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_array_equal(actual, expected.astype(actual.dtype))


def legacy_input(layout, shape):
    """A [C, H, W] image: the rank5 layout's input, or the exact layout's [1, 1, C, H, W] blob."""
    return tuple(shape) if layout == "rank5" else (1, 1, *shape)


def legacy_output(layout, out):
    out = np.asarray(out)
    if layout == "exact":
        assert out.shape[:2] == (1, 1)
        return out[0, 0]
    return out


# ---- legacy layers ---------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["CHANNEL_FIRST", "CHANNEL_LAST"])
def test_reshape(tmp_path, layout, mode):
    x = rng.standard_normal((4, 3, 2)).astype(np.float32)
    b = make_builder({"data": legacy_input(layout, x.shape)}, exact=layout == "exact")
    b.add_reshape("r", "data", "out", target_shape=(2, 6, 2), mode=0 if mode == "CHANNEL_FIRST" else 1)
    feeds = {"data": x if layout == "rank5" else x[None, None]}
    got = legacy_output(layout, predict(tmp_path, b, feeds)["out"])
    if mode == "CHANNEL_FIRST":
        expected = x.reshape(2, 6, 2)
    else:  # read as [H, W, C], reshape to [H', W', C'], move C' in front
        expected = x.transpose(1, 2, 0).reshape(6, 2, 2).transpose(2, 0, 1)
    check(got, expected)


@pytest.mark.parametrize("mode", ["CHANNEL_FIRST", "CHANNEL_LAST"])
def test_reshape_with_sequence_axis(tmp_path, mode):
    x = rng.standard_normal((2, 1, 3, 2, 2)).astype(np.float32)
    b = make_builder({"data": x.shape})
    b.add_reshape("r", "data", "out", target_shape=(4, 3, 1, 2), mode=0 if mode == "CHANNEL_FIRST" else 1)
    got = predict(tmp_path, b, {"data": x})["out"]
    if mode == "CHANNEL_FIRST":
        expected = x.reshape(4, 1, 3, 1, 2)
    else:
        expected = x.transpose(0, 1, 3, 4, 2).reshape(4, 1, 1, 2, 3).transpose(0, 1, 4, 2, 3)
    check(got, expected)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["CHANNEL_FIRST", "CHANNEL_LAST"])
def test_flatten(tmp_path, layout, mode):
    x = rng.standard_normal((3, 2, 4)).astype(np.float32)
    b = make_builder({"data": legacy_input(layout, x.shape)}, exact=layout == "exact")
    b.add_flatten("f", mode=0 if mode == "CHANNEL_FIRST" else 1, input_name="data", output_name="out")
    feeds = {"data": x if layout == "rank5" else x[None, None]}
    got = legacy_output(layout, predict(tmp_path, b, feeds)["out"])
    flat = x.reshape(-1) if mode == "CHANNEL_FIRST" else x.transpose(1, 2, 0).reshape(-1)
    check(got, flat.reshape(-1, 1, 1))


@pytest.mark.parametrize("dim", [(0, 3, 1, 2), (0, 2, 3, 1), (0, 1, 2, 3)])
def test_permute_image_axes(tmp_path, dim):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = make_builder({"data": x.shape}, exact=False)
    b.add_permute("p", dim=dim, input_name="data", output_name="out")
    got = predict(tmp_path, b, {"data": x})["out"]
    # (Seq, C, H, W) axes 1-3 are the image's 0-2.
    check(got, x.transpose([d - 1 for d in dim[1:]]))


def test_permute_sequence_axis(tmp_path):
    x = rng.standard_normal((2, 1, 3, 4, 5)).astype(np.float32)  # [Seq, B, C, H, W]
    b = make_builder({"data": x.shape})
    b.add_permute("p", dim=(3, 1, 2, 0), input_name="data", output_name="out")
    check(predict(tmp_path, b, {"data": x})["out"], x.transpose(4, 1, 2, 3, 0))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_channel_concat_and_split(tmp_path, layout):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    c = rng.standard_normal((4, 3, 4)).astype(np.float32)
    exact = layout == "exact"
    b = make_builder({"a": legacy_input(layout, a.shape), "c": legacy_input(layout, c.shape)},
                     outputs=("out", "s0", "s1", "s2"), exact=exact)
    b.add_elementwise("cat", ["a", "c"], "out", mode="CONCAT")
    b.add_split("split", "out", ["s0", "s1", "s2"])
    feeds = {"a": a, "c": c} if not exact else {"a": a[None, None], "c": c[None, None]}
    got = predict(tmp_path, b, feeds)
    joined = np.concatenate([a, c], axis=0)
    check(legacy_output(layout, got["out"]), joined)
    for i in range(3):
        check(legacy_output(layout, got[f"s{i}"]), joined[2 * i:2 * i + 2])


def test_sequence_concat_and_repeat(tmp_path):
    a = rng.standard_normal((1, 1, 2, 3, 1)).astype(np.float32)
    c = rng.standard_normal((2, 1, 2, 3, 1)).astype(np.float32)
    b = make_builder({"a": a.shape, "c": c.shape}, outputs=("out", "rep"))
    b.add_elementwise("cat", ["a", "c"], "out", mode="SEQUENCE_CONCAT")
    b.add_sequence_repeat("repeat", 3, "out", "rep")
    got = predict(tmp_path, b, {"a": a, "c": c})
    joined = np.concatenate([a, c], axis=0)
    check(got["out"], joined)
    check(got["rep"], np.tile(joined, (3, 1, 1, 1, 1)))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("axis,start,end,stride", [
    ("channel", 1, 5, 2), ("height", 0, -1, 1), ("width", -4, 100, 3), ("width", 2, 1, 1),
])
def test_slice(tmp_path, layout, axis, start, end, stride):
    x = rng.standard_normal((6, 4, 7)).astype(np.float32)
    b = make_builder({"data": legacy_input(layout, x.shape)}, exact=layout == "exact")
    b.add_slice("s", "data", "out", axis=axis, start_index=0, end_index=end, stride=stride)
    b.spec.neuralNetwork.layers[-1].slice.startIndex = start  # the builder takes no negative start
    feeds = {"data": x if layout == "rank5" else x[None, None]}
    got = legacy_output(layout, predict(tmp_path, b, feeds)["out"])
    index = [slice(None)] * 3
    index[{"channel": 0, "height": 1, "width": 2}[axis]] = slice(start, end, stride)
    check(got, x[tuple(index)])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_load_constant_feeds_a_layer(tmp_path, layout):
    value = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x = rng.standard_normal((1, 3, 4)).astype(np.float32)
    b = make_builder({"data": legacy_input(layout, x.shape)}, exact=layout == "exact")
    b.add_load_constant("k", "const", value, shape=list(value.shape))
    b.add_elementwise("cat", ["data", "const"], "out", mode="CONCAT")
    feeds = {"data": x if layout == "rank5" else x[None, None]}
    got = legacy_output(layout, predict(tmp_path, b, feeds)["out"])
    check(got, np.concatenate([x, value], axis=0))


def test_legacy_reshape_refuses_a_size_mismatch(tmp_path):
    b = make_builder({"data": (4, 3, 2)}, exact=False)
    b.add_reshape("r", "data", "out", target_shape=(5, 1, 1), mode=0)
    with pytest.raises(coremlrt.Error, match=r"reshape.*does not hold"):
        predict(tmp_path, b, {"data": np.zeros((4, 3, 2), np.float32)})


# ---- rank-N layers (exact-rank layout) -------------------------------------------------------


def run_nd(tmp_path, inputs, outputs, add_layers):
    """Builds an exact-layout network over `inputs` ({name: array}) and returns `outputs`."""
    b = make_builder({n: v.shape for n, v in inputs.items()}, outputs=outputs)
    add_layers(b)
    return predict(tmp_path, b, inputs)


def test_reshape_static_like_dynamic_and_flatten_to_2d(tmp_path):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    like = np.zeros((4, 6), np.float32)
    shape = np.array([6, 2, 2], np.float32)

    def layers(b):
        b.add_reshape_static("rs", "x", "static", output_shape=[4, -1])
        b.add_reshape_like("rl", ["x", "like"], "like_out")
        b.add_reshape_dynamic("rd", ["x", "shape"], "dynamic")
        b.add_flatten_to_2d("f2", "x", "flat", axis=2)
        b.add_flatten_to_2d("f0", "x", "flat0", axis=0)

    got = run_nd(tmp_path, {"x": x, "like": like, "shape": shape}, ("static", "like_out", "dynamic", "flat", "flat0"), layers)
    check(got["static"], x.reshape(4, 6))
    check(got["like_out"], x.reshape(4, 6))
    check(got["dynamic"], x.reshape(6, 2, 2))
    check(got["flat"], x.reshape(6, 4))
    check(got["flat0"], x.reshape(1, 24))


def test_squeeze_expand_dims_transpose(tmp_path):
    x = rng.standard_normal((1, 3, 1, 2)).astype(np.float32)
    one = np.array([5.0], np.float32)

    def layers(b):
        b.add_squeeze("s", "x", "squeezed", axes=[0, -2])
        b.add_squeeze("sa", "x", "squeezed_all", squeeze_all=True)
        b.add_squeeze("s1", "one", "still_rank1", axes=[0])
        b.add_expand_dims("e", "x", "expanded", axes=[0, -1])
        b.add_transpose("t", [3, 1, 0, 2], "x", "transposed")

    got = run_nd(tmp_path, {"x": x, "one": one},
                 ("squeezed", "squeezed_all", "still_rank1", "expanded", "transposed"), layers)
    check(got["squeezed"], x.reshape(3, 2))
    check(got["squeezed_all"], x.reshape(3, 2))
    check(got["still_rank1"], one)
    check(got["expanded"], x.reshape(1, 1, 3, 1, 2, 1))
    check(got["transposed"], x.transpose(3, 1, 0, 2))


@pytest.mark.parametrize("axis", [0, 1, 3, -1, -4])
def test_stack(tmp_path, axis):
    a, c, d = (rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(3))
    got = run_nd(tmp_path, {"a": a, "c": c, "d": d}, ("out",),
                 lambda b: b.add_stack("stack", ["a", "c", "d"], "out", axis=axis))
    check(got["out"], np.stack([a, c, d], axis=axis))


def test_concat_nd_and_split_nd(tmp_path):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    c = rng.standard_normal((2, 3, 4)).astype(np.float32)

    def layers(b):
        b.add_concat_nd("cat", ["a", "c"], "cat", axis=-2)
        b.add_concat_nd("mix", ["a", "c"], "mix", axis=1, interleave=True)
        b.add_split_nd("sizes", "a", ["p0", "p1"], axis=-1, split_sizes=[1, 3])
        b.add_split_nd("even", "a", ["q0", "q1"], axis=0, num_splits=2)

    got = run_nd(tmp_path, {"a": a, "c": c}, ("cat", "mix", "p0", "p1", "q0", "q1"), layers)
    check(got["cat"], np.concatenate([a, c], axis=1))
    mixed = np.stack([a, c], axis=2).reshape(2, 6, 4)  # rows of a and c alternate
    check(got["mix"], mixed)
    check(got["p0"], a[:, :, :1])
    check(got["p1"], a[:, :, 1:])
    check(got["q0"], a[:1])
    check(got["q1"], a[1:])


@pytest.mark.parametrize("size,parts", [(7, 3), (11, 3), (5, 2), (9, 3)])
def test_split_nd_into_unequal_parts_as_array_split(tmp_path, size, parts):
    # numSplits that does not divide the axis: the first size % numSplits parts are one longer,
    # as numpy's array_split makes them (coremltools' test_split_nd expects this of Core ML).
    a = rng.standard_normal((2, size)).astype(np.float32)
    names = tuple(f"p{i}" for i in range(parts))
    got = run_nd(tmp_path, {"a": a}, names, lambda b: b.add_split_nd("split", "a", list(names), axis=-1, num_splits=parts))
    for name, want in zip(names, np.array_split(a, parts, axis=-1)):
        check(got[name], want)


def test_slice_static_and_dynamic(tmp_path):
    x = rng.standard_normal((5, 5, 5)).astype(np.float32)
    begin = np.array([1, 2, 3], np.float32)

    def layers(b):
        # The schema's own examples: x[:3:2, 2::2, ::2] and x[:3:2, 2, ::2].
        b.add_slice_static("s", "x", "plain", begin_ids=[1, 2, 3], end_ids=[3, -3, 2], strides=[2, 2, 2],
                           begin_masks=[True, False, True], end_masks=[False, True, True])
        b.add_slice_static("sq", "x", "squeezed", begin_ids=[1, 2, 3], end_ids=[3, -3, 2], strides=[2, 2, 2],
                           begin_masks=[True, False, True], end_masks=[False, True, True],
                           squeeze_masks=[False, True, False])
        b.add_slice_static("neg", "x", "backwards", begin_ids=[-1, 0, 4], end_ids=[0, 5, 0], strides=[-2, 1, -1],
                           begin_masks=[False, False, False], end_masks=[True, False, False])
        b.add_slice_dynamic("d", ["x", "begin"], "dynamic", end_ids=[5, 4, 5], strides=[1, 1, 2],
                            begin_masks=[False, False, False], end_masks=[False, False, False])

    got = run_nd(tmp_path, {"x": x, "begin": begin}, ("plain", "squeezed", "backwards", "dynamic"), layers)
    check(got["plain"], x[:3:2, 2::2, ::2])
    check(got["squeezed"], x[:3:2, 2, ::2])
    check(got["backwards"], x[::-2, 0:5, 4:0:-1])
    check(got["dynamic"], x[1:5, 2:4, 3:5:2])


def test_slice_squeezing_every_axis_gives_one_element(tmp_path):
    """x[1, 2, 3] as coremltools writes it for torch indexing (every axis squeezed): the layer
    graph has no rank-0 blobs, so the blob is [1], as a reduction of every axis gives; a layer
    after it reads that element."""
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)

    def layers(b):
        b.add_slice_static("s", "x", "element", begin_ids=[1, 2, 3], end_ids=[2, 3, 4], strides=[1, 1, 1],
                           begin_masks=[False] * 3, end_masks=[False] * 3, squeeze_masks=[True] * 3)
        b.add_elementwise("twice", ["element"], "twice", mode="MULTIPLY", alpha=2.0)

    got = run_nd(tmp_path, {"x": x}, ("element", "twice"), layers)
    check(got["element"], x[1, 2, 3].reshape(1))
    check(got["twice"], (2 * x[1, 2, 3]).reshape(1))


def test_slice_squeezing_every_axis_reads_the_begin_element_whatever_the_end(tmp_path):
    """coremltools writes x[i] of a shape (torch's einsum and meshgrid with dynamic shapes) as a
    slice that squeezes every axis with endIds 0: a squeezed axis takes the element at its begin
    and ignores its end, so the [1] blob holds that element, for begins from the parameters and
    from an input alike."""
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    begin = np.array([2, -1, 3], np.float32)

    def layers(b):
        b.add_get_shape("shape", "x", "shape")
        b.add_slice_static("size_of_1", "shape", "size_of_1", begin_ids=[1], end_ids=[0], strides=[1],
                           begin_masks=[False], end_masks=[False], squeeze_masks=[True])
        b.add_slice_static("s", "x", "element", begin_ids=[1, 2, 3], end_ids=[0, 0, 0], strides=[1, 1, 1],
                           begin_masks=[False] * 3, end_masks=[False] * 3, squeeze_masks=[True] * 3)
        b.add_slice_dynamic("d", ["x", "begin"], "dynamic", end_ids=[0, 0, 0], strides=[1, 1, 1],
                            begin_masks=[False] * 3, end_masks=[False] * 3, squeeze_masks=[True] * 3)

    got = run_nd(tmp_path, {"x": x, "begin": begin}, ("size_of_1", "element", "dynamic"), layers)
    check(got["size_of_1"], np.array([4], np.float32))
    check(got["element"], x[1, 2, 3].reshape(1))
    check(got["dynamic"], x[2, -1, 3].reshape(1))


def _convert_torch_to_neural_network(tmp_path, net, examples, shapes):
    """ct.convert of torch.jit.trace(net) to a neuralNetwork with the given input shapes (ct
    RangeDims for sizes known only at prediction); returns the saved model's path and its
    input and output names."""
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(net.eval(), tuple(examples))
        mlmodel = ct.convert(traced, inputs=[ct.TensorType(shape=shape) for shape in shapes],
                             convert_to="neuralnetwork", skip_model_load=True)
    path = os.path.join(str(tmp_path), "torch.mlmodel")
    mlmodel.save(path)
    description = mlmodel.get_spec().description
    return path, [i.name for i in description.input], [o.name for o in description.output]


@pytest.mark.parametrize("equation", ["aa->a", "abc,cde->abde", "ab,bc,cd->ba", "iijj,j->j"])
def test_converted_torch_einsum_with_dynamic_shapes(tmp_path, equation):
    """torch.einsum with every size known only at prediction, converted to a neuralNetwork:
    coremltools reads the sizes off getShape with slices that squeeze every axis, and builds
    reshape targets and rangeDynamic ends from them; compared with torch."""
    torch = pytest.importorskip("torch")

    class Einsum(torch.nn.Module):
        def forward(self, *operands):
            return torch.einsum(equation, *operands)

    sizes = {}
    for letter in equation.split("->")[0].replace(",", ""):
        sizes.setdefault(letter, 2 + len(sizes))
    operands = [rng.standard_normal([sizes[c] for c in term]).astype(np.float32)
                for term in equation.split("->")[0].split(",")]
    shapes = [tuple(ct.RangeDim(lower_bound=1, upper_bound=-1, default=n) for n in x.shape) for x in operands]
    path, inputs, outputs = _convert_torch_to_neural_network(
        tmp_path, Einsum(), [torch.from_numpy(x) for x in operands], shapes)
    got = coremlrt.MLModel(path).predict(dict(zip(inputs, operands)))[outputs[0]]
    with torch.no_grad():
        expected = Einsum()(*[torch.from_numpy(x) for x in operands]).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_converted_torch_meshgrid_with_dynamic_shapes(tmp_path, indexing):
    """torch.meshgrid of three vectors of sizes known only at prediction, converted to a
    neuralNetwork: each grid tiles a vector by the others' sizes, read off getShape with slices
    that squeeze every axis; compared with torch."""
    torch = pytest.importorskip("torch")

    class Meshgrid(torch.nn.Module):
        def forward(self, a, b, c):
            return torch.meshgrid(a, b, c, indexing=indexing)

    vectors = [np.arange(n, dtype=np.float32) + 10 * i for i, n in enumerate((2, 3, 4))]
    shapes = [(ct.RangeDim(lower_bound=1, upper_bound=128),) for _ in vectors]  # one RangeDim is one size
    path, inputs, outputs = _convert_torch_to_neural_network(
        tmp_path, Meshgrid(), [torch.from_numpy(v) for v in vectors], shapes)
    got = coremlrt.MLModel(path).predict(dict(zip(inputs, vectors)))
    with torch.no_grad():
        expected = Meshgrid()(*[torch.from_numpy(v) for v in vectors])
    assert len(outputs) == len(expected)
    for name, grid in zip(outputs, expected):
        check(got[name], grid.numpy())


def test_sliding_windows_and_tile(tmp_path):
    x = rng.standard_normal((2, 7, 3)).astype(np.float32)
    reps = np.array([2, 1, 3], np.float32)

    def layers(b):
        b.add_sliding_windows("w", "x", "windows", axis=1, window_size=3, step=2)
        b.add_tile("t", "x", "tiled", reps=[2, 3])
        b.add_tile("td", ["x", "reps"], "tiled_dynamic")

    got = run_nd(tmp_path, {"x": x, "reps": reps}, ("windows", "tiled", "tiled_dynamic"), layers)
    windows = np.stack([x[:, i:i + 3] for i in range(0, 5, 2)], axis=1)
    check(got["windows"], windows)
    check(got["tiled"], np.tile(x, (1, 2, 3)))
    check(got["tiled_dynamic"], np.tile(x, (2, 1, 3)))


def test_gathers(tmp_path):
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    idx = np.array([[3, 0], [-1, 2]], np.float32)
    nd = np.array([[0, 4], [3, 1], [2, 2]], np.float32)
    along = rng.integers(0, 5, size=(4, 2, 3)).astype(np.float32)

    def layers(b):
        b.add_gather("g", ["x", "idx"], "gathered", axis=1)
        b.add_gather_nd("gnd", ["x", "nd"], "gathered_nd")
        b.add_gather_along_axis("ga", ["x", "along"], "gathered_along", axis=1)

    got = run_nd(tmp_path, {"x": x, "idx": idx, "nd": nd, "along": along},
                 ("gathered", "gathered_nd", "gathered_along"), layers)
    check(got["gathered"], np.take(x, idx.astype(int), axis=1))
    check(got["gathered_nd"], x[nd[:, 0].astype(int), nd[:, 1].astype(int)])
    check(got["gathered_along"], np.take_along_axis(x, along.astype(int), axis=1))


@pytest.mark.parametrize("mode", ["UPDATE", "ADD", "SUB", "MUL", "DIV", "MAX", "MIN"])
def test_scatters(tmp_path, mode):
    data = rng.standard_normal((4, 3)).astype(np.float32)
    idx = np.array([2, 0], np.float32)
    updates = rng.standard_normal((2, 3)).astype(np.float32) + 2.0
    nd_idx = np.array([[1, 2], [3, 0]], np.float32)
    nd_updates = np.array([7.0, -3.0], np.float32)
    along_idx = np.array([[1, 0, 2]], np.float32)
    along_updates = np.array([[4.0, 5.0, 6.0]], np.float32)
    op = {"UPDATE": lambda a, u: u, "ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide,
          "MAX": np.maximum, "MIN": np.minimum}[mode]

    def layers(b):
        b.add_scatter("s", ["data", "idx", "updates"], "scattered", axis=0, mode=mode)
        b.add_scatter_nd("snd", ["data", "nd_idx", "nd_updates"], "scattered_nd", mode=mode)
        b.add_scatter_along_axis("sa", ["data", "along_idx", "along_updates"], "scattered_along", axis=0, mode=mode)

    got = run_nd(tmp_path, {"data": data, "idx": idx, "updates": updates, "nd_idx": nd_idx, "nd_updates": nd_updates,
                            "along_idx": along_idx, "along_updates": along_updates},
                 ("scattered", "scattered_nd", "scattered_along"), layers)
    expected = data.copy()
    for i, row in enumerate(idx.astype(int)):
        expected[row] = op(expected[row], updates[i])
    np.testing.assert_allclose(got["scattered"], expected, rtol=1e-6)
    expected = data.copy()
    for (r, c), u in zip(nd_idx.astype(int), nd_updates):
        expected[r, c] = op(expected[r, c], u)
    np.testing.assert_allclose(got["scattered_nd"], expected, rtol=1e-6)
    expected = data.copy()
    for c, r in enumerate(along_idx[0].astype(int)):
        expected[r, c] = op(expected[r, c], along_updates[0, c])
    np.testing.assert_allclose(got["scattered_along"], expected, rtol=1e-6)


def test_shape_range_fill_and_constants(tmp_path):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    end = np.array([7.0], np.float32)
    start = np.array([1.5], np.float32)
    shape = np.array([3, 2], np.float32)
    constant = rng.standard_normal((2, 2)).astype(np.float32)

    def layers(b):
        b.add_get_shape("gs", "x", "shape_of_x")
        b.add_range_static("rs", "range_static", end=5, start=-1, step=1.5)
        b.add_range_dynamic("rd1", ["end"], "range_end", start=2, step=2)
        b.add_range_dynamic("rd2", ["end", "start"], "range_end_start", step=0.5)
        b.add_fill_like("fl", "x", "filled_like", value=2.5)
        b.add_fill_static("fs", "filled_static", output_shape=[2, 1, 3], value=-1.0)
        b.add_fill_dynamic("fd", "shape", "filled_dynamic", value=4.0)
        b.add_load_constant_nd("k", "constant", constant, shape=[2, 2])
        b.add_copy("c", "x", "copied")

    got = run_nd(tmp_path, {"x": x, "end": end, "start": start, "shape": shape},
                 ("shape_of_x", "range_static", "range_end", "range_end_start", "filled_like", "filled_static",
                  "filled_dynamic", "constant", "copied"), layers)
    check(got["shape_of_x"], np.array([2, 3, 4], np.float32))
    np.testing.assert_allclose(got["range_static"], np.arange(-1, 5, 1.5, dtype=np.float32))
    np.testing.assert_allclose(got["range_end"], np.arange(2, 7, 2, dtype=np.float32))
    np.testing.assert_allclose(got["range_end_start"], np.arange(1.5, 7, 0.5, dtype=np.float32))
    check(got["filled_like"], np.full((2, 3, 4), 2.5, np.float32))
    check(got["filled_static"], np.full((2, 1, 3), -1.0, np.float32))
    check(got["filled_dynamic"], np.full((3, 2), 4.0, np.float32))
    check(got["constant"], constant)
    check(got["copied"], x)


def test_broadcasts(tmp_path):
    x = np.array([[1.0], [-0.0], [np.inf]], np.float32)  # [3, 1]; values kept exactly
    like = np.zeros((2, 3, 4), np.float32)
    shape = np.array([3, 5], np.float32)

    def layers(b):
        b.add_broadcast_to_like("bl", ["x", "like"], "like_out")
        b.add_broadcast_to_static("bs", "x", "static", output_shape=[2, 3, 2])
        b.add_broadcast_to_dynamic("bd", ["x", "shape"], "dynamic")

    got = run_nd(tmp_path, {"x": x, "like": like, "shape": shape}, ("like_out", "static", "dynamic"), layers)
    for name, target in (("like_out", (2, 3, 4)), ("static", (2, 3, 2)), ("dynamic", (3, 5))):
        expected = np.broadcast_to(x, target)
        check(got[name], expected)
        assert np.array_equal(np.signbit(got[name]), np.signbit(expected))


def test_constant_pad_and_where(tmp_path):
    x = np.array([[0.0, 2.0, 0.0], [-1.0, 0.0, 3.0]], np.float32)
    a = rng.standard_normal((2, 3)).astype(np.float32)
    c = rng.standard_normal((1, 3)).astype(np.float32)
    amounts = np.array([0, 2, 1, 1], np.float32)

    def layers(b):
        b.add_constant_pad("p", ["x"], "padded", value=9.0, pad_amounts=[1, 0, 2, 3])
        # Output sizes: axis 0 padded at its end to 4, axis 1 at its start to 5.
        b.add_constant_pad("ps", ["x"], "padded_to", value=-2.0, pad_to_given_output_size_mode=True,
                           pad_amounts=[0, 4, 5, 0])
        b.add_constant_pad("pd", ["x", "amounts"], "padded_dynamic", value=0.5)
        b.add_where_nonzero("nz", "x", "nonzero")
        b.add_where_broadcastable("w", ["x", "a", "c"], "chosen")

    got = run_nd(tmp_path, {"x": x, "a": a, "c": c, "amounts": amounts},
                 ("padded", "padded_to", "padded_dynamic", "nonzero", "chosen"), layers)
    check(got["padded_dynamic"], np.pad(x, ((0, 2), (1, 1)), constant_values=0.5))
    check(got["padded"], np.pad(x, ((1, 0), (2, 3)), constant_values=9.0))
    check(got["padded_to"], np.pad(x, ((0, 2), (2, 0)), constant_values=-2.0))
    check(got["nonzero"], np.argwhere(x != 0).astype(np.float32))
    check(got["chosen"], np.where(x != 0, a, c))


def test_rank_n_layer_with_the_rank5_mapping_is_refused(tmp_path):
    b = make_builder({"data": (2, 3, 4)}, exact=False)
    b.add_transpose("t", [0, 2, 1], "data", "out")
    with pytest.raises(coremlrt.Error, match=r"transpose.*exact-rank array mapping"):
        predict(tmp_path, b, {"data": np.zeros((2, 3, 4), np.float32)})


def test_converted_torch_data_movement(tmp_path):
    """ct.convert(..., convert_to="neuralnetwork") of torch's view, permute, cat, slicing, chunk,
    index_select, expand, repeat, pad, unsqueeze/squeeze and transpose, compared with torch."""
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def forward(self, x):  # [2, 3, 4]
            return (x.view(2, 12).reshape(4, 6), x.permute(2, 0, 1).flatten(1), torch.cat([x, x], dim=1)[:, 1:5:2],
                    *torch.chunk(x, 2, dim=2), torch.index_select(x, 2, torch.tensor([3, 0])),
                    x[:, :1].expand(2, 3, 4).repeat(1, 2, 1), torch.nn.functional.pad(x, (1, 2), value=3.0),
                    x.unsqueeze(0).squeeze(0).transpose(0, 1))

    net = Net().eval()
    example = torch.randn(2, 3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlmodel = ct.convert(torch.jit.trace(net, example), inputs=[ct.TensorType(name="x", shape=example.shape)],
                             convert_to="neuralnetwork", skip_model_load=True)
    path = os.path.join(str(tmp_path), "torch.mlmodel")
    mlmodel.save(path)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    got = coremlrt.MLModel(path).predict({"x": x})
    with torch.no_grad():
        expected = net(torch.from_numpy(x))
    names = [o.name for o in mlmodel.get_spec().description.output]
    assert len(names) == len(expected)
    for name, value in zip(names, expected):
        check(got[name], value.numpy())


def test_copies_of_an_input_back_onto_it_give_the_input_as_an_output(tmp_path):
    """A torch model returning its input, converted to a neuralNetwork, ends in copy x -> x_tmp,
    copy x_tmp -> x: the model's output 'x' is its input 'x' (a copy the caller owns)."""
    x = rng.standard_normal((2, 3)).astype(np.float32)
    b = NeuralNetworkBuilder([("x", datatypes.Array(2, 3))], [("x", None), ("doubled", None)],
                             disable_rank5_shape_mapping=True)
    b.add_elementwise("double", input_names=["x", "x"], output_name="doubled", mode="ADD")
    b.add_copy("x_aside", input_name="x", output_name="x_tmp")
    b.add_copy("x_back", input_name="x_tmp", output_name="x")
    for feature in list(b.spec.description.input) + list(b.spec.description.output):
        feature.type.multiArrayType.dataType = ct.proto.FeatureTypes_pb2.ArrayFeatureType.FLOAT32  # as torch's converter writes
    feeds = {"x": x.copy()}
    out = predict(tmp_path, b, feeds)
    check(out["x"], x)
    check(out["doubled"], 2 * x)
    feeds["x"][:] = 0  # the output is no view of the caller's array
    check(out["x"], x)


def test_a_different_value_written_over_an_input_is_refused(tmp_path):
    """The program's values have one name each: an input and another value written over its blob
    cannot both be called so (the double input here is first cast to the network's fp32)."""
    b = NeuralNetworkBuilder([("x", datatypes.Array(2, 3))], [("x", None)], disable_rank5_shape_mapping=True)
    b.add_activation("relu", "RELU", input_name="x", output_name="x_tmp")
    b.add_copy("x_back", input_name="x_tmp", output_name="x")
    with pytest.raises(coremlrt.Error, match="overwrites the model input 'x' with a value other than the input"):
        predict(tmp_path, b, {"x": np.ones((2, 3), np.float32)})
