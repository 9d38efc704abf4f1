"""``apcir reformulate`` (the reformulation stage) and ``apcir prompt`` (inspect the prompt a turn gets)."""

from __future__ import annotations

import functools
import inspect
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_type_hints

import typer
from rich.table import Table

from apcir import datasets
from apcir.cli.common import (
    console,
    entry_options,
    finish_batch,
    llm_options,
    print_batch_summary,
    print_json,
    settings,
)
from apcir.console import rule
from apcir.errors import ApcirError
from apcir.io import refuse_inputs_as_outputs
from apcir.reformulation.core import Reformulation
from apcir.reformulation.file import parse_map
from apcir.reformulation.prompt import PromptOptions, build_prompt, estimate_tokens
from apcir.reformulation.registry import REFORMULATORS, usage_help
from apcir.reformulation.settings import ReformulatorOptions
from apcir.reformulation.stage import ReformulateSummary

_NO_COT = typer.Option(False, "--no-cot", help="Ablation: no reasoning asked for (no chain of thought).")
_NO_EXAMPLES = typer.Option(False, "--no-level-examples", help="Ablation: no short examples per level.")
_DEMOS = typer.Option(3, "--demonstrations", min=0, max=6, help="Few-shot demonstrations (0: ablation without).")
_NO_DEMOS = typer.Option(False, "--no-demonstrations", help="Ablation: same as --demonstrations 0.")
_HISTORY = typer.Option(None, "--history-turns", min=0, help="Keep only the last N history turns (default all).")
_RESPONSE_CHARS = typer.Option(
    None, "--history-response-chars", min=0, help="Cut history responses to N characters (default whole)."
)


_SWITCHES: list[tuple[str, Any, Any]] = [
    ("no_cot", bool, _NO_COT), ("no_level_examples", bool, _NO_EXAMPLES), ("demonstrations", int, _DEMOS),
    ("no_demonstrations", bool, _NO_DEMOS), ("history_turns", int, _HISTORY),
    ("history_response_chars", int, _RESPONSE_CHARS),
]
_PROMPT: Any = None
"""The default of a command's ``switches`` parameter, which :func:`prompt_switches` replaces by the switches."""


def prompt_options(
    no_cot: bool, no_level_examples: bool, demonstrations: int, no_demonstrations: bool,
    history_turns: int | None, response_chars: int | None,
) -> PromptOptions:
    """The prompt switches as the config's ``[reformulator.prompt]`` holds them."""
    return settings(
        PromptOptions,
        cot=not no_cot,
        level_examples=not no_level_examples,
        demonstrations=0 if no_demonstrations else demonstrations,
        history_turns=history_turns,
        history_response_chars=response_chars,
    )


