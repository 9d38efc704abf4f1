"""The export stage's settings: the ``[export]`` config section."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from apcir.export.formats import FORMATS


class ExportSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str = Field("ikat24", description=f"one of: {FORMATS.help()}")
    text: Literal["pseudo", "passage"] = Field("pseudo", description="response text: the pseudo-response or top passage")
    run_type: str = Field("automatic", description="automatic or manual")
    team_id: str = Field("apcir", description="team id (2025 metadata)")

    @field_validator("format")
    @classmethod
    def _registered(cls, value: str) -> str:
        if value not in FORMATS:
            raise ValueError(f"unknown submission format {value!r}: expected one of {', '.join(FORMATS.names())}")
        return value

    @property
    def suffix(self) -> str:
        return FORMATS.get(self.format).suffix
