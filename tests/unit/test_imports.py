"""The library's layering: `import milktea` is cheap, and no module imports itself in a circle.

A cycle makes the import order matter (a half-initialised module hands out missing names)
and makes layers impossible to read one at a time; the cure is to move what both sides
need into the lower module. An import inside a function is a cycle all the same (it only
hides until run time), so the graph counts every import statement.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "milktea"

def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def top_level_imports(tree: ast.Module):
    """Import statements that run when the module is imported (not those inside functions,
    classes' methods, or `if TYPE_CHECKING:`)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _type_checking(node.test):
                todo += node.body
            todo += node.orelse
        elif isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody
            for handler in node.handlers:
                todo += handler.body
        elif isinstance(node, (ast.With, ast.ClassDef)):
            todo += node.body


def all_imports(tree: ast.Module):
    """Every import statement, functions included."""
    return (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))


def imports_of(name: str, path: Path, which=top_level_imports) -> set[str]:
    """The milktea modules `name` imports (at module level, by default)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in which(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:  # relative: resolve against this module's package
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            # `from pkg import sub` imports the submodule; `from mod import name`, the module
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module
                       for a in node.names]
        for target in targets:
            while target and target not in MODULES:  # `import milktea.cost.x` -> milktea.cost
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module, as one path around it."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                out.append(_path_around(graph, set(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _path_around(graph, component):
    """A closed path a -> b -> ... -> a inside one component (shortest from its first module)."""
    start = min(component)
    paths, seen = {start: [start]}, {start}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return paths[v] + [start]
                if w not in seen:
                    seen.add(w)
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return sorted(component)


def test_the_graph_sees_real_imports():
    graph = {name: imports_of(name, path) for name, path in MODULES.items()}
    assert "milktea.compressors.packet" in graph["milktea.compressors.base"], graph["milktea.compressors.base"]
    assert "milktea.distributed.hooks" in graph["milktea.ddp"]
    # imports inside functions do not count
    tree = ast.parse("import os\ndef f():\n    from milktea import cost\n")
    assert [type(n).__name__ for n in top_level_imports(tree)] == ["Import"]


def test_cycle_finder_reports_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    graph = {name: imports_of(name, path, all_imports) for name, path in MODULES.items()}
    cycles = find_cycles(graph)
    assert not cycles, "import cycles (imports inside functions count too: move what both sides " \
        "need into the lower module):\n  " + "\n  ".join(" -> ".join(c) for c in cycles)


def test_the_cycle_graph_counts_imports_inside_functions():
    tree = ast.parse("import os\ndef f():\n    from milktea import cost\n")
    assert [type(n).__name__ for n in all_imports(tree)] == ["Import", "ImportFrom"]
    # the registries sit below their users: the codec records import nothing of the library,
    # the wire format only them, the decoders no compressor, the cost model no protocol
    every = {name: imports_of(name, path, all_imports) for name, path in MODULES.items()}
    assert not {m for m in every["milktea.compressors.codec"] if m.startswith("milktea")}
    assert every["milktea.compressors.packet"] <= {"milktea.compressors.codec", "milktea.i18n", "milktea.device"}
    assert every["milktea.compressors.registry"] <= {"milktea.compressors.packet", "milktea.compressors.codec",
                                                     "milktea.kernels", "milktea.compressors.wire"}
    assert not {m for m in every["milktea.cost"] if m.startswith("milktea.distributed")}
    assert "milktea.tasks" not in every["milktea.gpt"]


COURSE = ("milktea.experiments", "milktea.plots", "milktea.widgets")  # what the chapters show
ABOVE_THE_CORE = COURSE + ("milktea.grade", "milktea.bench", "milktea.__main__")


def _in(name: str, packages) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_the_core_never_reaches_up_into_the_course():
    """The library (compressors, cost, simulate, distributed, ...) is usable without the
    chapters' experiments, plots and widgets: it imports none of them, not even inside a
    function. What both need lives in the core (e.g. milktea.tables, milktea.timing)."""
    upward = [f"{name} -> {target}" for name, path in MODULES.items() if not _in(name, ABOVE_THE_CORE)
              for target in sorted(imports_of(name, path, all_imports)) if _in(target, COURSE)]
    assert not upward, "core modules import the course layers:\n  " + "\n  ".join(upward)


def test_public_names_resolve_on_first_use():
    import milktea
    assert set(milktea.__all__) <= set(dir(milktea))
    for name in milktea.__all__:
        assert getattr(milktea, name) is not None, name
    import milktea.simulate
    assert type(milktea).__name__ == "module" and callable(milktea.simulate.simulate)   # the module, as Python has it
    with pytest.raises(AttributeError, match="no attribute 'TopKK'"):
        _ = milktea.TopKK
