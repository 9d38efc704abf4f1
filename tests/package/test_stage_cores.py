"""One composition: outside a stage's own package, its work is reached only through the stage's core object.

Each stage has one core object in its package (``apcir/<stage>/core.py``): :class:`Reformulation`,
:class:`ListRetrieval`, :class:`LevelFusion`, :class:`Reranking`, :class:`StatementRanking` and :class:`Responding`.
``apcir run``'s composition (experiment/), the per-turn pipeline, the stage commands (cli/), the API's stage
functions, PyTerrier and the submission call those, never the functions behind them: then a change to how a stage
works reaches every front door at once. This test reads every module's imports (lazy ones included)."""

from __future__ import annotations

import ast
from pathlib import Path

import apcir

ROOT = Path(apcir.__file__).parent

STAGE_FUNCTIONS = {
    "apcir.reformulation.stage": {"reformulate"},
    "apcir.retrieval.stage": {"retrieve_lists", "list_queries"},
    "apcir.fusion.linear": {"fuse_linear"},
    "apcir.reranking.stage": {"rerank_run", "load_reranker"},
    "apcir.responses.stage": {"respond"},
    "apcir.responses.ptkb": {"rank_statements"},
    "apcir.responses.job": {"build_jobs"},
}
"""The functions that do a stage's work, by the module that defines them."""

CORES = {
    "apcir.reformulation": ("core", "Reformulation"),
    "apcir.retrieval": ("core", "ListRetrieval"),
    "apcir.fusion": ("core", "LevelFusion"),
    "apcir.reranking": ("core", "Reranking"),
    "apcir.responses": ("core", "Responding"),
}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _stage_calls(sources: list[tuple[str, str]] | None = None) -> list[str]:
    """``module:line imports ...`` for each stage function imported outside its package, in ``sources`` ((module,
    source) pairs; default: every module of apcir)."""
    if sources is None:
        sources = [(_module(p), p.read_text(encoding="utf-8")) for p in sorted(ROOT.rglob("*.py"))]
    found = []
    for module, source in sources:
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.ImportFrom) or node.module not in STAGE_FUNCTIONS:
                continue
            package = ".".join(node.module.split(".")[:2])
            if module == package or module.startswith(package + "."):
                continue  # the stage's own package composes its own functions
            for alias in node.names:
                if alias.name in STAGE_FUNCTIONS[node.module]:
                    found.append(f"{module}:{node.lineno} imports {node.module}.{alias.name}")
    return found


def test_no_module_outside_a_stage_calls_its_functions_but_through_its_core_object():
    assert _stage_calls() == []


def test_every_stage_has_its_core_object_in_its_package():
    import importlib

    for package, (module, name) in CORES.items():
        core = getattr(importlib.import_module(f"{package}.{module}"), name)
        assert callable(core), f"{package}.{module}.{name}"


def test_the_check_sees_a_stage_function_imported_lazily():
    """The check is not vacuous: a lazy import of a stage function outside its package is found, one inside is not."""
    source = "def f():\n    from apcir.fusion.linear import fuse_linear\n    return fuse_linear\n"
    assert _stage_calls([("apcir.cli.probe", source), ("apcir.fusion.probe", source)]) == [
        "apcir.cli.probe:2 imports apcir.fusion.linear.fuse_linear"]


def _imported(module: str) -> set[str]:
    """The apcir modules ``module`` imports (lazy ones included)."""
    path = ROOT.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT.parent / module.replace(".", "/") / "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("apcir"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names
                         if (ROOT.parent / node.module.replace(".", "/") / f"{a.name}.py").exists())
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("apcir"))
    return found


def test_the_per_turn_pipeline_does_not_stand_on_the_all_turns_runner():
    """experiment/turns.py reaches neither ``apcir run``'s composition (pipeline.py) nor its ``Experiment``, directly
    or through what it imports; the weights are resolved by one function that both call."""
    seen, todo = set(), ["apcir.experiment.turns"]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(m for m in _imported(module) if m not in seen)
    assert "apcir.experiment.pipeline" not in seen
    assert "apcir.experiment.weights" in seen
    from apcir.experiment import pipeline, turns, weights

    assert "resolve_weights" in vars(pipeline) and "resolve_weights" not in vars(turns)  # turns imports it lazily
    assert not [name for name, value in vars(pipeline).items() if callable(value) and name.endswith("weights")
                and getattr(value, "__module__", "") == pipeline.__name__]
    assert weights.resolve_weights.__module__ == "apcir.experiment.weights"


def test_every_built_in_entry_declares_its_own_options_model():
    """Reformulators, responders, re-rankers, nugget matchers and backends: each built-in entry names an options
    model of its own (an empty one where it reads no key), declared in the stage's package, not the shared base."""
    from apcir.evaluation.nuggets.registry import MATCHERS
    from apcir.options import Options, options_of
    from apcir.reformulation.registry import REFORMULATORS
    from apcir.reranking.registry import RERANKERS
    from apcir.responses.registry import RESPONDERS
    from apcir.retrieval.registry import BACKENDS

    lacking = []
    for registry, package in ((REFORMULATORS, "apcir.reformulation"), (RESPONDERS, "apcir.responses"),
                              (RERANKERS, "apcir.reranking"), (MATCHERS, "apcir.evaluation.nuggets"),
                              (BACKENDS, "apcir.retrieval")):
        for entry in registry:
            model = options_of(entry)
            if model is Options or not model.__module__.startswith(package + "."):
                lacking.append(f"{registry.concept} {entry.name}: {model.__module__}.{model.__name__}")
    assert lacking == []
