"""The fusion record (``systems/fusion.json``): which systems fusion built and how their weights were obtained."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from apcir.errors import ApcirError
from apcir.io import read_json, write_json


class FusionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    systems: list[str] = Field(description="every system fusion built, in the order built")
    refers: dict[str, str] = Field(
        default_factory=dict, description="systems that are a list, by name: the list's run (relative to the run "
        "directory), which is stored once, not copied into systems/")
    protocol: str = Field(description="how the APCIR weights were obtained, e.g. '5-fold CV by conversation'")
    tuned_on_test: list[str] = Field(default_factory=list,
                                     description="systems whose weights were tuned on the qrels they are evaluated on")
    levels: str = Field("reformulator", description="whose levels picked the weights: reformulator or annotators")
    annotated: list[str] = Field(default_factory=list,
                                 description="systems whose runs used the annotators' levels (an oracle)")

    def save(self, path: Path) -> Path:
        write_json(path, self.model_dump(mode="json"))
        return path


def load_fusion_record(path: Path) -> FusionRecord:
    try:
        return FusionRecord.model_validate(read_json(path, "fusion record"))
    except ValidationError as exc:
        raise ApcirError(f"not a fusion record: {exc.errors()[0]['msg']}", path=path) from None
