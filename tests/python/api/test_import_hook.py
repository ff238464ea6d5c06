"""The finder the COREMLRT_COREMLTOOLS and COREMLRT_COREAI hooks share (python/coremlrt_import_hook.py),
on modules of a temporary folder: it runs its callback once a watched module has executed,
leaves the module its own loader, supplies stand-ins, and removes itself when done."""

import importlib.machinery
import sys
import types

import pytest

from coremlrt_import_hook import AfterImportFinder, watching


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "hooked_first.py").write_text("VALUE = 1\n")
    (tmp_path / "hooked_second.py").write_text("import hooked_stand_in\nVALUE = hooked_stand_in.VALUE + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("hooked_first", "hooked_second", "hooked_stand_in"):
        sys.modules.pop(name, None)


def test_after_runs_once_each_watched_module_has_executed(folder):
    seen = []

    def after(name, module):
        seen.append((name, module.VALUE))
        module.PATCHED = True

    def stand_in():
        module = types.ModuleType("hooked_stand_in")
        module.VALUE = 41
        return module

    finder = AfterImportFinder(("hooked_first", "hooked_second"), after, stand_ins={"hooked_stand_in": stand_in})
    assert finder.install() is finder
    try:
        assert watching("hooked_first") and not watching("hooked_stand_in")
        # A second finder watching the same modules is not installed beside the first.
        assert AfterImportFinder(("hooked_second", "hooked_first"), after).install() is finder
        assert sum(getattr(f, "watched", None) == finder.watched for f in sys.meta_path) == 1

        import hooked_first
        assert seen == [("hooked_first", 1)] and hooked_first.PATCHED
        assert isinstance(hooked_first.__spec__.loader, importlib.machinery.SourceFileLoader)
        assert finder in sys.meta_path  # hooked_second is still to come

        import hooked_second
        assert seen == [("hooked_first", 1), ("hooked_second", 42)] and hooked_second.PATCHED
        assert finder not in sys.meta_path and not watching("hooked_first")
    finally:
        finder.uninstall()


def test_uninstall_before_any_import(folder):
    finder = AfterImportFinder(("hooked_first",), lambda name, module: pytest.fail("ran after uninstall"))
    finder.install()
    finder.uninstall()
    assert not watching("hooked_first")
    import hooked_first
    assert not hasattr(hooked_first, "PATCHED")


def test_two_finders_watching_one_module_both_run(folder):
    """Two finders that each ask the other finders (as a second one of another version would)
    find the module once, without recursing, and both run."""
    seen = []
    first = AfterImportFinder(("hooked_first",), lambda name, module: seen.append("first"))
    # Not the same set of modules, so install() puts both on sys.meta_path.
    second = AfterImportFinder(("hooked_first", "unrelated"), lambda name, module: seen.append("second"))
    first.install()
    second.install()
    try:
        import hooked_first
        assert sorted(seen) == ["first", "second"] and hooked_first.VALUE == 1
    finally:
        first.uninstall()
        second.uninstall()
