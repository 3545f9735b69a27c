"""The package's layers point one way: a walk over every import in loaderx/ fails on a cycle, on
an import that runs up the layers, and on an import of another module's private name.

The layers, lowest first (docs/architecture.md draws them):

    errors < _os < _native < _store < _remote < _data < _loading < public modules < integrations
    < cli (and the demo)

A module may import from its own layer or any lower one. Deferred imports (inside a function)
count too: a deferred import that dodges a cycle is a cycle all the same. Only `import`
statements are walked, so an optional package imported lazily (torch, jax, ray) is not an edge.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "loaderx"

# Top-level names under loaderx and their layer. A new module or subpackage must be placed here.
LAYERS: dict[str, int] = {
    "errors": 0,
    "_os": 1,
    "_native": 2,
    "_store": 3,
    # Datasets in object storage: a local replica of the store's files, filled on demand.
    "_remote": 4,
    "_data": 5,
    "_loading": 6,
    # The public modules only re-export the private ones.
    "zrecord": 7, "dataset": 7, "converter": 7, "dataloader": 7, "sampler": 7, "mixture": 7,
    "shards": 7, "verify": 7, "result_buffers": 7,
    # Integrations: leaf modules over the core, each with its optional package.
    "torch": 8, "jax": 8, "ray": 8,
    # Applications on top of everything.
    "cli": 9, "demo": 9, "__main__": 9,
}
# `loaderx` itself holds only __version__ and release_buffers; it sits on top like an application.
PACKAGE_LAYER = 9


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = package_modules()


def layer(module: str) -> int:
    if module == "loaderx":
        return PACKAGE_LAYER
    top = module.split(".")[1]
    assert top in LAYERS, f"{module} is in no layer: place loaderx.{top} in LAYERS"
    return LAYERS[top]


def is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def imported_modules(module: str) -> Iterator[tuple[str, int]]:
    """(imported loaderx module, line) for every import statement in the module."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    base = module if is_package(module) else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "loaderx":
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                anchor = base.rsplit(".", node.level - 1)[0] if node.level > 1 else base
                source = f"{anchor}.{source}" if source else anchor
            if source.split(".")[0] != "loaderx":
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield (submodule if submodule in MODULES else source), node.lineno


def private_names_imported(path: Path) -> Iterator[tuple[str, str, int, str]]:
    """(module, private name, line, source line) for each `from loaderx... import _name`."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("loaderx"):
            # The whole statement's text, so a reason may stand on any of its lines.
            source = " ".join(lines[node.lineno - 1:node.end_lineno])
            for alias in node.names:
                name = alias.name
                full = f"{node.module}.{name}"
                if name.startswith("_") and not name.startswith("__") and full not in MODULES:
                    yield node.module or "", name, node.lineno, source


def edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for target, _ in imported_modules(module):
            if target != module and target in MODULES:
                graph[module].add(target)
    return graph


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer(module)


def test_imports_never_run_up_the_layers() -> None:
    upward = [
        f"{module}:{line} imports {target} (layer {layer(target)} above {layer(module)})"
        for module in MODULES
        for target, line in imported_modules(module)
        if target in MODULES and layer(target) > layer(module)
    ]
    assert not upward, "\n".join(upward)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; returns the components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_cycles() -> None:
    graph = edges()
    # A package's __init__ and its own modules are one unit only if they import each other; the
    # subpackages' __init__ files import nothing, so every edge here is a real module's.
    cycles = strongly_connected(graph)
    assert not cycles, f"import cycles: {cycles}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_another_modules_private_names(module: str) -> None:
    found = sorted({f"line {line}: {name} ({source.strip()})" for _, name, line, source in
                    private_names_imported(MODULES[module])})
    assert not found, f"{module} imports private names:\n" + "\n".join(found)


def test_tests_say_why_they_import_a_private_name() -> None:
    """A test may reach a private name when no public one shows what it checks, and says why on
    the import line (`# private: ...`)."""
    unexplained = sorted({
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for _, name, line, source in private_names_imported(path)
        if "# private:" not in source
    })
    assert not unexplained, "\n".join(unexplained)


def test_public_modules_only_re_export() -> None:
    """A public module (layer 6) defines nothing: it imports from the private layers and lists
    __all__, so the code a reader looks for is always in the private module it names."""
    for module, path in MODULES.items():
        if module.count(".") != 1 or layer(module) != 6:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = [type(n).__name__ for n in tree.body
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        assert not defined, f"{module} defines code ({defined}); move it to a private module"
