"""The reformulation records every stage after the first reads.

:class:`ReformulationOutput` is what a reformulator (an LLM, an offline rule,
or a file of rewrites made elsewhere) gives for one turn: the personalisation
level and three retrieval inputs. :class:`ReformulationRecord` is one line of
the reformulations JSONL: that output plus where it came from and what it cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from apcir.contract.records import Turn
from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id
from apcir.io import iter_jsonl

Level = Literal["a", "b", "c"]
LEVELS: tuple[Level, ...] = ("a", "b", "c")

# The three reformulated inputs retrieved per turn, in fusion order (w1, w2, w3).
LIST_NAMES: tuple[str, ...] = ("rewrite", "rewrite_response", "third")

# A retrieval input: a text, or (query text, pseudo-response or None), so that an
# encoder can cut each part to its own length budget before joining them.
QueryInput = str | tuple[str, str | None]


class ReformulationOutput(BaseModel):
    """The JSON object one LLM call returns for a turn."""

    model_config = ConfigDict(extra="ignore")

    reasoning: str = Field(description="why this level, and how the utterance was de-contextualised")
    level: Level = Field(description="a: no personalisation needed; b: profile is a bonus; c: profile is indispensable")
    rewrite: str = Field(description="stand-alone rewrite q' without the profile")
    response: str = Field(description="pseudo-response r' to q', without the profile")
    third_rewrite: str = Field(description="level a: another neutral rewrite q''; b/c: personalised rewrite q^u")
    third_response: str = Field(description="pseudo-response to third_rewrite")
    ptkb_used: list[str] = Field(default_factory=list, description="ids of the PTKB statements the third rewrite used")
    persona: list[str] = Field(default_factory=list, description="statements about the user this utterance reveals "
                                                                 "(asked for only when tracking the persona live)")

    @property
    def personalised_text(self) -> str:
        """The third input as one text (q^u + r^u at levels b/c): what DEPS compares with the passages."""
        return f"{self.third_rewrite} {self.third_response}".strip()


class Usage(BaseModel):
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


class ReformulationRecord(BaseModel):
    """One line of a reformulations JSONL file."""

    turn_id: str
    model: str
    prompt_hash: str = ""
    status: Literal["ok", "failed"] = "ok"
    output: ReformulationOutput | None = None
    error: str | None = None
    raw: str | None = Field(default=None, description="the raw answer, kept when it could not be parsed")
    seconds: float = 0.0
    usage: Usage = Field(default_factory=Usage)
    demonstrations: list[str] = Field(default_factory=list, description="turn ids used as few-shot demonstrations")
    cached: bool = Field(default=False, description="the answer came from the LLM cache (no request sent)")
    notes: list[str] = Field(
        default_factory=list, description="what the reformulator filled in itself (e.g. a level from a fallback)"
    )

    def list_inputs(self) -> dict[str, QueryInput]:
        """The three retrieval inputs as (query, response-or-None), keyed by :data:`LIST_NAMES`.

        Queries and responses are kept apart so the encoder can truncate each
        to its own length (64 and 256 tokens in the paper) before joining them.
        """
        if self.output is None:
            raise ApcirError(f"turn {self.turn_id}: reformulation failed ({self.error}); nothing to retrieve")
        out = self.output
        return {
            "rewrite": (out.rewrite, None),
            "rewrite_response": (out.rewrite, out.response),
            "third": (out.third_rewrite, out.third_response),
        }


M = TypeVar("M", bound=BaseModel)


def load_turn_records(path: Path, model: type[M], what: str, *,
                      final: Callable[[M], bool] | None = None) -> dict[str, M]:
    """Per-turn records of a JSONL file by canonical turn id; a later line for a turn replaces an earlier one (a
    resumed log appends a turn's new record after its failed one).

    ``final``: a record no other record of its turn may follow. Such a second record is refused, naming both
    lines and the ids as written (``0_10`` and ``0-10`` are one turn), instead of silently replacing the first."""
    records: dict[str, M] = {}
    lines: dict[str, tuple[int, str]] = {}
    for number, raw in iter_jsonl(path, f"{what}s file"):
        try:
            record = model.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ApcirError(f"not a {what} record: {where}: {first['msg']}", path=path, line=number) from None
        try:
            turn_id = canonical_turn_id(getattr(record, "turn_id"))  # noqa: B009
        except ApcirError as exc:
            raise ApcirError(str(exc), path=path, line=number) from None
        if final is not None and turn_id in records and final(records[turn_id]):
            earlier, written = lines[turn_id]
            given = getattr(record, "turn_id")  # noqa: B009
            same = f" (both are turn {turn_id})" if written != given else ""
            raise ApcirError(f"two {what}s for turn {turn_id}: line {earlier} ({written!r}) and line {number} "
                             f"({given!r}){same}; the later would silently replace the earlier: keep one",
                             path=path)
        records[turn_id] = record.model_copy(update={"turn_id": turn_id})
        lines[turn_id] = (number, str(getattr(record, "turn_id")))  # noqa: B009
    return records


def load_reformulations(path: Path) -> dict[str, ReformulationRecord]:
    """Records by canonical turn id; a later line for the same turn replaces an earlier one."""
    return load_turn_records(path, ReformulationRecord, "reformulation")


FALLBACK_REASONING = "fallback: the reformulator failed on this turn"


def with_fallbacks(records: Mapping[str, ReformulationRecord], turns: Iterable[Turn]) -> dict[str, ReformulationRecord]:
    """A record for every turn: a failed or missing turn is searched with its utterance at level a.

    The record keeps ``status: failed`` (and the error), so every later stage
    can tell it apart; its output is the raw utterance in all three inputs.
    """
    filled = {}
    for turn in turns:
        record = records.get(turn.turn_id)
        if record is None or record.output is None:
            output = ReformulationOutput(reasoning=FALLBACK_REASONING, level="a", rewrite=turn.utterance, response="",
                                         third_rewrite=turn.utterance, third_response="")
            record = ReformulationRecord(turn_id=turn.turn_id, model=record.model if record else "none",
                                         status="failed", output=output,
                                         error=record.error if record else "no record")
        filled[turn.turn_id] = record
    return filled


def levels_of(records: Mapping[str, ReformulationRecord]) -> dict[str, str]:
    """``turn_id -> level`` of every record with an output."""
    return {t: r.output.level for t, r in records.items() if r.output is not None}


def warn_unknown_statements(turns: Sequence[Turn], named: Mapping[str, Sequence[str]], source: str) -> int:
    """Warn, with the turn and the id, about statement ids in ``named`` (turn id -> ids, from ``source``) that
    the turn's profile lacks; they are never used or exported. Returns how many there were."""
    from apcir.console import warn

    profile = {t.turn_id: t.ptkb for t in turns}
    unknown = [(turn_id, str(sid).strip()) for turn_id, ids in named.items() if turn_id in profile
               for sid in ids if str(sid).strip() not in profile[turn_id]]
    if unknown:
        shown = ", ".join(f"turn {t}: {sid}" for t, sid in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        warn(f"{source}: {len(unknown)} PTKB statement id(s) that the turn's profile lacks ({shown}); ignored, "
             "never exported")
    return len(unknown)


def reformulation_statements(records: Mapping[str, ReformulationRecord]) -> dict[str, list[str]]:
    """The ``ptkb_used`` of every reformulation with an output, by turn."""
    return {t: list(r.output.ptkb_used) for t, r in records.items() if r.output is not None}


def filled_records(records: Mapping[str, ReformulationRecord], turns: Sequence[Turn],
                   source: str) -> dict[str, ReformulationRecord]:
    """A record for every turn of ``turns``, as every stage reads them: failed or missing ones searched with their
    raw utterance at level a (said in one warning, the same words from every front door), statement ids the profile
    lacks warned about (naming ``source``)."""
    from apcir.console import shown, warn

    chosen = list(turns)
    filled = with_fallbacks(records, chosen)
    warn_unknown_statements(chosen, reformulation_statements(filled), source)
    fallen = sorted(t for t, r in filled.items() if r.status == "failed")
    if records and chosen and not any(t.turn_id in records for t in chosen):
        warn(f"none of the {len(chosen)} topic turn(s) has a record in the reformulations given ({len(records)} "
             f"records, e.g. {next(iter(records))}): are they for these topics? Every turn is searched with its raw "
             "utterance at level a")
    elif fallen:
        warn(f"{len(fallen)} turn(s) have no reformulation and are searched with their raw utterance at level a: "
             f"{shown(fallen)}")
    return filled
