"""The re-rankers: the single source of the names ``rerank.reranker`` / ``apcir rerank --reranker`` accept.

A re-ranker is a module with ``load(settings) -> Reranker`` (see
:class:`apcir.reranking.base.Reranker`) plus one entry here, which names the
pydantic model of its own options (``options``: the ``[rerank]`` keys and
``apcir rerank`` options only it reads, read with ``settings.own(Model)``);
plugins add entries through the ``apcir.rerankers`` entry points. ``load`` names the
function (``"module:function"``), imported only when used, so torch and
transformers load only for the local models and nothing heavy for RankGPT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from apcir.options import Options
from apcir.registry import Registry, call_ref
from apcir.reranking.options import MonoT5Options, PointwiseOptions, RankGPTOptions


@dataclass(frozen=True)
class RerankerSpec:
    name: str
    label: str
    """How tables name it (``+monoT5``)."""
    description: str
    kind: Literal["pointwise", "listwise"]
    default_model: str
    load: str
    options: type[Options] = Options
    """The model of its own options: the ``[rerank]`` keys it reads besides the shared ones (any other re-ranker's
    key is refused), generated as ``apcir rerank`` options."""

    @property
    def settings(self) -> frozenset[str]:
        """The names of its own keys."""
        return frozenset(self.options.model_fields)

    def call(self, *args: Any, **kwargs: Any) -> Any:
        return call_ref(self.load, *args, **kwargs)


RERANKERS: Registry[RerankerSpec] = Registry("re-ranker", "apcir.rerankers")
RERANKERS.add(RerankerSpec(
    "monot5", "monoT5", "pygaggle's monoT5: log P(true) of 'Query: q Document: d Relevant:' (any T5 checkpoint)",
    "pointwise", "castorini/monot5-base-msmarco-10k", "apcir.reranking.monot5:load",
    MonoT5Options))
RERANKERS.add(RerankerSpec(
    "cross-encoder", "cross-encoder", "a sentence-transformers CrossEncoder's raw logit (e.g. the iKAT organisers' "
    "MiniLM)", "pointwise", "cross-encoder/ms-marco-MiniLM-L-6-v2", "apcir.reranking.cross_encoder:load",
    PointwiseOptions))
RERANKERS.add(RerankerSpec(
    "rankgpt", "RankGPT", "RankGPT's listwise prompt to an LLM, sliding windows from the bottom up",
    "listwise", "gpt-4o-mini", "apcir.reranking.rankgpt:load",
    RankGPTOptions))
