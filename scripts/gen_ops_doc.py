#!/usr/bin/env python3
"""Writes docs/reports/ops.md: the ops this build has kernels for (from the kernel registry, through
coremlrt._core.supported_ops()), whether the OpenVINO backend lowers each or why not (its lowering
table and declared reasons, src/backends/openvino/, through coremlrt._core.backend_op_support), and
whether the ONNX export writes it or why not (coremlrt.onnx_export's translators and
onnx_export/untranslated.py); then the MIL ops of docs/design/coreml-format.md that have no
kernel. Needs a build with OpenVINO.

    PYTHONPATH=build/dev/python python3 scripts/gen_ops_doc.py            # rewrite docs/reports/ops.md
    PYTHONPATH=build/dev/python python3 scripts/gen_ops_doc.py --check    # exit 1 when it is stale

The MIL op list is read from the op tables of docs/design/coreml-format.md (the tables whose
first column is `op`: one op per row).
"""

import argparse
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC_PATH = os.path.join(REPO, "docs", "reports", "ops.md")
FORMAT_DOC = os.path.join(REPO, "docs", "design", "coreml-format.md")
REGENERATE = "PYTHONPATH=build/dev/python python3 scripts/gen_ops_doc.py"

# Ops of the op tables that no ML program file needs a kernel for, and why. Any other
# op without a kernel is listed as not supported yet.
NO_KERNEL_NEEDED = {
    "const": "its value is loaded with the program; nothing runs",
    "conv_quantized": "experimental, emitted only for the NeuralNetwork backend",
    "coreml_update_state": "converter dialect only; files hold write_state and read_state",
}

HEADER = f"""\
# Supported ops

Generated from the kernel registry, the OpenVINO lowering table and the ONNX translators by
`scripts/gen_ops_doc.py`; do not edit by hand.
After changing a kernel registration (`registry.add` in `src/ops/`), an OpenVINO lowering or an
ONNX translator, rebuild and run:

    {REGENERATE}

`tests/python/tools/test_ops_doc.py` fails while this file differs from what the script writes.

* **opsets**: the iOS opsets (ML program spec versions) the kernel serves; `iOS17+` means
  iOS17 and every later opset. An op with two rows has a kernel per definition.
* **OpenVINO**: "lowered" where the OpenVINO backend runs the op (for the parameters and types
  its checks accept: an op it refuses says why in `coremlrt info --plan`), else why it never
  does (src/backends/openvino/unlowered.cc).
* **ONNX**: "yes" where `coremlrt.onnx_export` writes the op as ONNX nodes (a translator of
  `onnx_export/registry.py`, or `exporter.py` for states and control flow), else why it never
  does (`python/coremlrt/onnx_export/untranslated.py`).
* **dtypes**: the element types the kernel accepts for the op's main tensor input (for
  `fill`, `fill_like`, `one_hot` and `random_*`, the types it produces; for the
  `constexpr_*` ops, the type of the values it decompresses). `any`: the kernel moves
  elements of every dtype without reading them. Float types use the MIL names fp16, fp32,
  fp64; the others are numpy's names.
"""


def format_doc_ops(path):
    """MIL op names of the op tables in docs/design/coreml-format.md: the first cell of every
    row of a table whose header's first cell is `op`, one op name in backquotes per row."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    names = set()
    in_op_table = False
    for line in lines:
        if not line.startswith("|"):
            in_op_table = False
            continue
        if line.startswith("|---"):
            continue
        first = line.strip().strip("|").split("|")[0].strip()
        if first == "op":
            in_op_table = True
        elif in_op_table:
            match = re.fullmatch(r"`([a-z][a-z0-9_]*)`", first)
            if not match:
                raise ValueError(f"{path}: an op table row must start with one op name in backquotes: {line}")
            names.add(match.group(1))
    return names


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def openvino_cell(support, op):
    if op not in support:
        raise ValueError(f"op '{op}' has neither an OpenVINO lowering nor a reason in src/backends/openvino/unlowered.cc")
    return "lowered" if support[op] == "" else support[op]


def onnx_cell(translated, untranslated, op):
    if op in translated:
        return "yes"
    if op not in untranslated:
        raise ValueError(f"op '{op}' has neither an ONNX translator nor a reason in "
                         "python/coremlrt/onnx_export/untranslated.py")
    return untranslated[op]


def render(format_doc=FORMAT_DOC):
    from coremlrt import _core, ops_table
    from coremlrt.onnx_export import exporter  # its modules register the translators
    from coremlrt.onnx_export.registry import TRANSLATORS
    from coremlrt.onnx_export.untranslated import UNTRANSLATED

    if "openvino" not in _core.available_backends():
        raise RuntimeError("docs/reports/ops.md is written from a build with OpenVINO")
    support = _core.backend_op_support("openvino")
    kernel_rows = ops_table.rows()
    with_kernel = {op for op, _, _ in kernel_rows}
    lowered = sorted(op for op in with_kernel if support.get(op) == "")
    translated = set(TRANSLATORS) | set(exporter.OWN_TRANSLATIONS)
    out = [HEADER, f"\n{len(with_kernel)} ops have a kernel; the OpenVINO backend lowers {len(lowered)} of them.\n",
           "\n## Ops with a kernel\n\n"]
    out.append(_table(("op", "opsets", "dtypes", "OpenVINO", "ONNX"),
                      [(f"`{op}`", opsets, dtypes, openvino_cell(support, op), onnx_cell(translated, UNTRANSLATED, op))
                       for op, opsets, dtypes in kernel_rows]))
    missing = sorted(format_doc_ops(format_doc) - with_kernel)
    out.append("\n## MIL ops without a kernel\n\n")
    out.append("Ops of the op tables in docs/design/coreml-format.md that this build has no kernel for.\n\n")
    if missing:
        out.append(_table(("op", "why"), [(f"`{op}`", NO_KERNEL_NEEDED.get(op, "not supported yet")) for op in missing]))
    else:
        out.append("None.\n")
    return "".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/reports/ops.md is stale, write nothing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        with open(DOC_PATH, encoding="utf-8") as f:
            stale = f.read() != text
        if stale:
            print(f"docs/reports/ops.md is stale; regenerate it with: {REGENERATE}", file=sys.stderr)
        return 1 if stale else 0
    os.makedirs(os.path.dirname(DOC_PATH), exist_ok=True)
    with open(DOC_PATH, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(DOC_PATH, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
