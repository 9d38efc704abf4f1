"""An entry's own settings: each registry entry with options of its own carries a pydantic model of them.

A re-ranker's spec names its :class:`Options` model (``RerankerSpec.options``); the stage's settings record
(:class:`EntrySettings`, e.g. ``RerankSettings``) holds the keys every entry shares and, in ``options``, the
chosen entry's own, validated against that entry's model. A config section and a command give them flat
(``[rerank]`` ``window = 10``, ``apcir rerank --window 10``), as before; the command-line options, their help and
the configuration reference are generated from the models (:func:`option_fields`), so a plugin's entry adds its
options everywhere with no edit to apcir.

A key of another entry is refused unless it has that entry's default (so a full dump of the settings reloads);
a key no entry has is an unknown key, with the closest keys of the section. A section that holds more than the
entry's settings may spell the entry's keys with a prefix (``ENTRY_PREFIX``: ``[evaluation]`` gives the nugget
matcher's ``tau`` as ``nugget_tau``, beside its ``nugget_matcher``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_serializer, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, InitErrorDetails

from apcir.errors import ApcirError
from apcir.registry import Registry, load_ref, syntax_of


class Options(BaseModel):
    """The options of an entry (none); an entry with options subclasses it."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def unread_with(cls, given: Mapping[str, Any]) -> frozenset[str]:
        """Its keys that the entry does not read when ``given`` are its values (the learned matcher's encoder
        beside a model file); none by default."""
        return frozenset()


OptionsT = TypeVar("OptionsT", bound=Options)


@dataclass(frozen=True)
class OptionField:
    """One option key as the entries of a registry declare it."""

    name: str
    entries: tuple[str, ...]
    """The entries that read it, in registry order."""
    field: FieldInfo
    spelt: tuple[str, ...] = ()
    """The entries as a user names them (``MODEL``, ``pathways:MODEL``, ``file:PATH``; else the name), in the same
    order."""

    @property
    def help(self) -> str:
        """``monot5, cross-encoder: pairs per forward pass``; ``MODEL, pathways:MODEL: ...`` for entries named so."""
        return f"{', '.join(self.spelt or self.entries)}: {self.field.description or ''}".rstrip(": ")


def spelling(entry: Any) -> str:
    """How a user names ``entry``: the first word of its ``usage`` (``MODEL``, ``pathways:MODEL``, ``file:PATH``) for
    an entry not named as it is (:func:`apcir.registry.syntax_of`), else its name."""
    usage = str(getattr(entry, "usage", "") or "").split()
    return usage[0] if syntax_of(entry) != "name" and usage else str(entry.name)


def options_of(entry: Any) -> type[Options]:
    """An entry's options model (:class:`Options` for an entry that declares none): a class, or a ``"module:Class"``
    reference to the entry's own module, imported now."""
    model = getattr(entry, "options", None)
    if isinstance(model, str):
        model = load_ref(model)
    return model if isinstance(model, type) and issubclass(model, Options) else Options


def option_fields(registry: Registry[Any], where: Callable[[Any], bool] | None = None) -> dict[str, OptionField]:
    """Every option key of the registry's entries (plugins included; those ``where`` accepts), in registry then
    field order."""
    found: dict[str, tuple[list[Any], FieldInfo]] = {}
    for entry in registry:
        if where is not None and not where(entry):
            continue
        for name, field in options_of(entry).model_fields.items():
            found.setdefault(name, ([], field))[0].append(entry)
    return {name: OptionField(name, tuple(e.name for e in entries), field, tuple(spelling(e) for e in entries))
            for name, (entries, field) in found.items()}


