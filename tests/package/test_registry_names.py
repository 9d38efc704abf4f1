"""No module outside a registry compares a registry entry's name: behaviour comes from the entry's spec.

A comparison such as ``settings.backend == "lucene-bm25"`` or ``name in ("entropy", "deps")``, a prefix test such as
``responder.startswith("pathways:")``, or ``spec.name == "file"`` outside the module that defines the registry means
a new entry must edit that module too. The registries' own modules (where each spec is written) may name their
entries.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "apcir"
REGISTRY_MODULES = {"reranking/registry.py", "fusion/systems.py", "retrieval/registry.py",
                    "reformulation/registry.py", "responses/registry.py", "submission/formats.py",
                    "evaluation/nuggets/registry.py"}
GENERIC = {"llm", "file"}
"""Generic words that are also entry names: compared for other reasons too, so only ``spec.name == ...`` and prefix
tests count for them."""


def entry_names(*, generic: bool = False) -> set[str]:
    from apcir.evaluation.nuggets.registry import MATCHERS
    from apcir.fusion.systems import SYSTEMS
    from apcir.reformulation.registry import REFORMULATORS
    from apcir.reranking.registry import RERANKERS
    from apcir.responses.registry import RESPONDERS
    from apcir.retrieval.registry import BACKENDS
    from apcir.submission.formats import FORMATS

    names: set[str] = set()
    for registry in (SYSTEMS, REFORMULATORS, RERANKERS, RESPONDERS, BACKENDS, FORMATS, MATCHERS):
        names.update(registry.names())
    # generic words that are also entry names ("llm", "file") are compared for other reasons too; the test looks
    # for the names that only a registry entry has, except where an entry's own name is compared
    return names if generic else names - GENERIC


def _constants(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _is_name_attribute(node: ast.AST) -> bool:
    """``spec.name``, ``RERANKERS.get(x).name``: an entry's own name."""
    return isinstance(node, ast.Attribute) and node.attr == "name"


def comparisons(path: Path, names: set[str], generic: set[str] = GENERIC) -> list[str]:
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    every = names | generic
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("startswith", "endswith", "removeprefix", "partition") and node.args:
            hits = sorted({c for c in _constants(node.args[0]) if c.rstrip(":") in every and c.rstrip(":")})
            if hits:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.attr} {', '.join(hits)}")
            continue
        if not isinstance(node, ast.Compare):
            continue
        if _is_name_attribute(node.left) or any(_is_name_attribute(c) for c in node.comparators):
            hits = sorted({c for side in [node.left, *node.comparators] for c in _constants(side)} & every)
            if hits:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: compares an entry's name with "
                             f"{', '.join(hits)}")
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


def test_the_check_sees_a_prefix_test_and_a_spec_name_comparison(tmp_path):
    sample = ROOT / "_probe_for_test2.py"
    try:
        sample.write_text('def f(responder, spec):\n    return responder.startswith("pathways:")\n\n\n'
                          'def g(spec):\n    return spec.name == "file"\n')
        assert comparisons(sample, entry_names()) == [
            "_probe_for_test2.py:2: startswith pathways:",
            "_probe_for_test2.py:6: compares an entry's name with file"]
    finally:
        sample.unlink()
