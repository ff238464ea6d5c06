"""The modules of python/coremlrt import each other without a cycle.

A cycle hidden by an import inside a function still ties the modules together (neither can be
understood, moved or tested alone), so imports at any depth count. Run alone as a command:
``python3 tests/python/tools/test_import_cycles.py`` prints the cycles, or nothing.
"""

import ast
import os
import sys

PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python", "coremlrt")


def _module_name(path, package):
    relative = os.path.relpath(path, os.path.dirname(package))[:-len(".py")].split(os.sep)
    if relative[-1] == "__init__":
        relative = relative[:-1]
    return ".".join(relative)


def import_graph(package=PACKAGE):
    """{module: {module it imports}} over the package's own modules, imports at any depth."""
    files, stubs = {}, set()
    for root, _dirs, names in os.walk(package):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                files[_module_name(path, package)] = path
            elif name.endswith(".pyi"):  # an extension module (_core): it imports nothing of ours
                stubs.add(_module_name(os.path.join(root, name[:-1]), package))
    graph = {module: set() for module in stubs}
    known = set(files) | stubs
    for module, path in files.items():
        is_package = os.path.basename(path) == "__init__.py"
        here = module if is_package else module.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(open(path).read(), path)):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    base = ".".join(filter(None, [base, node.module]))
                else:
                    base = node.module or ""
                # `from . import x` names submodule x when there is one; else the names are
                # attributes of `base` itself.
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                           for alias in node.names]
            for target in targets:
                # The nearest module of ours the name lies in (coremlrt.serve.server.main -> ...server).
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges.add(target)
        graph[module] = edges
    return graph


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_graph_sees_imports_inside_functions(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import thing\n")
    (package / "b.py").write_text("def thing():\n    from . import a\n")
    (package / "c.py").write_text("import pkg.a\nfrom . import _ext\n")
    (package / "_ext.pyi").write_text("")
    graph = import_graph(str(package))
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"} and graph["pkg.c"] == {"pkg.a", "pkg._ext"}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "modules that import each other: " + "; ".join(" <-> ".join(c) for c in found)


if __name__ == "__main__":
    for component in cycles(import_graph()):
        print(" <-> ".join(component))
