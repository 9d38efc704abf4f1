"""The registry of nugget matchers (:data:`MATCHERS`, the single source of their names), the default matcher and
the defaults of τ, measured against people (see :mod:`apcir.evaluation.nuggets.matchers` for the matchers).

Each entry names the model of its own options (``options``: τ for the thresholded matchers, the encoder of
``embedding``, the model and client of ``llm``, the model file of ``learned``); its ``build`` reads them with
``settings.own(Model)`` from the :class:`~apcir.evaluation.nuggets.settings.MatcherSettings` it is given. Plugins
add entries through the ``apcir.matchers`` entry points, their options included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from apcir.evaluation.nuggets.learned import LearnedOptions
from apcir.evaluation.nuggets.matchers import (
    EmbeddingMatcher,
    EmbeddingOptions,
    LexicalMatcher,
    LexicalOptions,
    LLMMatcher,
    LLMMatcherOptions,
    Matcher,
)
from apcir.options import Options
from apcir.registry import Registry

if TYPE_CHECKING:
    from apcir.evaluation.nuggets.settings import MatcherSettings


@dataclass
class MatcherSpec:
    name: str
    label: str
    description: str
    thresholded: bool
    default_tau: float | None
    cost: str
    build: Callable[[MatcherSettings], Matcher]
    tau_of: Callable[[MatcherSettings], float] | None = None
    """Where the default τ comes from when it is not fixed (the learned matcher's: its model file)."""
    trained: bool = False
    """It needs a model trained on a user's labels (``learned_model``; without one, agreement is measured by nested
    cross-validation)."""
    asks_llm: bool = False
    """It asks a model (``model``, the client settings): measured only when a model is named."""
    in_runs: bool = False
    """A run's ``[evaluation] nugget_matcher`` may name it (offline, nothing to train)."""
    options: type[Options] = Options
    """The model of its own options (the keys only it reads), generated as the matcher options of ``apcir
    evaluate-responses --nuggets`` and ``apcir nuggets agreement``; any other matcher's key is refused."""

    def tau(self, settings: MatcherSettings) -> float:
        """The threshold in use (1 for the llm matcher, whose scores are 0 or 1)."""
        if not self.thresholded:
            return 1.0
        given = getattr(settings.options, "tau", None)
        if given is not None:
            return float(given)
        return self.tau_of(settings) if self.tau_of is not None else float(self.default_tau or 0.0)


def _llm(settings: MatcherSettings) -> Matcher:
    from apcir.errors import ApcirError

    own = settings.own(LLMMatcherOptions)
    if not own.model:
        raise ApcirError("the llm matcher needs a model: --matcher-model gpt-4o (or a local one: smollm2, with "
                         "--base-url)")
    return LLMMatcher(own.model, own.llm, own.batched)


def _learned_model(settings: MatcherSettings) -> Any:
    from apcir.errors import ApcirError
    from apcir.evaluation.nuggets.learned import load_model

    own = settings.own(LearnedOptions)
    if not own.learned_model:
        raise ApcirError("the learned matcher needs a model: apcir nuggets train --labels ... -o model.json, then "
                         "--learned-model model.json (apcir nuggets agreement measures it without one, by nested "
                         "cross-validation)")
    return load_model(own.learned_model)


def _learned(settings: MatcherSettings) -> Matcher:
    from apcir.evaluation.nuggets.learned import LearnedMatcher

    return LearnedMatcher(_learned_model(settings))


# The defaults below were measured against the 1,086 human labels of the iKAT 2024 human study (CONE-RAG), 5-fold
# cross-validation over its 25 turns: benchmarks/nugget_agreement.py prints them; docs/guide/responses.md has the
# table. τ = the median of the τs chosen on the training folds of 10 random 5-fold splits (lexical 0.508, range 0.417
# to 0.606; embedding 0.663, range 0.654 to 0.764), to two decimals.
MATCHERS: Registry[MatcherSpec] = Registry("nugget matcher", "apcir.matchers")
MATCHERS.add(MatcherSpec("lexical", "lexical overlap", "share of the nugget's content words in the response",
                         True, 0.51, "free: no model", lambda s: LexicalMatcher(), in_runs=True,
                         options=LexicalOptions))
MATCHERS.add(MatcherSpec("embedding", "embedding similarity",
                         "best cosine between the nugget and a sentence of the response (MiniLM by default)",
                         True, 0.66, "offline: one bi-encoder pass over nuggets and response sentences",
                         lambda s: EmbeddingMatcher(s.own(EmbeddingOptions).encoder), in_runs=True,
                         options=EmbeddingOptions))
MATCHERS.add(MatcherSpec("llm", "LLM yes/no", "an LLM says whether the response contains the nugget", False, None,
                         "one request per turn and response (batched) or per nugget; cached", _llm, asks_llm=True,
                         options=LLMMatcherOptions))
MATCHERS.add(MatcherSpec("learned", "learned from human labels",
                         "logistic regression over lexical, IDF and embedding signals, trained on your labels "
                         "(apcir nuggets train)", True, None,
                         "offline: the embedding matcher's pass, plus a model file you train", _learned,
                         tau_of=lambda s: float(_learned_model(s).tau), trained=True, options=LearnedOptions))

DEFAULT_MATCHER = "lexical"
"""The matcher that agreed best with people among those that need no training (see the module doc)."""
TRAINED = frozenset(spec.name for spec in MATCHERS if spec.trained)
"""Matchers that need a model trained on a user's labels."""
