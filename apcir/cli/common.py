"""Shared pieces of the commands: consoles, JSON output, tables, and settings built from options."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

import typer
from pydantic import BaseModel, ValidationError
from rich.table import Table

from apcir.console import err as err_console
from apcir.console import out as console
from apcir.errors import ApcirError
from apcir.llm.batch import BatchSummary
from apcir.llm.settings import LLMSettings

__all__ = ["console", "err_console", "llm_options", "llm_values", "means_table", "print_json", "settings"]

M = TypeVar("M", bound=BaseModel)
S = TypeVar("S", bound=BatchSummary)


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no colour codes), for piping into other tools."""
    print(json.dumps(data, indent=2, ensure_ascii=False))


def means_table(title: str, measures: dict[str, float], n: int | None = None) -> Table:
    """A two-column table of measure means x100 (the scale of every human table of apcir), two decimals (trec_eval's
    four), over ``n`` judged turns when given; JSON keeps the raw values."""
    from rich.markup import escape

    table = Table(title=escape(f"{title} (x100)"))
    table.add_column("measure")
    table.add_column("mean x100", justify="right")
    for name, value in measures.items():
        table.add_row(name, f"{100 * value:.2f}")
    if n is not None:
        table.add_section()
        table.add_row("n", str(n))
    return table


def measure_columns(title: str, label: str, measures: Sequence[str], *, n: bool = True) -> Table:
    """An empty table of one row per system (or run): its ``label`` column, a right-aligned column per measure and,
    with ``n``, the judged turns each mean is over."""
    table = Table(title=title)
    table.add_column(label)
    for measure in measures:
        table.add_column(measure, justify="right")
    if n:
        table.add_column("n", justify="right")
    return table


def settings(model: type[M], /, **values: Any) -> M:
    """A stage's settings record from command-line values (None: the default); a bad value names its option."""
    given = {k: v for k, v in values.items() if v is not None}
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        first = exc.errors()[0]
        option = "--" + str(first["loc"][-1]).replace("_", "-") if first["loc"] else ""
        given_value = first.get("input")
        if isinstance(given_value, str) and "://" in given_value:
            from apcir.llm.settings import redact_url

            given_value = redact_url(given_value)  # never print credentials given in a URL
        message = str(first["msg"]).removeprefix("Value error, ")
        shown = f" {given_value!r}" if isinstance(given_value, (str, int, float)) and repr(given_value) not in \
            message else ""
        raise ApcirError(f"{option}{shown}: {message}" if option else message) from None


def checked(option: str, check: Callable[[str], str], value: str | None) -> str | None:
    """A command option's value through a settings check (``check_encoder``, a registry's ``validate``): its
    ``ValueError`` becomes the one line naming the option, before any work."""
    if value is None:
        return None
    try:
        return check(value)
    except ValueError as exc:
        shown = "" if repr(value) in str(exc) else f" {value!r}"
        raise ApcirError(f"{option}{shown}: {exc}") from None


def print_batch_summary(summary: BatchSummary, title: str, extra: Sequence[tuple[str, str]] = ()) -> None:
    """What a record-writing stage (reformulate, respond) did: counts, ``extra`` rows, usage, failed turns."""
    table = Table(title=f"{title} -> {summary.out}")
    table.add_column("what")
    table.add_column("count", justify="right")
    for name, value in (
        ("turns asked for", summary.turns), ("already done (resumed)", summary.skipped),
        ("written now: ok", summary.ok), ("written now: failed", summary.failed),
        ("answers from cache", summary.cache_hits), ("requests sent", summary.requests),
        ("  of which retries", summary.retries), ("  of which repairs", summary.repairs),
    ):
        table.add_row(name, str(value))
    for name, text in extra:
        table.add_row(name, text)
    table.add_row("seconds", f"{summary.seconds:.1f}")
    console.print(table)
    if summary.usage and any(u.requests for u in summary.usage):
        usage = Table(title="usage")
        for column in ("model", "requests", "input tokens", "output tokens", "mean latency s", "max latency s",
                       "output tokens/s", "cost $"):
            usage.add_column(column, justify="right" if column != "model" else "left")
        for u in summary.usage:
            usage.add_row(
                u.model, str(u.requests), str(u.input_tokens), str(u.output_tokens), f"{u.mean_latency:.2f}",
                f"{u.max_latency_seconds:.2f}", "-" if u.tokens_per_second is None else f"{u.tokens_per_second:.1f}",
                "unpriced" if u.cost_usd is None else f"{u.cost_usd:.4f}",
            )
        console.print(usage)
    if summary.failed:
        console.print(
            f"[yellow]{summary.failed} turns failed[/] ({', '.join(summary.failed_turns[:10])}"
            f"{', ...' if summary.failed > 10 else ''}); their records keep the error and raw answer; "
            "re-run the same command to ask them again",
            highlight=False,
        )
    console.print(f"summary: {summary.summary_path}", highlight=False)


