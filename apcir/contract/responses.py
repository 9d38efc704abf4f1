"""The response records: what the response stage writes and the export and evaluation stages read.

One :class:`ResponseRecord` per turn, one JSON line each (``responses.jsonl``).
The response ``text`` cites passages inline as ``[1]``, ``[2]``, ... where
``[n]`` is the n-th passage of ``passages`` (the top passages of the run the
responder was given, in ranking order); ``citations`` lists the cited passage
ids in the order of their numbers. ``ptkb_used`` holds the ids of the profile
statements the response relies on.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from apcir.contract.reformulations import Usage, load_turn_records

# An inline citation: [3], or a group [1, 3] (normalised to [1][3] by the responders).
CITATION = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")


def cited_numbers(text: str) -> list[int]:
    """The passage numbers cited in ``text``, in order of first appearance, without repeats."""
    seen: list[int] = []
    for match in CITATION.finditer(text):
        for part in match.group(1).split(","):
            number = int(part)
            if number not in seen:
                seen.append(number)
    return seen


def strip_citations(text: str) -> str:
    """``text`` without its inline citations (what a reader or ROUGE compares)."""
    return re.sub(r"\s+([.,;:!?])", r"\1", re.sub(r"\s*" + CITATION.pattern, "", text)).strip()


class ResponseRecord(BaseModel):
    """One line of a responses JSONL file."""

    turn_id: str
    responder: str = Field(description="'extractive' or the model that wrote the response")
    prompt_hash: str = ""
    status: Literal["ok", "failed"] = "ok"
    text: str = Field("", description="the response, citing passages inline as [1]..[k]")
    passages: list[str] = Field(default_factory=list, description="the passage ids given as [1]..[k], in order")
    citations: list[str] = Field(default_factory=list, description="cited passage ids, in the order of their numbers")
    ptkb_used: list[str] = Field(default_factory=list, description="ids of the profile statements the response used")
    error: str | None = None
    raw: str | None = Field(default=None, description="the raw answer, kept when it failed validation")
    seconds: float = 0.0
    usage: Usage = Field(default_factory=Usage)
    cached: bool = Field(default=False, description="the answer came from the LLM cache (no request sent)")
    notes: list[str] = Field(default_factory=list, description="what the responder did on its own (a skipped passage)")


def load_responses(path: Path, *, one_answer: bool = False) -> dict[str, ResponseRecord]:
    """Records by canonical turn id; a later line for the same turn replaces an earlier one (a resumed run appends
    a failed turn's new record). ``one_answer`` (what evaluation reads): a record after an ``ok`` record of the same
    turn is refused, naming both lines; apcir's own logs never hold one (a turn is answered again only after it
    failed)."""
    return load_turn_records(path, ResponseRecord, "response",
                             final=(lambda record: record.status == "ok") if one_answer else None)