def not_used(registry: Registry[Any], chosen: Sequence[str], keys: Sequence[str],
             shown: Callable[[str], str] = str, where: Callable[[Any], bool] | None = None) -> str:
    """The one line refusing ``keys`` that none of the ``chosen`` entries reads, naming the entries that do (those
    ``where`` accepts): ``tau: not used by the llm nugget matcher (lexical, embedding, learned read it); remove it``."""
    every = option_fields(registry, where)
    readers = list(dict.fromkeys(e for key in keys if key in every for e in every[key].entries if e not in chosen))
    entries = " or ".join(chosen)
    concept = registry.concept + ("s" if len(chosen) > 1 else "")
    read = f" ({', '.join(readers)} read{'s' if len(readers) == 1 else ''} {'it' if len(keys) == 1 else 'them'})" \
        if readers else ""
    return (f"{', '.join(shown(k) for k in keys)}: not used by the {entries} {concept}{read}; remove "
            f"{'it' if len(keys) == 1 else 'them'}")


def reads(registry: Registry[Any], name: str, given: Mapping[str, Any]) -> list[str]:
    """The keys of ``given`` that entry ``name`` reads: its options model's, but those it leaves unread with these
    values (:meth:`Options.unread_with`)."""
    model = options_of(registry.get(name))
    skipped = model.unread_with(given)
    return [key for key in given if key in model.model_fields and key not in skipped]


def unread(registry: Registry[Any], chosen: Sequence[str], given: Mapping[str, Any]) -> list[str]:
    """The keys of ``given`` that none of the ``chosen`` entries reads."""
    read = {key for name in chosen for key in reads(registry, name, given)}
    return [key for key in given if key not in read]