def finish_batch(summary: S, as_json: bool, print_summary: Callable[[S], None]) -> None:
    """How a record-writing command (reformulate, respond) ends: its summary as JSON or as ``print_summary``'s
    tables, then exit status 1 when some turns failed (a re-run asks them again)."""
    if as_json:
        print_json(summary.model_dump())
    else:
        print_summary(summary)
    if summary.failed:
        raise typer.Exit(1)


# ---- the LLM options, one definition for every command that asks a model ------------------------------
@dataclass(frozen=True)
class _Option:
    """An LLM option: its help and least value are those of the :class:`~apcir.llm.settings.LLMSettings` field of
    the same name (written once, there)."""

    name: str
    annotation: Any
    default: Any
    flags: tuple[str, ...]

    @property
    def help(self) -> str:
        return field_help(LLMSettings, self.name)

    @property
    def minimum(self) -> float | None:
        return field_minimum(LLMSettings, self.name)


def field_help(model: type[BaseModel], name: str) -> str:
    """A settings field's description as an option's help: ``Requests in flight at most (default 8).``"""
    field = model.model_fields[name]
    text = field.description or ""
    default = field.get_default(call_default_factory=True)
    shown = f" (default {default})" if default not in (None, "", False) and "default" not in text else ""
    return f"{text[:1].upper()}{text[1:]}{shown}."


def field_minimum(model: type[BaseModel], name: str) -> float | None:
    """The least value a settings field takes (its ``ge``), for the option's ``min``."""
    return next((m.ge for m in model.model_fields[name].metadata if getattr(m, "ge", None) is not None), None)


_LLM_ARGUMENT = "llm"
"""The argument the LLM options are collected into."""

LLM_OPTIONS: tuple[_Option, ...] = (
    _Option("base_url", str | None, None, ("--base-url",)),
    _Option("api_key_env", str | None, None, ("--api-key-env",)),
    _Option("cache_dir", Path | None, None, ("--cache-dir",)),
    _Option("no_cache", bool, False, ("--no-cache",)),
    _Option("concurrency", int | None, None, ("--concurrency", "-j")),
    _Option("structured", str | None, None, ("--structured",)),
    _Option("temperature", float | None, None, ("--temperature",)),
    _Option("max_tokens", int | None, None, ("--max-tokens",)),
    _Option("timeout", float | None, None, ("--timeout",)),
    _Option("max_retries", int | None, None, ("--max-retries",)),
    _Option("retry_delay", float | None, None, ("--retry-delay",)),
    _Option("max_prompt_tokens", int | None, None, ("--max-prompt-tokens",)),
    _Option("prices", Path | None, None, ("--prices",)),
)


