"""No module outside a registry compares a registry entry's name: behaviour comes from the entry's spec.

A comparison such as ``settings.backend == "lucene-bm25"`` or ``name in ("entropy", "deps")``, a prefix test such as
``responder.startswith("pathways:")``, or ``spec.name == "file"`` outside the module that defines the registry means
a new entry must edit that module too. The registries' own modules (where each spec is written) may name their
entries.

A name's syntax (``file:PATH``, ``pathways:MODEL``) is its spec's, read by ``Registry.resolve``: outside a registry's
module no prefix is tested, whether written out (``"file:"``), held in a constant (``PREFIX = "pathways:"``,
``removeprefix(PREFIX)``), imported from a registry (``startswith(EXTRACTIVE)``) or built (``f"{NAME}:"``).
"""

from __future__ import annotations

import ast
import importlib
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


PREFIX_METHODS = ("startswith", "endswith", "removeprefix", "partition", "split", "find", "index")


def _bound_names(tree: ast.AST, every: set[str]) -> dict[str, str]:
    """The module's names bound to an entry's name or prefix (``PREFIX = "pathways:"``, ``from
    apcir.responses.registry import EXTRACTIVE``), with the text each stands for."""
    registries = {"apcir." + m.removesuffix(".py").replace("/", ".") for m in REGISTRY_MODULES}
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str) and node.value.value.rstrip(":") in every:
            bound.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.ImportFrom) and node.module in registries:
            module = importlib.import_module(node.module)
            for alias in node.names:
                value = getattr(module, alias.name, None)
                if isinstance(value, str) and value.rstrip(":") in every and value.rstrip(":"):
                    bound[alias.asname or alias.name] = value
    return bound


def _prefix_text(node: ast.AST, bound: dict[str, str]) -> list[str]:
    """What a prefix test's argument spells, where it spells an entry's name: a constant, a bound name
    (``PREFIX``), or an f-string of them (``f"{NAME}:"``)."""
    if isinstance(node, ast.Name) and node.id in bound:
        return [bound[node.id]]
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name) and \
                    value.value.id in bound:
                parts.append(bound[value.value.id])
            else:
                break
        return ["".join(parts)] if parts else []
    return _constants(node)


def comparisons(path: Path, names: set[str], generic: set[str] = GENERIC) -> list[str]:
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    every = names | generic
    bound = _bound_names(tree, every)
    for name, text in sorted(bound.items()):
        if text.endswith(":"):
            found.append(f"{path.relative_to(ROOT)}: {name} holds the prefix {text}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in PREFIX_METHODS and node.args:
            texts = _prefix_text(node.args[0], bound)
            hits = sorted({c for c in texts if c.split(":")[0] in every and c.split(":")[0] and
                           (c.endswith(":") or c in names or node.func.attr in ("startswith", "removeprefix"))})
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


def test_the_check_sees_a_prefix_held_in_a_name_imported_or_built(tmp_path):
    sample = ROOT / "_probe_for_test3.py"
    try:
        sample.write_text('from apcir.responses.registry import EXTRACTIVE as NAME\n'
                          'PREFIX = "pathways:"\n\n\n'
                          'def f(responder):\n    return responder.removeprefix(PREFIX)\n\n\n'
                          'def g(responder):\n    return responder.startswith(NAME)\n\n\n'
                          'def h(method, kind):\n    return method.startswith(f"{kind}:"), method.startswith(f"{NAME}:")\n')
        assert comparisons(sample, entry_names()) == [
            "_probe_for_test3.py: PREFIX holds the prefix pathways:",
            "_probe_for_test3.py:6: removeprefix pathways:",
            "_probe_for_test3.py:10: startswith extractive",
            "_probe_for_test3.py:14: startswith extractive:"]
    finally:
        sample.unlink()
