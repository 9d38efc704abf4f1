"""The settings of a nugget matcher: which matcher (``matcher``) and, in ``options``, its own keys, checked against
its spec's options model (:class:`apcir.options.EntrySettings`, as ``[rerank]`` does for re-rankers). No key is
shared by every matcher, so there is no other field: τ belongs to the thresholded matchers, the encoder to
``embedding``, the model and client to ``llm``, the model file to ``learned``; another matcher's key is refused in
one line naming the matchers that read it."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, Field

from apcir.evaluation.nuggets.registry import DEFAULT_MATCHER, MATCHERS
from apcir.options import EntrySettings, options_of
from apcir.registry import InRegistry, Registry


class MatcherSettings(EntrySettings):
    """The chosen matcher and its own options, given flat: ``MatcherSettings(matcher="embedding", tau=0.7,
    encoder="minilm")``."""

    ENTRY_KEY: ClassVar[str] = "matcher"
    ENTRY_REGISTRY: ClassVar[Registry[Any]] = MATCHERS

    matcher: Annotated[str, InRegistry(MATCHERS)] = Field(DEFAULT_MATCHER, description=f"one of: {MATCHERS.help()}")

    def for_matcher(self, name: str, *, keep_tau: bool = True) -> MatcherSettings:
        """These choices for matcher ``name``: the keys of these options that it reads (τ only with ``keep_tau``),
        the others left out (its own defaults)."""
        if name == self.matcher and keep_tau:
            return self
        given = self.options.model_dump(exclude_unset=True) if isinstance(self.options, BaseModel) else {}
        fields = options_of(MATCHERS.get(name)).model_fields
        return MatcherSettings.model_validate({"matcher": name, **{k: v for k, v in given.items() if k in fields
                                                                   and (keep_tau or k != "tau")}})