class EntrySettings(BaseModel):
    """A stage's settings whose chosen entry (the field ``ENTRY_KEY`` names it in ``ENTRY_REGISTRY``) has keys of
    its own, given flat beside the shared ones and kept in ``options`` (an instance of the entry's model)."""

    model_config = ConfigDict(extra="forbid")

    ENTRY_KEY: ClassVar[str]
    ENTRY_REGISTRY: ClassVar[Registry[Any]]
    ENTRY_PREFIX: ClassVar[str] = ""
    """How the section's keys spell an entry's key ``k``: ``ENTRY_PREFIX + k`` (none by default)."""

    options: Any = Field(None, description="the chosen entry's own keys, given in the section itself")

    @classmethod
    def usable(cls, entry: Any) -> bool:
        """Whether the section may choose ``entry`` (whose keys are then the section's): every entry by default."""
        return True

    @classmethod
    def entry_fields(cls) -> dict[str, OptionField]:
        """The own keys of the entries the section may choose (:func:`option_fields`), unprefixed."""
        return option_fields(cls.ENTRY_REGISTRY, cls.usable)

    @classmethod
    def _entry_key(cls, spelt: str) -> str:
        """The entry's key a key of the section spells (``tau`` for ``nugget_tau``); "" when it spells none."""
        return spelt[len(cls.ENTRY_PREFIX):] if spelt.startswith(cls.ENTRY_PREFIX) else ""

    @classmethod
    def _entry_name(cls, data: dict[str, Any]) -> Any:
        return data.get(cls.ENTRY_KEY, cls.model_fields[cls.ENTRY_KEY].get_default(call_default_factory=True))

    @classmethod
    def entry_for(cls, name: Any) -> Any | None:
        """The entry a name stands for, as the registry reads names (``pathways:gpt-4o`` is ``pathways``'s, a model's
        name the open-ended entry's: :meth:`~apcir.registry.Registry.resolve`); None for no entry."""
        if not isinstance(name, str):
            return None
        try:
            return cls.ENTRY_REGISTRY.resolve(name)[0]
        except ApcirError:
            return None

    def entry(self) -> Any:
        """The chosen entry (its spec)."""
        return self.ENTRY_REGISTRY.resolve(getattr(self, self.ENTRY_KEY))[0]

    @model_validator(mode="before")
    @classmethod
    def _gather_options(cls, data: Any) -> Any:
        """The flat keys of the chosen entry moved into ``options``; another entry's key given a value other than its
        default refused in one line; a key no entry has left for ``extra="forbid"`` (an unknown key)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        given = data.pop("options", None)
        own: dict[str, Any] = dict(given) if isinstance(given, dict) else (
            given.model_dump(exclude_unset=True) if isinstance(given, BaseModel) else {})
        name = cls._entry_name(data)
        registry = cls.ENTRY_REGISTRY
        entry = cls.entry_for(name)
        chosen = options_of(entry) if entry is not None else None
        every = cls.entry_fields()
        foreign: list[str] = []
        for spelt in [k for k in data if k not in cls.model_fields]:
            key = cls._entry_key(spelt)
            if chosen is not None and key in chosen.model_fields:  # the chosen entry's, even one the section
                own[key] = data.pop(spelt)                           # refuses (its check says why)
            elif key in every:
                value = data.pop(spelt)
                if chosen is not None and not _is_default(every[key], value):
                    foreign.append(key)
        if foreign:
            raise ValueError(not_used(registry, [name], sorted(foreign), lambda key: cls.ENTRY_PREFIX + key,
                                      cls.usable))
        data["options"] = own
        return data

    @model_validator(mode="after")
    def _validate_options(self, info: ValidationInfo) -> EntrySettings:
        model = options_of(self.entry())
        if not isinstance(self.options, model):
            raw = self.options if isinstance(self.options, dict) else {}
            strict = bool((info.context or {}).get("strict"))  # a config is read strictly, its entry's keys too
            try:
                self.options = model.model_validate(raw, strict=strict)  # its errors name the key, as a shared key's do
            except ValidationError as exc:  # the key as the section spells it
                if not self.ENTRY_PREFIX:
                    raise
                raise ValidationError.from_exception_data(type(self).__name__, [
                    self._spelt(e) for e in exc.errors()]) from None
        return self

    @classmethod
    def _spelt(cls, error: ErrorDetails) -> InitErrorDetails:
        """An error of the entry's options, on the key as the section spells it (``nugget_tau``)."""
        loc = (cls.ENTRY_PREFIX + str(error["loc"][0]), *error["loc"][1:]) if error["loc"] else ()
        spelt: InitErrorDetails = {"type": error["type"], "loc": loc, "input": error["input"]}
        if "ctx" in error:
            spelt["ctx"] = error["ctx"]
        return spelt

    @model_serializer(mode="wrap")
    def _flat(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            options = data.pop("options", None)
            data.update({self.ENTRY_PREFIX + k: v for k, v in options.items()} if isinstance(options, dict) else {})
        return data

    def own(self, model: type[OptionsT]) -> OptionsT:
        """The chosen entry's options, as its own model (what its ``load`` reads)."""
        if not isinstance(self.options, model):
            raise TypeError(f"the {getattr(self, self.ENTRY_KEY)} {self.ENTRY_REGISTRY.concept}'s options are "
                            f"{type(self.options).__name__}, not {model.__name__}")
        return self.options

    @classmethod
    def keys(cls) -> list[str]:
        """Every key the section takes: the shared ones and every entry's own (for an unknown key's guesses)."""
        return [k for k in cls.model_fields if k != "options"] + [cls.ENTRY_PREFIX + k for k in cls.entry_fields()]

    @classmethod
    def field_of(cls, name: str) -> FieldInfo | None:
        """The field of key ``name``: a shared one, else the first entry's that has it."""
        if name in cls.model_fields and name != "options":
            return cls.model_fields[name]
        option = cls.entry_fields().get(cls._entry_key(name))
        return option.field if option is not None else None

    if not TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:  # ``settings.window``: the entry's own key, read as before
            options, key = self.__dict__.get("options"), self._entry_key(name)
            if isinstance(options, BaseModel) and key in type(options).model_fields:
                return getattr(options, key)
            return super().__getattr__(name)


def _is_default(option: OptionField, value: Any) -> bool:
    """Whether ``value`` is the default of ``key`` in the entry that declares it (a full dump reloads)."""
    from pydantic import TypeAdapter

    try:  # the key's type alone: the entry's other keys (one it requires) do not decide what its default is
        parsed = TypeAdapter(option.field.annotation or Any).validate_python(value)
    except ValidationError:
        return False
    return bool(parsed == option.field.get_default(call_default_factory=True))

