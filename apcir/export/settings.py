"""The export stage's settings: the ``[export]`` config section."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from apcir.export.formats import FORMATS


class ExportSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str = Field("ikat24", description=f"one of: {FORMATS.help()}")
    text: Literal["pseudo", "passage"] = Field("pseudo", description="response text: the pseudo-response or top passage")
    run_type: str = Field("automatic", description="automatic or manual")
    team_id: str = Field("apcir", description="team id (2025 metadata)")
    allow_missing_text: bool = Field(
        False, description="write a submission even when cited passages have no text (validate then flags them)"
    )

    @field_validator("format")
    @classmethod
    def _registered(cls, value: str) -> str:
        if value not in FORMATS:
            raise ValueError(f"unknown submission format {value!r}: expected one of {', '.join(FORMATS.names())}")
        return value

    @field_validator("run_type")
    @classmethod
    def _run_type_of_the_format(cls, value: str, info: ValidationInfo) -> str:
        fmt = info.data.get("format")
        if isinstance(fmt, str) and fmt in FORMATS:
            allowed = FORMATS.get(fmt).run_types
            if value not in allowed:
                raise ValueError(f"not a run type the {fmt} validator accepts ({', '.join(allowed)})")
        return value

    @property
    def suffix(self) -> str:
        return FORMATS.get(self.format).suffix
