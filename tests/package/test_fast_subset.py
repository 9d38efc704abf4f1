"""The fast subset (``make test-fast``: the tests not marked slow) reaches every module of apcir.

A module is reached when a test file with at least one fast test imports it (anywhere in the file), runs it
(``python -m apcir.x``), or runs one of the ``apcir`` commands it defines (``run_cli("index", ...)``,
``main(["index", ...])``, ``["apcir", "index", ...]``), or when a module so reached imports it at module level or
names it as a registry entry's ``"module:function"`` (a package's modules reach its ``__init__`` too). The check
reads the files (it runs in a second); it is a floor, not coverage: it says that some fast test loads each module. So an edit anywhere in apcir has a fast test that loads it; a new
module that only slow tests reach fails here, naming it: give it a fast test.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "apcir"
TESTS = ROOT / "tests"


def module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def modules() -> dict[str, Path]:
    return {module_name(p)[0]: p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(node: ast.AST, name: str, is_package: bool) -> set[str]:
    found: set[str] = set()
    if isinstance(node, ast.Import):
        found |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = name.split(".") if is_package else name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            module = ".".join([*base, *([node.module] if node.module else [])])
        else:
            module = node.module or ""
        found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return found


def module_level_imports(path: Path) -> set[str]:
    """What importing the module imports: its statements outside functions, not ``if TYPE_CHECKING:`` blocks."""
    name, is_package = module_name(path)
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        found.update(_imports(node, name, is_package))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def registry_targets(path: Path) -> set[str]:
    """The modules a registry's entries name as ``"apcir.x.y:function"`` (loaded when the entry is used)."""
    return set(re.findall(r"""["'](apcir(?:\.\w+)+):\w+["']""", path.read_text(encoding="utf-8")))


def _is_slow(decorators: list[ast.expr]) -> bool:
    return any("mark.slow" in ast.unparse(d) for d in decorators)


def has_fast_test(tree: ast.Module) -> bool:
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in statement.targets):
            if "slow" in ast.unparse(statement.value):
                return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test") and _is_slow(node.decorator_list):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_") \
                and not _is_slow(node.decorator_list):
            return True
    return False


# an apcir command named first in a call or a list: run_cli("index", ...), main(["index", ...]), ["apcir", "index"],
# [sys.executable, "-m", "apcir", "index", ...], a table of (["nuggets", "agreement", ...], ...)
COMMAND = re.compile(r"""(?:run_cli\(\s*|\[\s*|["']apcir["'],\s*)["']([a-z][a-z-]*)["']""")
RUN_MODULE = re.compile(r"""["']-m["'],\s*["'](apcir(?:\.\w+)*)["']""")


def command_modules() -> dict[str, str]:
    """Each top-level ``apcir`` command (or command group) -> the module that defines it."""
    import typer

    from apcir.cli.main import app

    found: dict[str, str] = {}
    for name, command in typer.main.get_command(app).commands.items():  # type: ignore[attr-defined]
        callbacks = [command.callback] + [sub.callback for sub in getattr(command, "commands", {}).values()]
        found[name] = next(c for c in callbacks if c is not None).__module__
    return found


def test_every_module_is_reached_by_a_fast_test():
    every = modules()
    commands = command_modules()
    assert {"run", "index", "evaluate"} <= set(commands)
    start: set[str] = set()
    files = 0
    for path in sorted(TESTS.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        if path.name != "conftest.py" and not (path.name.startswith("test_") and has_fast_test(tree)):
            continue
        files += 1
        for node in ast.walk(tree):
            start |= _imports(node, "tests", False)
        start |= {f"{m}{suffix}" for m in RUN_MODULE.findall(text) for suffix in ("", ".__main__")}
        start |= {commands[c] for c in COMMAND.findall(text) if c in commands}
    assert files > 20
    graph = {name: {m for m in module_level_imports(path) | registry_targets(path) if m in every}
             for name, path in every.items()}
    reached: set[str] = set()
    todo = [m for m in start if m in every]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        todo += [*graph[name], *parents]
    missing = sorted(set(every) - reached)
    assert not missing, "no fast test reaches these modules (give each a test not marked slow):\n  " + \
        "\n  ".join(missing)