def llm_options(prefix: str = "", exclude: tuple[str, ...] = (),
                into: str = _LLM_ARGUMENT) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the LLM options (one definition for all of them), collected into its ``llm`` argument,
    a dict of the values given (``llm_values`` turns it into settings fields). ``prefix`` starts each help line
    (``"Judge: "``); ``exclude`` leaves options out. ``into="options"`` adds them, as settings fields (the values
    given), to the ``options`` argument :func:`entry_options` fills: for a stage whose settings record holds the
    client's keys flat beside its entry's own (``RespondSettings``, ``ReformulatorOptions``), every settings key
    given on the command line in one dict."""
    chosen = [o for o in LLM_OPTIONS if o.name not in exclude]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        hints = get_type_hints(command)
        signature = inspect.signature(command)
        params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()
                  if p.name != into]
        for option in chosen:
            info = typer.Option(option.default, *option.flags, help=prefix + option.help, min=option.minimum)
            params.append(inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=info,
                                            annotation=option.annotation))

        @functools.wraps(command)
        def wrapper(**values: Any) -> Any:
            given = {o.name: values.pop(o.name) for o in chosen}
            if into == _LLM_ARGUMENT:
                return command(**values, llm=given)
            own = values.pop(into, None) or {}
            return command(**values, **{into: {**{k: v for k, v in llm_values(given).items() if v is not None}, **own}})

        wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params} | {"return": hints.get("return")}
        del wrapper.__wrapped__  # typer must read the new signature, not the command's
        return wrapper

    return decorate


def llm_values(given: dict[str, Any]) -> dict[str, Any]:
    """The LLM options given on the command line as settings fields (None: not given)."""
    values = dict(given)
    for name in ("cache_dir", "prices"):
        if values.get(name) is not None:
            values[name] = str(values[name])
    values["no_cache"] = values.get("no_cache") or None
    return values


# ---- an entry's own options, generated from the models of a registry's entries -------------------------
def _cli_annotation(annotation: Any) -> Any | None:
    """The option type of a settings field (a Literal is given as text); None for a section (a nested model)."""
    import typing

    if typing.get_origin(annotation) is typing.Literal:
        return str | None
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    base = args[0] if len(args) == 1 else None
    if typing.get_origin(base) is typing.Literal:
        return str | None
    if base in (int, float, str, bool, Path):
        return base | None
    return None


def option_flag(name: str, field: Any) -> str:
    """The command-line flag of an entry's option: ``--min-words`` for ``min_words``, or the one its field names
    (``json_schema_extra={"flag": "--matcher-model"}``; a switch's two forms: ``"--batched/--per-nugget"``)."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    flag = extra.get("flag")
    return flag if isinstance(flag, str) else "--" + name.replace("_", "-")


def entry_flag(registry: Any, name: str, value: Any = None) -> str:
    """How the command line names the option ``name`` of a registry's entries, given ``value`` (for a message):
    ``--matcher-model``; a switch's form for its value (``--per-nugget`` for False)."""
    from apcir.options import option_fields

    option = option_fields(registry).get(name)
    if option is None:
        return name
    flag = option_flag(name, option.field)
    if "/" not in flag and isinstance(value, bool):
        flag = f"{flag}/--no-{name.replace('_', '-')}"
    on, _, off = flag.partition("/")
    return off if off and value is False else on


class EntryOptions:
    """A command with the options of a registry's entries (:func:`apcir.options.option_fields`) generated from
    their models, read when typer builds the command (so a plugin installed since is included), collected into
    the command's ``options`` argument: the values given, by settings key."""

    def __init__(self, command: Callable[..., Any], registry: Any, skip: Sequence[str] = ()) -> None:
        self.command = command
        self.registry = registry
        self.skip = set(skip)
        self.__name__ = getattr(command, "__name__", "command")
        self.__qualname__ = getattr(command, "__qualname__", self.__name__)
        self.__module__ = getattr(command, "__module__", __name__)
        self.__doc__ = command.__doc__

    def _own(self) -> list[tuple[inspect.Parameter, str]]:
        from apcir.options import option_fields

        taken = set(inspect.signature(self.command).parameters)
        params = []
        for name, option in option_fields(self.registry).items():
            annotation = _cli_annotation(option.field.annotation)
            if annotation is None or name in taken or name in self.skip:
                continue  # a section (rankgpt's llm: the LLM options), or a name the command has already
            flag = option_flag(name, option.field)
            flags = (f"{flag}/--no-{name.replace('_', '-')}",) if annotation == bool | None and "/" not in flag \
                else (flag,)
            default = option.field.get_default(call_default_factory=True)
            shown_default = f" (default {default})" if default not in (None, "") else ""
            info = typer.Option(None, *flags, help=f"{option.help}{shown_default}.", show_default=False)
            params.append((inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info,
                                             annotation=annotation), name))
        return params

    @property
    def __signature__(self) -> inspect.Signature:
        signature = inspect.signature(self.command)
        hints = get_type_hints(self.command)
        params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()
                  if p.name != "options"]
        return signature.replace(parameters=params + [p for p, _ in self._own()])

    @property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        hints = get_type_hints(self.command)
        return {p.name: p.annotation for p in self.__signature__.parameters.values()} | {"return": hints.get("return")}

    def __call__(self, **values: Any) -> Any:
        own = {name: values.pop(name) for _, name in self._own() if name in values}
        return self.command(**values, options={k: v for k, v in own.items() if v is not None})


def entry_options(registry: Any, skip: Sequence[str] = ()) -> Callable[[Callable[..., Any]], EntryOptions]:
    """Give a command the options of ``registry``'s entries (generated from each entry's options model, once for
    every command), collected into its ``options`` argument; ``skip`` leaves some out."""

    def decorate(command: Callable[..., Any]) -> EntryOptions:
        return EntryOptions(command, registry, skip)

    return decorate


def reformulation_records(path: Path | None, turns: Sequence[Any]) -> dict[str, Any]:
    """The records of a reformulations JSONL for ``turns``, read as ``apcir run`` reads its own: a failed or missing
    turn is searched with its utterance at level a (said in a warning), statement ids the profile lacks are warned
    about. No file: no record."""
    if path is None:
        return {}
    from apcir.contract.reformulations import filled_records, load_reformulations

    return filled_records(load_reformulations(path), turns, str(path))


TOPICS_FOR_QUERIES = ("With a reformulations JSONL: the topics it reformulates (bundled name or file); a turn whose "
                      "reformulation failed or is missing is then searched with its utterance at level a, as apcir "
                      "run does (without: it is skipped).")
