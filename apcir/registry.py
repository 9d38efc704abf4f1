"""Named choices: one registry per concept, the single source of its names.

Reformulators, retrieval backends, systems, re-rankers and export formats each
have one :class:`Registry`. Config validation, CLI help and dispatch all read
it, so adding an entry is the only change that makes a new name known
everywhere.

Third-party packages add entries through entry points, as PyTerrier's
``pyterrier.modules`` do: a registry with a ``group`` (``apcir.backends``,
``apcir.rerankers``, ``apcir.formats``, ``apcir.reformulators``) loads, on
first use, every entry point of that group. An entry point names a spec (a
``BackendSpec``, ``RerankerSpec``, ...), a list of them, or a function
returning either::

    # the plugin's pyproject.toml
    [project.entry-points."apcir.backends"]
    toy = "toy_plugin:BACKEND"

A plugin entry never replaces a built-in one of the same name (a warning says
so).
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import metadata
from typing import Any, Generic, Protocol, TypeVar

from apcir.errors import ApcirError


class Named(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...


T = TypeVar("T", bound=Named)


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
            raise ApcirError(f"unknown {self.concept} {name!r}: expected one of {', '.join(self._entries)}") from None

    def check(self, name: str) -> str:
        """``name`` if registered (for validators), else the same error as :meth:`get`."""
        self.get(name)
        return name

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
