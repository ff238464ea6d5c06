"""The ONNX and Core AI translators register alike (``@translates`` on a registry dict), one
translator per op, and every translator module is where docs/guide/adding-an-op.md says a family's
translators are."""

import os

import pytest

from coremlrt.coreai import _registry as coreai_registry
from coremlrt.onnx_export import registry as onnx_registry

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
PACKAGE = os.path.join(REPO, "python", "coremlrt")


@pytest.mark.parametrize("registry", [onnx_registry, coreai_registry], ids=["onnx_export", "coreai"])
def test_a_second_translator_for_an_op_is_refused(registry):
    name = "test_translator_registries.op"
    registry.translates(name)(lambda *args: None)
    try:
        with pytest.raises(ValueError, match="two translators"):
            registry.translates(name)(lambda *args: None)
    finally:
        registry.TRANSLATORS.pop(name)


def test_every_translator_module_is_in_the_guide():
    guide = open(os.path.join(REPO, "docs", "guide", "adding-an-op.md")).read()
    modules = [name for folder, prefix in (("onnx_export", "ops_"), ("coreai", "_ops_"))
               for name in sorted(os.listdir(os.path.join(PACKAGE, folder)))
               if name.startswith(prefix) and name.endswith(".py")]
    assert len(modules) >= 10
    missing = [name for name in modules if f"`{name}`" not in guide]
    assert not missing, f"translator modules docs/guide/adding-an-op.md does not place: {missing}"
