"""Plumbing written once: each of these is done in one place in apcir, which every other place calls.

* a ``"module:function"`` reference is resolved by :func:`apcir.registry.load_ref` alone;
* ``__version__`` is defined in :mod:`apcir._version`, and no module inside apcir imports it from the package top
  (an arrow back up to ``apcir/__init__.py``);
* JSONL is read through :mod:`apcir.io` (``iter_jsonl`` and the readers built on it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "apcir"


def sources() -> dict[str, str]:
    return {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in sorted(ROOT.rglob("*.py"))}


def test_module_function_references_are_resolved_in_one_place() -> None:
    split = {name for name, text in sources().items() if 'partition(":")' in text}
    imported = {name for name, text in sources().items() if re.search(r"getattr\(\s*importlib\.import_module\(", text)}
    assert split == {"registry.py"}, f'partition(":") outside apcir/registry.py: {sorted(split - {"registry.py"})}'
    assert imported <= {"registry.py"}, f"module:function looked up by hand in {sorted(imported - {'registry.py'})}"
    assert sum(text.count('partition(":")') for text in sources().values()) == 1


def test_load_ref_and_call_ref() -> None:
    from apcir.registry import call_ref, load_ref

    assert load_ref("os.path:join") is __import__("os").path.join
    assert call_ref("os.path:join", "a", "b") == "a/b"
    assert call_ref(lambda x: x + 1, 1) == 2
    assert call_ref(lambda *, target: target, target="milvus:x.db") == "milvus:x.db"  # any keyword is the call's
    with pytest.raises(AttributeError):
        load_ref("os.path:no_such_function")


def test_version_lives_in_its_own_module() -> None:
    import apcir
    from apcir._version import __version__

    assert apcir.__version__ == __version__
    for name, text in sources().items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module == "apcir" and node.level == 0:
                assert "__version__" not in {a.name for a in node.names}, f"{name} imports __version__ from apcir"
