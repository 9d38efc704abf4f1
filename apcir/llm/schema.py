"""The reformulation records every later stage reads.

:class:`ReformulationOutput` is what the LLM (or an offline reformulator)
must return for one turn; :class:`ReformulationRecord` is one line of the
reformulations JSONL: that output plus where it came from and what it cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from apcir.datasets.jsonio import iter_jsonl
from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id

Level = Literal["a", "b", "c"]
LEVELS: tuple[Level, ...] = ("a", "b", "c")

# The three reformulated inputs retrieved per turn, in fusion order (w1, w2, w3).
LIST_NAMES: tuple[str, ...] = ("rewrite", "rewrite_response", "third")


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

    def list_inputs(self) -> dict[str, tuple[str, str | None]]:
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


def load_reformulations(path: Path) -> dict[str, ReformulationRecord]:
    """Records by canonical turn id; a later line for the same turn replaces an earlier one."""
    records: dict[str, ReformulationRecord] = {}
    for number, raw in iter_jsonl(path):
        try:
            record = ReformulationRecord.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ApcirError(f"not a reformulation record: {where}: {first['msg']}", path=path, line=number) from None
        turn_id = canonical_turn_id(record.turn_id)
        records[turn_id] = record.model_copy(update={"turn_id": turn_id})
    return records
