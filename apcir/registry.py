"""Named choices: one registry per concept, the single source of its names.

Reformulators, retrieval backends, systems, re-rankers and export formats each
have one :class:`Registry`. Config validation, CLI help and dispatch all read
it, so adding an entry is the only change that makes a new name known
everywhere.

Third-party packages add entries through entry points, as PyTerrier's
``pyterrier.modules`` do: a registry with a ``group`` (``apcir.backends``,
``apcir.rerankers``, ``apcir.formats``, ``apcir.reformulators``,
``apcir.responders``, ``apcir.matchers``) loads, on first use, every entry point
of that group. An entry point names a spec (a ``BackendSpec``,
``RerankerSpec``, ...), a list of them, or a function returning either::

    # the plugin's pyproject.toml
    [project.entry-points."apcir.backends"]
    toy = "toy_plugin:BACKEND"

A plugin entry never replaces a built-in one of the same name (a warning says
so). An entry with options of its own names their pydantic model (see
:mod:`apcir.options`); a settings field holding a registered name is
``Annotated[str, InRegistry(REGISTRY)]`` (:class:`InRegistry`).

A name that is not registered is refused in one line that names it and the
closest registered names (:func:`unknown_name`), wherever it is given: a config
key, a config value or a command's option. A registry whose other names stand
for something open-ended (a reformulator or responder name that is not
registered is a model's) refuses only a name that is a near miss of a
registered one (:meth:`Registry.near_miss`), so ``heuristc`` is caught before any
model is asked for it.

An entry owns its name syntax (its ``syntax``, :data:`Syntax`): it is named as it
is (``heuristic``), by its name and an argument (``file:PATH``, ``pathways:MODEL``),
or it takes any other name (a model's: ``gpt-4o``). :meth:`Registry.resolve` reads a
name so, the one place that does: no caller tests a prefix.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from typing import Any, Generic, Literal, Protocol, TypeVar

from apcir.errors import ApcirError


def load_ref(ref: str) -> Any:
    """The object a ``"module:name"`` reference names (``"apcir.reranking.monot5:load"``), imported now: how every
    registry entry names its functions and classes, so that a module loads only when its entry is used.

    A module part ending in ``.py`` is a Python file (``"retrievers.py:bm25"``, relative to the working directory),
    imported once from there, so that a config can name a function of a file beside it without installing it."""
    module, _, name = ref.partition(":")
    if module.endswith(".py"):
        return getattr(_file_module(module), name)
    return getattr(importlib.import_module(module), name)


def _file_module(path: str) -> Any:
    """The module of a Python file, imported once per resolved path (under a name of its own in ``sys.modules``)."""
    import hashlib
    import importlib.util
    import sys
    from pathlib import Path

    where = Path(path).expanduser().resolve()
    key = f"_apcir_file_{where.stem}_{hashlib.sha256(str(where).encode()).hexdigest()[:12]}"
    if key in sys.modules:
        return sys.modules[key]
    if not where.is_file():
        raise ModuleNotFoundError(f"no such Python file: {path}")
    spec = importlib.util.spec_from_file_location(key, where)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[key]
        raise
    return module


def call_ref(function: str | Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call ``function``: a function, or a ``"module:function"`` reference (:func:`load_ref`); every other
    argument, keywords included, is the call's."""
    target = load_ref(function) if isinstance(function, str) else function
    return target(*args, **kwargs)


