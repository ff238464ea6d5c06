"""The import finder behind coremlrt's stand-ins: runs coremlrt once a watched module has been imported.

Three places need the same thing: the COREMLRT_COREMLTOOLS hook (coremlrt_coremltools_hook.py),
the COREMLRT_COREAI hook (coremlrt_coreai_hook.py) and coremlrt.coreai.runtime.enable() must
change a third-party module right after it has executed, before anything else can bind its
names, without importing it (or coremlrt) earlier than the program does. ``AfterImportFinder``
sits at the front of ``sys.meta_path``, lets the normal finders locate each watched module as
they would without it, wraps the module's loader, and once the module has executed calls
``after(name, module)``. It can also supply a stand-in module for a name (coremltools' macOS-only
extension). It removes itself once every watched module has been imported.

This module lives beside the hooks at the top of site-packages (CMakeLists.txt installs it; the
build copies it to build/dev/python), and uses only the standard library so that a hook stays
cheap and works before anything else is importable.
"""

import sys
from importlib.machinery import ModuleSpec


class AfterImportFinder:
    """A ``sys.meta_path`` finder that calls ``after(name, module)`` once each watched module
    has executed; ``stand_ins`` maps names to functions making the module to use instead."""

    def __init__(self, watched, after, stand_ins=None):
        self.watched = frozenset(watched)
        self._after = after
        self._stand_ins = dict(stand_ins or {})
        self._searching = set()

    def find_spec(self, name, path=None, target=None):
        if name in self._stand_ins:
            return ModuleSpec(name, _StandInLoader(self._stand_ins[name]))
        # Another finder that asks the others (one of another coremlrt version, say) asks us back
        # while we ask it: we answer that call with nothing, so the two do not recurse forever.
        if name not in self.watched or name in self._searching:
            return None
        self._searching.add(name)
        try:
            for finder in sys.meta_path:  # the module itself, found as it would be without us
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    if spec.loader is not None:
                        spec.loader = _RunAfterLoader(spec.loader, self)
                    return spec
            return None
        finally:
            self._searching.discard(name)

    def install(self):
        """Puts this finder at the front of ``sys.meta_path``, unless a finder watching the
        same modules is there already; returns the finder in place."""
        for finder in sys.meta_path:
            if getattr(finder, "watched", None) == self.watched:
                return finder
        sys.meta_path.insert(0, self)
        return self

    def uninstall(self):
        """Removes this finder, and any other watching the same modules."""
        sys.meta_path[:] = [f for f in sys.meta_path
                            if not (f is self or getattr(f, "watched", None) == self.watched)]

    def _executed(self, module):
        if all(name in sys.modules for name in self.watched):
            self.uninstall()
        self._after(module.__name__, module)


def watching(name):
    """Whether a finder on ``sys.meta_path`` watches the module ``name``."""
    return any(name in getattr(f, "watched", ()) for f in sys.meta_path)


class _RunAfterLoader:
    """Wraps the real loader of a watched module; runs the finder's ``after`` once it has run."""

    def __init__(self, loader, finder):
        self._loader = loader
        self._finder = finder

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # The module sees its real loader while it runs, and keeps it afterwards.
        module.__loader__ = module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._finder._executed(module)

    def __getattr__(self, name):  # anything else a loader is asked (get_code, is_package, ...)
        return getattr(self._loader, name)


class _StandInLoader:
    def __init__(self, make_module):
        self._make_module = make_module

    def create_module(self, spec):
        return self._make_module()

    def exec_module(self, module):
        pass
