"""The reformulation stage's settings: the ``[reformulator]`` config section and the options of ``apcir reformulate``.

Both build the same :class:`ReformulatorOptions`, so a config and a command line
with the same values send the same prompts with the same parameters.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from apcir.llm.settings import LLM_FIELDS, LLMSettings, refuse_unused
from apcir.reformulation.prompt import PromptOptions
from apcir.reformulation.registry import REFORMULATORS, method_usages
from apcir.registry import InRegistry
from apcir.settings import renamed_key

# The fields of a reformulation a file may provide, in the record's own names.
FILE_FIELDS: tuple[str, ...] = (
    "rewrite",
    "response",
    "third_rewrite",
    "third_response",
    "level",
    "ptkb_used",
    "reasoning",
)
LevelFallback = Literal["a", "heuristic"]
HEURISTIC_FALLBACK: LevelFallback = "heuristic"
"""``level_fallback``: a turn the file gives no level takes the heuristic reformulator's."""


class ReformulatorOptions(LLMSettings):
    """Who reformulates (``method``) and, for a model, how it is asked."""

    method: Annotated[str, InRegistry(REFORMULATORS, open_ended=True, usages=method_usages,
                                      blank="give a model name, 'heuristic', 'manual' or 'file:PATH'")] = Field(
        "heuristic",
        description="heuristic, manual, file:PATH (rewrites made elsewhere), or a model name (gpt-4o, ...); "
        "formerly `llm`",
    )
    prompt: PromptOptions = Field(default_factory=PromptOptions, description="prompt ablations and history trimming")
    map: dict[str, str] = Field(
        default_factory=dict,
        description="file:PATH only: apcir field -> the file's field, e.g. {rewrite = 'rar_rw', response = 'rar_rs'}",
    )
    level_fallback: LevelFallback = Field(
        "a", description="file:PATH only: the level of a turn the file gives none for: 'a' or the 'heuristic' one"
    )

    @model_validator(mode="before")
    @classmethod
    def _method_was_llm(cls, data: Any) -> Any:
        return renamed_key(data, "llm", "method", "[reformulator]")

    @field_validator("map")
    @classmethod
    def _known_fields(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(FILE_FIELDS) - {"turn_id"})
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}: map keys are {', '.join(('turn_id', *FILE_FIELDS))}")
        return value


    @model_validator(mode="after")
    def _only_what_is_used(self) -> ReformulatorOptions:
        from apcir.reformulation.registry import source_file

        if source_file(self.method) is not None:
            refuse_unused(self, LLM_FIELDS | {"prompt"}, f"with method = {self.method!r} (rewrites from a file, no model)")
            return self
        refuse_unused(self, {"map", "level_fallback"}, f"with method = {self.method!r} (they are for file:PATH only)")
        from apcir.reformulation.registry import is_offline

        if is_offline(self.method):
            refuse_unused(self, LLM_FIELDS | {"prompt"}, f"with method = {self.method!r} (offline, no model)")
        return self


def parse_map(items: list[str] | None) -> dict[str, str]:
    """``["rewrite=rar_rw,response=rar_rs", ...]`` (the ``--map`` option) as a dict."""
    from apcir.errors import ApcirError

    mapping: dict[str, str] = {}
    for item in items or []:
        for pair in item.split(","):
            if not pair.strip():
                continue
            key, sep, value = pair.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise ApcirError(f"--map {pair!r}: expected apcir_field=file_field, e.g. rewrite=rar_rw")
            mapping[key.strip()] = value.strip()
    return mapping
