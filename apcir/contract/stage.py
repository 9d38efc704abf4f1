"""The stage protocol: each stage of ``apcir run`` is an object with a name, declared inputs, outputs and ``run()``.

A stage is a dataclass whose fields are its inputs: paths (standing for their
content), settings models and values. Its fingerprint, which decides whether
``apcir run`` reuses its outputs, is computed from those same fields plus the
identity of its code (the source of every module of its package and of the modules
it names in ``code``), so it is never written by hand. A field declared with
:func:`not_an_input` is handed over in memory and is derived from the declared
ones (e.g. the records of a reformulations file that is itself an input).

``run(context)`` does the work with what the experiment shares (runs written in
this process, the open index, passage texts, counters) and returns a
:class:`StageResult`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from apcir.contract.layout import RunLayout
from apcir.contract.records import Run


def not_an_input(default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """A stage field handed over in memory, not part of its fingerprint (derived from declared inputs)."""
    if default is not dataclasses.MISSING:
        kwargs["default"] = default
    return field(metadata={"input": False}, **kwargs)


def an_output() -> Any:
    """A stage field naming a file it writes: not an input (the file may not exist yet)."""
    return field(metadata={"input": False, "output": True})


@dataclass
class StageCounts:
    """What the stages of one invocation did, for its summary."""

    llm_requests: int = 0
    retrieval_calls: int = 0
    failed_turns: list[str] = field(default_factory=list)
    failed_windows: list[str] = field(default_factory=list)
    """Re-ranking requests whose answer could not be used (``turn#window``); asked again by the next run."""


@dataclass
class StageContext:
    """What an experiment's stages share."""

    layout: RunLayout
    experiment: str
    progress: bool
    write_run: Callable[[Run, Path, str, int | None], None]
    read_run: Callable[[Path], Run]
    backend: Callable[[], Any]
    """The open retrieval backend (opened once, on first use)."""
    passage_texts: Callable[[], Any]
    """The passage text store (``.texts(ids)``), or None when the configuration has none."""
    counts: StageCounts = field(default_factory=StageCounts)


@dataclass
class StageResult:
    detail: str = ""
    unfinished: bool = False
    """Leave the stage for the next run to resume (some turns failed and are asked again)."""


@lru_cache(maxsize=None)
def _source_digest(module: str) -> str:
    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec is not None else None
    if origin is None or not Path(origin).is_file():
        return module
    return hashlib.sha256(Path(origin).read_bytes()).hexdigest()[:16]


@lru_cache(maxsize=None)
def _package_modules(module: str) -> tuple[str, ...]:
    """Every module of the package ``module`` belongs to (its siblings, and the modules of its sub-packages, as
    ``apcir.evaluation.nuggets``): a stage's output depends on all of them."""
    package = module.rpartition(".")[0]
    spec = importlib.util.find_spec(package) if package else None
    if spec is None or not spec.submodule_search_locations:
        return (module,)
    found = {module}
    for location in spec.submodule_search_locations:
        found.update(".".join((package, *path.relative_to(location).with_suffix("").parts))
                     for path in Path(location).rglob("*.py") if path.stem != "__init__")
    return tuple(sorted(found))


def _encode(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value  # paths stay paths: the ledger fingerprints their content


@dataclass
class Stage:
    """Base of every stage; subclasses are dataclasses whose fields are their inputs."""

    code: ClassVar[tuple[str, ...]] = ()
    """Modules (besides those of the stage's own package) whose source decides the output."""

    @property
    def name(self) -> str:
        raise NotImplementedError

    def outputs(self) -> list[Path]:
        """The files the stage writes: those its :func:`an_output` fields name (a mapping's values), in field order;
        a stage whose outputs are not fields says so itself."""
        found: list[Path] = []
        for f in dataclasses.fields(self):
            if f.metadata.get("output", False):
                value = getattr(self, f.name)
                found += list(value.values()) if isinstance(value, dict) else [value]
        return found

    def run(self, context: StageContext) -> StageResult:
        raise NotImplementedError

    def declared_inputs(self) -> dict[str, Any]:
        """The fingerprinted inputs: every field but those declared with :func:`not_an_input`, and the code."""
        inputs = {f.name: _encode(getattr(self, f.name)) for f in dataclasses.fields(self)
                  if f.metadata.get("input", True)}
        modules = sorted({*_package_modules(type(self).__module__), *self.code})
        inputs["code"] = {module: _source_digest(module) for module in modules}
        return inputs
