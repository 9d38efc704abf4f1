"""No module outside a registry compares a registry entry's name: behaviour comes from the entry's spec.

A comparison such as ``settings.backend == "lucene-bm25"`` or ``name in ("entropy", "deps")`` outside the
module that defines the registry means a new entry must edit that module too. The registries' own modules (where
each spec is written) may name their entries.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "apcir"
REGISTRY_MODULES = {"reranking/registry.py", "fusion/systems.py", "retrieval/registry.py",
                    "reformulation/registry.py", "responses/registry.py", "submission/formats.py"}


def entry_names() -> set[str]:
    from apcir.fusion.systems import SYSTEMS
    from apcir.reformulation.registry import REFORMULATORS
    from apcir.reranking.registry import RERANKERS
    from apcir.responses.registry import RESPONDERS
    from apcir.retrieval.registry import BACKENDS
    from apcir.submission.formats import FORMATS

    names: set[str] = set()
    for registry in (SYSTEMS, REFORMULATORS, RERANKERS, RESPONDERS, BACKENDS, FORMATS):
        names.update(registry.names())
    # generic words that are also entry names ("llm", "file", "manual") are compared for other reasons too;
    # the test looks for the names that only a registry entry has
    return names - {"llm", "file"}


def _constants(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def comparisons(path: Path, names: set[str]) -> list[str]:
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        if not all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            continue
        for side in [node.left, *node.comparators]:
            hits = sorted(set(_constants(side)) & names)
            if hits:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: compares {', '.join(hits)}")
    return found


def test_no_module_outside_a_registry_compares_an_entry_name():
    names = entry_names()
    problems = [problem for path in sorted(ROOT.rglob("*.py"))
                if str(path.relative_to(ROOT)) not in REGISTRY_MODULES for problem in comparisons(path, names)]
    assert not problems, "\n".join(problems)


def test_the_check_sees_a_comparison(tmp_path):
    sample = ROOT / "_probe_for_test.py"
    try:
        sample.write_text('def f(settings):\n    return settings.backend == "lucene-bm25"\n')
        assert comparisons(sample, entry_names()) == ["_probe_for_test.py:2: compares lucene-bm25"]
    finally:
        sample.unlink()
