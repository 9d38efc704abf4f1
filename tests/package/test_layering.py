"""The package's layering: contract -> services -> stages (in flow order) -> experiment -> CLI.

Every import in apcir/ (module level or inside a function) is checked: a
module may import its own layer and the layers below it, and a stage may
import earlier stages but never a later one. The same order is written in
docs/development.md's layering table.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "apcir"

# Lowest first. Within "stages", the order is the data flow.
LAYERS: list[tuple[str, list[str]]] = [
    ("foundation", ["apcir._version", "apcir._public", "apcir.errors", "apcir.ids", "apcir.console", "apcir.settings",
                    "apcir.io", "apcir.registry", "apcir.options"]),
    ("contract", ["apcir.contract"]),
    ("services", ["apcir.datasets", "apcir.metrics", "apcir.llm"]),
    ("stages", ["apcir.reformulation", "apcir.retrieval", "apcir.fusion", "apcir.reranking", "apcir.responses",
                "apcir.submission", "apcir.evaluation"]),
    ("experiment", ["apcir.experiment"]),
    # iKAT's interactive task: one turn at a time through the experiment's stages
    ("live", ["apcir.live"]),
    # the Python front doors: the public API, the PyTerrier transformers, the ir_datasets extension
    ("api", ["apcir.api", "apcir.pyterrier", "apcir.irds"]),
    ("cli", ["apcir.cli", "apcir.__main__"]),
]
ORDER = [component for _, components in LAYERS for component in components]
LAYER_OF = {component: layer for layer, components in LAYERS for component in components}
LAYER_RANK = {layer: rank for rank, (layer, _) in enumerate(LAYERS)}


def component(module: str) -> str | None:
    """The component (an entry of LAYERS) a module belongs to; None for the package root."""
    for name in sorted(ORDER, key=len, reverse=True):
        if module == name or module.startswith(name + "."):
            return name
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """Every apcir module imported anywhere in ``path`` (absolute or relative), with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("apcir")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("apcir"):
                if target == "apcir":  # from apcir import datasets, __version__
                    found += [(node.lineno, f"apcir.{alias.name}") for alias in node.names]
                else:
                    found.append((node.lineno, target))
    return found


def violations() -> list[str]:
    problems = []
    for path in sorted(ROOT.rglob("*.py")):
        here = component(module_name(path))
        if here is None:
            continue
        for line, target in imports(path):
            there = component(target)
            if there is None or there == here:
                continue
            layer_here, layer_there = LAYER_OF[here], LAYER_OF[there]
            where = f"{path.relative_to(ROOT.parent)}:{line} imports {target}"
            if LAYER_RANK[layer_there] > LAYER_RANK[layer_here]:
                problems.append(f"{where}: the {layer_there} layer is above the {layer_here} layer")
            elif layer_here == layer_there and ORDER.index(there) > ORDER.index(here):
                problems.append(f"{where}: {there} comes after {here}")
    return problems


def test_every_module_belongs_to_a_layer():
    unplaced = [module_name(p) for p in ROOT.rglob("*.py") if component(module_name(p)) is None
                and module_name(p) != "apcir"]
    assert unplaced == [], "add new top-level modules to LAYERS (and to docs/development.md's layering table)"


def test_no_layer_imports_a_layer_above_it_and_no_stage_a_later_stage():
    assert violations() == []


def test_nothing_below_the_cli_imports_the_cli():
    below = [f"{p.relative_to(ROOT.parent)}:{line}" for p in ROOT.rglob("*.py")
             if component(module_name(p)) not in ("apcir.cli", "apcir.__main__")
             for line, target in imports(p) if target.startswith("apcir.cli")]
    assert below == []


@pytest.mark.parametrize("source, expected", [
    ("from apcir.cli.common import console\n", "the cli layer is above the stages layer"),
    ("from apcir.submission.stage import write_submission\n", "apcir.submission comes after apcir.fusion"),
])
def test_the_check_catches_a_bad_import(tmp_path, monkeypatch, source, expected):
    bad = ROOT / "fusion" / "_layering_probe.py"
    bad.write_text(source, encoding="utf-8")
    try:
        assert any(expected in problem for problem in violations())
    finally:
        bad.unlink()


def module_graph(top_level_only: bool = False) -> dict[str, set[str]]:
    """Which apcir modules each module imports (``top_level_only``: only the imports run at import time)."""
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                       for n in ast.walk(block)}  # annotations only: never imported at run time
        nodes = [n for n in (tree.body if top_level_only else ast.walk(tree)) if id(n) not in typing_only]
        found: set[str] = set()
        for _, target in imports_of(nodes, path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
        graph[name] = found
    return graph


def imports_of(nodes: list[ast.AST], path: Path) -> list[tuple[int, str]]:
    wanted = {id(n) for n in nodes}
    return [(line, target) for line, target in imports(path) if any(
        isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line for n in nodes)] if wanted else []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import loop (strongly connected component of more than one module), by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_loop():
    """No two modules import each other, directly or through others, not even inside functions (a package's
    ``__init__`` re-exporting its modules is the one exception: its modules never import it back; imports
    under ``if TYPE_CHECKING`` are annotations, never run)."""
    graph = module_graph()
    for name in graph:  # a package's __init__ importing its own modules is re-export, not a loop
        graph[name] = {t for t in graph[name] if not (t.startswith(name + ".") and (ROOT.parent / Path(
            *name.split("."))).is_dir())}
    assert cycles(graph) == []


def test_the_loop_check_sees_a_loop():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