class Named(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...


T = TypeVar("T", bound=Named)

Syntax = Literal["name", "prefix", "other"]
"""How a config or a command names an entry: ``name``, by its name (``heuristic``); ``prefix``, by its name, a colon
and an argument (``file:PATH``, ``pathways:MODEL``); ``other``, by any name no other entry takes (a model's name,
``gpt-4o``: the argument is the whole name). An entry without a ``syntax`` attribute is named by its name."""


def syntax_of(entry: Any) -> Syntax:
    """An entry's :data:`Syntax` (``name`` when it declares none)."""
    found = getattr(entry, "syntax", "name")
    return "prefix" if found == "prefix" else "other" if found == "other" else "name"

NEAR_MISS = 0.8
"""How alike (difflib's ratio) an unregistered name must be to a registered one to be taken for a misspelling of it,
where an unregistered name is otherwise allowed (a model's name)."""


LISTED = 12
"""The most choices an error line lists when it can say where they are all listed."""


def closest(value: str, choices: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The choices most like ``value`` (difflib), best first; case is ignored."""
    choices = list(dict.fromkeys(choices))
    by_folded = {c.casefold(): c for c in reversed(choices)}
    return [by_folded[m] for m in difflib.get_close_matches(value.casefold(), list(by_folded), n=n, cutoff=cutoff)]


def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a.casefold(), b.casefold()).ratio()


def unknown_name(what: str, value: str, choices: Iterable[str], *, hint: str = "", where_listed: str = "",
                 prefix: str = "") -> str:
    """One line for a name that is not one of ``choices``: ``unknown re-ranker 'monot': did you mean 'monot5'?
    (expected one of monot5, cross-encoder, rankgpt)``. ``hint`` follows the list (``, or a path to a file``); more
    than :data:`LISTED` choices are counted, not listed, where ``where_listed`` says where they are listed. ``prefix`` is shown
    before the value and each choice (``fusion.``) but not compared."""
    listed = list(dict.fromkeys(choices))
    near = closest(value, listed)
    guess = f"did you mean {' or '.join(repr(prefix + c) for c in near)}? " if near else ""
    expected = (f"one of {', '.join(prefix + c for c in listed)}" if len(listed) <= LISTED or not where_listed else
                f"one of {len(listed)} names{where_listed}") if listed else "none is registered"
    return f"unknown {what} {prefix + value!r}: {guess}(expected {expected}{hint})"


def near_miss(what: str, name: str, usages: Iterable[str], *, other: str = "a model's name") -> str | None:
    """The one line refusing ``name`` when it is none of ``usages`` but nearly spells one of them (a usage ending
    in ``:`` is a prefix, compared with the name's own prefix); None otherwise: where any other name is allowed
    (``other``: a model's name), only a near miss is taken for a mistake."""
    known = list(usages)
    if name in known:
        return None
    prefix = name[:name.index(":") + 1] if ":" in name else ""

    def alike(usage: str) -> bool:
        if usage.endswith(":"):
            return bool(prefix) and prefix != usage and _ratio(prefix, usage) >= NEAR_MISS
        return _ratio(name, usage) >= NEAR_MISS

    if not any(alike(k) for k in known):
        return None
    return unknown_name(what, name, [k + "..." if k.endswith(":") else k for k in known], hint=f", or {other}")


class Registry(Generic[T]):
    """Entries by name, in the order they were added."""

    def __init__(self, concept: str, group: str | None = None) -> None:
        self.concept = concept
        self.group = group
        """The entry-point group plugins register in (None: no plugins)."""
        self._entries: dict[str, T] = {}
        self._plugins_loaded = group is None

    def load_plugins(self, *, again: bool = False) -> list[str]:
        """Add the entries of the group's entry points (once; ``again`` re-reads them); returns the names added."""
        if self._plugins_loaded and not again:
            return []
        self._plugins_loaded = True
        added: list[str] = []
        for point in metadata.entry_points(group=str(self.group)):
            try:
                found: Any = point.load()
                if callable(found) and not hasattr(found, "name"):
                    found = found()
            except Exception as exc:  # a broken plugin must not break apcir: say which and why
                from apcir.console import warn

                warn(f"the {self.concept} plugin {point.name!r} ({point.value}) could not be loaded: "
                     f"{type(exc).__name__}: {exc}")
                continue
            for entry in found if isinstance(found, (list, tuple)) else [found]:
                if entry.name in self._entries:
                    if self._entries[entry.name] is not entry:
                        from apcir.console import warn

                        warn(f"the {self.concept} plugin {point.value} registers {entry.name!r}, which apcir already "
                             "has: ignored")
                    continue
                self._entries[entry.name] = entry
                added.append(entry.name)
        return added

    def add(self, entry: T) -> T:
        if entry.name in self._entries:
            raise ValueError(f"{self.concept} {entry.name!r} is registered twice")
        self._entries[entry.name] = entry
        return entry

    def get(self, name: str) -> T:
        """The entry called ``name``; an unknown name is an :class:`ApcirError` listing the choices."""
        self.load_plugins()
        try:
            return self._entries[name]
        except KeyError:
            raise ApcirError(unknown_name(self.concept, name, self._entries)) from None

    def check(self, name: str) -> str:
        """``name`` if registered (for validators), else the same error as :meth:`get`."""
        self.get(name)
        return name

    def validate(self, name: str) -> str:
        """:meth:`check` for a pydantic validator (a ``ValueError``, which pydantic reports on the field)."""
        if name not in self:
            raise ValueError(unknown_name(self.concept, name, self._entries))
        return name

    def near_miss(self, name: str, usages: Iterable[str] | None = None) -> str | None:
        """For a registry where an unregistered name is allowed (it names a model): the one line refusing ``name``
        when it is not registered but nearly spells a registered name, or one of ``usages`` (how names are written;
        ``pathways:`` stands for a prefix); None when it is registered or like none of them (:func:`near_miss`)."""
        self.load_plugins()
        if name in self._entries:
            return None
        return near_miss(self.concept, name, list(usages) if usages is not None else list(self._entries))

    def resolve(self, name: str) -> tuple[T, str]:
        """The entry ``name`` stands for and the argument the name gives it, as the entries' syntax says
        (:data:`Syntax`): an entry named as it is (argument ``""``); ``NAME:ARGUMENT`` of an entry named with an
        argument (the text after the first colon, which may be empty: :class:`InRegistry` refuses that); else the
        entry that takes any other name (the argument is the whole name). In a registry without such an entry an
        unknown name is refused as :meth:`get` refuses it."""
        self.load_plugins()
        entry = self._entries.get(name)
        if entry is not None and syntax_of(entry) == "name":
            return entry, ""
        colon = name.find(":")  # NAME:ARGUMENT (a module:function reference is load_ref's, not a name)
        entry = self._entries.get(name[:colon]) if colon > 0 else None
        argument = name[colon + 1:]
        if entry is not None and syntax_of(entry) == "prefix":
            return entry, argument
        other = next((e for e in self._entries.values() if syntax_of(e) == "other"), None)
        if other is None:
            return self.get(name), ""
        return other, name

    def usages(self) -> list[str]:
        """How names other than the open-ended entry's are written: the entries named as they are, and ``NAME:`` for
        those named with an argument (the prefixes a near miss is compared with)."""
        self.load_plugins()
        return [e.name + (":" if syntax_of(e) == "prefix" else "") for e in self._entries.values()
                if syntax_of(e) != "other"]

    def names(self) -> tuple[str, ...]:
        self.load_plugins()
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        self.load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[T]:
        self.load_plugins()
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        self.load_plugins()
        return len(self._entries)

    def help(self) -> str:
        """``name (description); ...`` for command-line help."""
        self.load_plugins()
        return "; ".join(f"{e.name} ({e.description})" for e in self._entries.values())


class InRegistry:
    """The one annotated type for "a name registered in ``registry``": ``Annotated[str, InRegistry(RERANKERS)]``
    refuses (a pydantic error on the field) a name the registry does not have, with the closest names, as
    :meth:`Registry.validate` does; ``open_ended`` registries (a responder's other names are models') refuse only
    a near miss (:meth:`Registry.near_miss`, ``usages`` as it takes them, by default :meth:`Registry.usages`) and
    an entry's name without the argument it needs (``file:``). With ``blank`` (the message refusing an
    empty name), the name is stripped first."""

    def __init__(self, registry: Registry[Any], *, open_ended: bool = False,
                 usages: Callable[[], Iterable[str]] | None = None, blank: str | None = None) -> None:
        self.registry = registry
        self.open_ended = open_ended
        self.usages = usages
        self.blank = blank

    def check(self, name: str) -> str:
        if self.blank is not None:
            if not name.strip():
                raise ValueError(self.blank)
            name = name.strip()
        if not self.open_ended:
            return self.registry.validate(name)
        problem = self.registry.near_miss(name, self.usages() if self.usages is not None else self.registry.usages())
        if problem is not None:
            raise ValueError(problem)
        entry, argument = self.registry.resolve(name)
        if syntax_of(entry) == "prefix" and not argument.strip():
            usage = getattr(entry, "usage", f"{entry.name}:...")
            raise ValueError(f"{name!r}: the {entry.name} {self.registry.concept} needs what follows the colon "
                             f"({usage})")
        return name

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self.check, handler(source))