def prompt_switches(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the prompt switches (--no-cot ... --history-response-chars, one definition for reformulate and
    prompt) where its ``switches`` parameter stands, which receives them as :class:`PromptOptions` (:func:`prompt_options`)."""
    hints = get_type_hints(command)
    signature = inspect.signature(command)
    params: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        if param.name == "switches":
            params += [inspect.Parameter(name, param.kind, default=info, annotation=annotation)
                       for name, annotation, info in _SWITCHES]
        else:
            params.append(param.replace(annotation=hints.get(param.name, param.annotation)))

    @functools.wraps(command)
    def wrapper(**values: Any) -> Any:
        switches = [values.pop(name) for name, _, _ in _SWITCHES]
        return command(**values, switches=prompt_options(*switches))

    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params} | {"return": hints.get("return")}
    del wrapper.__wrapped__  # typer must read the new signature, not the command's
    return wrapper


@entry_options(REFORMULATORS)
@llm_options(into="options")
@prompt_switches
def reformulate_command(
    topics: str = typer.Option(..., "--topics", "-t", help="Bundled topics (ikat23-test, ...) or a topic file."),
    method: str = typer.Option(..., "--method", "--llm", "-m", help=f"Who reformulates: {usage_help()}."),
    out: Path = typer.Option(..., "--out", "-o", help="Reformulations JSONL (appended; a re-run resumes)."),
    turns: list[str] = typer.Option(None, "--turns", help="Only these turn ids (repeat or comma-separate)."),
    judged_only: str = typer.Option(None, "--judged-only", help="Only turns judged in these qrels (name or file)."),
    refresh: bool = typer.Option(
        False, "--refresh", help="Start over: ignore the output's records and cached answers (the cache is updated)."
    ),
    switches: PromptOptions = _PROMPT,
    field_map: list[str] = typer.Option(
        None, "--map", help="file:PATH: apcir_field=file_field pairs, e.g. rewrite=rar_rw,response=rar_rs."
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    options: dict[str, Any] | None = None,
) -> None:
    """Personalisation level and three reformulations per turn, one JSONL record per turn."""
    chosen = settings(ReformulatorOptions, method=method, prompt=_given(switches), map=parse_map(field_map) or None,
                      **(options or {}))
    refuse_inputs_as_outputs([out], [topics, judged_only, *chosen.inputs(), chosen.prices, chosen.cache_dir])
    selected = datasets.select_turns(topics, turns, judged_only)
    summary = Reformulation(chosen, out, progress=not no_progress).make(selected, refresh=refresh)
    finish_batch(summary, as_json, print_summary)


def _given(prompt: PromptOptions) -> PromptOptions | None:
    """The prompt options when a flag changed them (None: the defaults, which an offline reformulator accepts)."""
    return None if prompt == PromptOptions() else prompt


def print_summary(summary: ReformulateSummary) -> None:
    levels = "/".join(str(summary.levels.get(x, 0)) for x in "abc")
    rows = [("levels written (a/b/c)", levels)]
    if summary.fallback_levels:  # file:PATH: say which levels the file gave and which the fallback did
        fallback = [summary.fallback_levels.get(x, 0) for x in "abc"]
        rows += [("  of which from the file", "/".join(str(summary.levels.get(x, 0) - f) for x, f in
                                                      zip("abc", fallback))),
                 ("  of which from --level-fallback", "/".join(map(str, fallback)))]
    print_batch_summary(summary, f"reformulate {summary.model}", rows)


@prompt_switches
def prompt_command(
    topics: str = typer.Option(..., "--topics", "-t", help="Bundled topics or a topic file."),
    turn: str = typer.Option(None, "--turn", help="Print the messages of this turn."),
    stats: bool = typer.Option(False, "--stats", help="Prompt size over all turns (characters, estimated tokens)."),
    switches: PromptOptions = _PROMPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show the prompt a turn gets, or the prompt size per turn (no request is sent)."""
    if (turn is None) == (not stats):
        raise ApcirError("give either --turn TURN_ID or --stats")
    if turn is not None:
        (selected,) = datasets.select_turns(topics, [turn])
        prompt = build_prompt(selected, switches)
        if as_json:
            print_json({"turn_id": prompt.turn_id, "prompt_hash": prompt.hash,
                        "demonstrations": prompt.demonstrations, "messages": prompt.messages})
            return
        for message in prompt.messages:
            rule(message["role"])
            console.print(message["content"], markup=False, highlight=False)
        rule()
        console.print(
            f"{prompt.characters} characters, ~{estimate_tokens(''.join(m['content'] for m in prompt.messages))} "
            f"tokens (characters/4); demonstrations {', '.join(prompt.demonstrations) or 'none'}; hash {prompt.hash}",
            highlight=False,
        )
        return
    sizes = []
    for item in datasets.topics(topics):
        prompt = build_prompt(item, switches)
        sizes.append((prompt.characters, estimate_tokens("".join(m["content"] for m in prompt.messages))))
    tokens = [t for _, t in sizes]
    chars = [c for c, _ in sizes]
    payload = {
        "topics": topics,
        "turns": len(sizes),
        "tokens_estimate": "characters / 4",
        "tokens": {"min": min(tokens), "median": statistics.median(tokens), "mean": round(statistics.fmean(tokens), 1),
                   "max": max(tokens), "total": sum(tokens)},
        "characters": {"mean": round(statistics.fmean(chars), 1), "max": max(chars), "total": sum(chars)},
    }
    if as_json:
        print_json(payload)
        return
    table = Table(title=f"prompt size per turn, {topics} ({len(sizes)} turns; tokens = characters / 4)")
    for column in ("", "min", "median", "mean", "max", "total"):
        table.add_column(column, justify="right")
    t = payload["tokens"]
    table.add_row("tokens", *(str(t[k]) for k in ("min", "median", "mean", "max", "total")))  # type: ignore[index]
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("reformulate")(reformulate_command)
    app.command("prompt")(prompt_command)
