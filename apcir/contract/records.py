"""The records of the data every stage starts from: turns of a conversation, passages, runs and judgements."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# A run and a set of judgements, in the shape pytrec_eval, ranx and ir-measures
# all accept: {turn_id: {passage_id: score}} and {turn_id: {passage_id: grade}}.
Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]


class HistoryEntry(BaseModel):
    """One earlier turn as a system sees it: the utterance and the canonical response."""

    model_config = ConfigDict(frozen=True)

    turn_id: str
    utterance: str
    response: str


class Turn(BaseModel):
    """One user turn of an iKAT conversation, whatever the year's schema."""

    model_config = ConfigDict(frozen=True)

    turn_id: str = Field(description="canonical id, e.g. 9-1_3")
    conversation_id: str
    turn_number: int
    title: str = ""
    utterance: str
    manual_rewrite: str = Field("", description="the annotators' resolved, personalised utterance")
    response: str = Field("", description="the canonical system response of this turn")
    ptkb: dict[str, str] = Field(
        default_factory=dict, description="PTKB statement id -> text, in the profile's order"
    )
    ptkb_provenance: list[str] = Field(
        default_factory=list, description="ids of the PTKB statements the annotators judged relevant"
    )
    response_provenance: list[str] = Field(
        default_factory=list, description="passage ids cited by the canonical response"
    )
    history: list[HistoryEntry] = Field(default_factory=list)

    def __repr__(self) -> str:
        """One line: the id, the utterance (cut) and how much history and profile it carries (the fields hold
        the rest)."""
        return (f"Turn({self.turn_id!r}, utterance={_cut(self.utterance)!r}, {len(self.history)} earlier turns, "
                f"{len(self.ptkb)} PTKB statements)")

    __str__ = __repr__


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


class Passage(BaseModel):
    """One passage of a collection."""

    model_config = ConfigDict(frozen=True)

    id: str
    contents: str
