"""The reformulation stage's settings: the ``[reformulator]`` config section and the options of ``apcir reformulate``.

Both build the same :class:`ReformulatorOptions`, so a config and a command line
with the same values send the same prompts with the same parameters. The keys every
reformulator reads are fields here (with the client's, which only a reformulator that asks a model
reads: :class:`~apcir.llm.batch.ProducerSettings`); the chosen reformulator's own keys (its spec's ``options`` model: a model's
``prompt``, ``file:PATH``'s ``map`` and ``level_fallback``, a plugin's) are given beside them and kept in ``options``
(:class:`apcir.options.EntrySettings`).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator

from apcir.llm.batch import ProducerSettings
from apcir.llm.settings import LLM_FIELDS
from apcir.reformulation.registry import REFORMULATORS
from apcir.registry import InRegistry, Registry
from apcir.settings import renamed_key


class ReformulatorOptions(ProducerSettings):
    """Who reformulates (``method``) and, for a model, how it is asked."""

    ENTRY_KEY: ClassVar[str] = "method"
    ENTRY_REGISTRY: ClassVar[Registry[Any]] = REFORMULATORS

    method: Annotated[str, InRegistry(REFORMULATORS, open_ended=True,
                                      blank="give a model name, 'heuristic', 'manual' or 'file:PATH'")] = Field(
        "heuristic",
        description="heuristic, manual, file:PATH (rewrites made elsewhere), or a model name (gpt-4o, ...); "
        "formerly `llm`",
    )

    @model_validator(mode="before")
    @classmethod
    def _method_was_llm(cls, data: Any) -> Any:
        return renamed_key(data, "llm", "method", "[reformulator]")

    def with_method(self, method: str) -> ReformulatorOptions:
        """These settings for another method (the tuning leg's ``fusion.weights.tune_method``): the shared keys kept
        (the client's only for a method that asks a model), the reformulator's own keys kept for a method of the
        same reformulator and left at their defaults for another (they are not its keys)."""
        entry = REFORMULATORS.resolve(method)[0]
        keep = set(type(self).model_fields) - {"options", self.ENTRY_KEY} - (LLM_FIELDS if entry.offline else set())
        data = self.model_dump(include=keep, exclude_unset=True)
        if entry is self.entry():
            data["options"] = self.options
        return type(self).model_validate({**data, self.ENTRY_KEY: method})

    def inputs(self) -> list[str]:
        """The files the reformulator reads (``file:PATH``'s file), for the checks that no output overwrites one."""
        return [str(path) for path in self.entry().call("inputs", self)] if self.entry().inputs else []
