"""Named choices: one registry per concept, the single source of its names.

Reformulators, retrieval backends, systems, re-rankers and export formats each
have one :class:`Registry`. Config validation, CLI help and dispatch all read
it, so adding an entry is the only change that makes a new name known
everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

from apcir.errors import ApcirError


class Named(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...


T = TypeVar("T", bound=Named)


class Registry(Generic[T]):
    """Entries by name, in the order they were added."""

    def __init__(self, concept: str) -> None:
        self.concept = concept
        self._entries: dict[str, T] = {}

    def add(self, entry: T) -> T:
        if entry.name in self._entries:
            raise ValueError(f"{self.concept} {entry.name!r} is registered twice")
        self._entries[entry.name] = entry
        return entry

    def get(self, name: str) -> T:
        """The entry called ``name``; an unknown name is an :class:`ApcirError` listing the choices."""
        try:
            return self._entries[name]
        except KeyError:
            raise ApcirError(f"unknown {self.concept} {name!r}: expected one of {', '.join(self._entries)}") from None

    def check(self, name: str) -> str:
        """``name`` if registered (for validators), else the same error as :meth:`get`."""
        self.get(name)
        return name

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[T]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def help(self) -> str:
        """``name (description); ...`` for command-line help."""
        return "; ".join(f"{e.name} ({e.description})" for e in self._entries.values())
