"""The export stage's settings: the ``[export]`` config section."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from apcir.errors import ApcirError
from apcir.submission.formats import FORMATS, format_for_year


class ExportSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str | None = Field(
        None, description=f"one of: {FORMATS.help()}; default: the format of the topics' year (ikat23 for 2023 topics)"
    )
    text: Literal["pseudo", "passage"] = Field("pseudo", description="response text: the pseudo-response or top passage")
    run_type: str = Field("automatic", description="automatic or manual (2024 also only_response; 2025 generation-only)")
    team_id: str = Field("apcir", description="team id (2025 metadata)")
    allow_missing_text: bool = Field(
        False, description="write a submission even when cited passages have no text (validate then flags them)"
    )
    eval_response: bool = Field(True, description="ikat24: have the organisers judge the responses (false: retrieval only)")
    ptkb: Literal["auto", "used", "ranked"] = Field(
        "auto", description="PTKB provenance: ranked (every statement, best first; the 2023 default), used (the "
                            "statements the response used; the 2024/2025 default), auto"
    )

    @field_validator("format")
    @classmethod
    def _registered(cls, value: str | None) -> str | None:
        return value if value is None else FORMATS.validate(value)

    @field_validator("team_id")
    @classmethod
    def _team_named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; give your team's id (the organisers match runs to teams by it)")
        return value.strip()

    @field_validator("run_type")
    @classmethod
    def _run_type_of_the_format(cls, value: str, info: ValidationInfo) -> str:
        fmt = info.data.get("format")
        if isinstance(fmt, str) and fmt in FORMATS:
            allowed = FORMATS.get(fmt).run_types
            if value not in allowed:
                raise ValueError(f"not a run type the {fmt} validator accepts ({', '.join(allowed)})")
        return value

    def resolved(self, topics_year: int) -> ExportSettings:
        """These settings with ``format`` set (the topics' year's when it is not given); the run type is checked."""
        fmt = self.format or format_for_year(topics_year)
        allowed = FORMATS.get(fmt).run_types
        if self.run_type not in allowed:
            raise ApcirError(f"run_type {self.run_type!r} is not a run type the {fmt} validator accepts "
                             f"({', '.join(allowed)})")
        return self.model_copy(update={"format": fmt})

    @property
    def suffix(self) -> str:
        if self.format is None:
            raise ValueError("the format is resolved from the topics first (ExportSettings.resolved)")
        return FORMATS.get(self.format).suffix
