"""Op types of the kernel registry that no translator writes as ONNX nodes, and why.

Every op type with a kernel (src/ops/) either has a translator (registry.py's ``TRANSLATORS``,
or ``OWN_TRANSLATIONS`` of exporter.py for states and nested blocks) or an entry here.
tests/python/tools/test_op_completeness.py fails when an op type has neither, and
scripts/gen_ops_doc.py shows these reasons in docs/reports/ops.md. An op listed here that reaches
the exporter is refused with its reason (exporter.py, FunctionExport._op).
"""

# The constexpr_* kernels run when the model loads (their OpTraits' evaluated_at_load,
# src/ops/constexpr.cc): their results are known values, which the export writes as what they
# hold, not as the ops that made them (exporter.py, FunctionExport._op; quantized.py).
_EVALUATED_AT_LOAD = ("evaluated at load: exported as its value, an initializer or "
                      "DequantizeLinear of its codes (quantized.py), never as a node")

# An ONNX runtime draws from its own generator; no seed makes it draw what Core ML draws.
_RANDOM = "random values: an ONNX runtime's generator cannot reproduce Core ML's draws"

UNTRANSLATED = {
    "constexpr_affine_dequantize": _EVALUATED_AT_LOAD,
    "constexpr_blockwise_shift_scale": _EVALUATED_AT_LOAD,
    "constexpr_cast": _EVALUATED_AT_LOAD,
    "constexpr_lut_to_dense": _EVALUATED_AT_LOAD,
    "constexpr_lut_to_sparse": _EVALUATED_AT_LOAD,
    "constexpr_sparse_blockwise_shift_scale": _EVALUATED_AT_LOAD,
    "constexpr_sparse_to_dense": _EVALUATED_AT_LOAD,
    # Its item ids reach the engine as codes (src/format/classic/recommender_reader.cc), in and
    # out; docs/design/onnx-export.md ("Not exported") says which of those have no ONNX form.
    "item_similarity_recommender": "its inputs and outputs are sequences and dictionaries of item ids, carried "
                                   "as codes: the export has no ONNX form for a sequence input or for those outputs",
    "random_bernoulli": _RANDOM,
    "random_categorical": _RANDOM,
    "random_normal": _RANDOM,
    "random_uniform": _RANDOM,
}
