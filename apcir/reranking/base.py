"""What every re-ranker shares: its input per turn, its output, its counters, and loading models offline."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

from apcir.console import progress as progress_bar
from apcir.errors import ApcirError


@dataclass
class Candidates:
    """One turn's query and the passages to re-rank, in the first stage's order."""

    turn: str
    query: str
    ids: list[str]
    texts: list[str]


@dataclass
class Ranked:
    """A turn's passages in their new order, with scores (non-increasing) to write."""

    ids: list[str]
    scores: list[float]


class RerankStats(BaseModel):
    """Counters a re-ranker adds to the stage summary (the LLM ones stay 0 for local models); the summary
    (:class:`apcir.reranking.stage.RerankSummary`) carries them as they are."""

    pairs_scored: int = 0
    windows: int = 0
    requests: int = 0
    cache_hits: int = 0
    failed_windows: int = 0
    failed: list[str] = Field(default_factory=list)
    """``turn#window`` of every window whose answer could not be used (its order was kept)."""
    missing_ids: int = Field(0, description="rankgpt: passages an answer left out (appended in their order)")
    duplicate_ids: int = Field(0, description="rankgpt: repeated ids in answers (ignored)")
    unknown_ids: int = Field(0, description="rankgpt: ids outside the window in answers (ignored)")
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None


class Reranker(Protocol):
    """A loaded re-ranker: ``rank`` orders every turn's candidates."""

    name: str
    model: str

    def rank(self, candidates: Sequence[Candidates], *, progress: bool = True) -> tuple[dict[str, Ranked], RerankStats]:
        ...


SCORE_DECIMALS = 6
"""Re-ranker scores are written rounded to this many decimals: float noise below it (batch mates, threads)
cannot change a file, and ties are then broken by passage id (the one ranking order of apcir.contract.runs)."""


def fixed_threads() -> int:
    """Pin the math libraries' thread count before a model runs, so that a re-run sums in the same order.

    Dynamic threading (``OMP_DYNAMIC``, ``MKL_DYNAMIC``) lets the libraries use fewer threads when the machine
    is busy, which changes the order of reductions and the last bits of a score; apcir turns it off (see
    :mod:`apcir`) and fixes torch's intra-op threads at ``APCIR_THREADS`` or the machine's cores. Returns it."""
    import os

    import torch

    from apcir.settings import threads_from_env

    threads = threads_from_env(os.cpu_count() or 1)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def check_finite(scores: Any, dtype: str, why: str = "") -> None:
    """Refuse (one line) scores a model gave as NaN or infinity, which happens when half precision overflows."""
    import math

    if any(not math.isfinite(float(v)) for v in scores):
        raise ApcirError(f"the re-ranker gave non-finite scores in {dtype} (an overflow); {why}use --dtype "
                         "bfloat16 or float32 (rerank.dtype)")


class PointwiseReranker:
    """A re-ranker that scores each (query, passage) pair alone; a pair is scored once per loaded model."""

    name = ""

    def __init__(self, model: str, score: Callable[[list[tuple[str, str]]], list[float]], batch_size: int) -> None:
        self.model = model
        self._score = score
        self.batch_size = batch_size
        self._memo: dict[tuple[str, str], float] = {}

    def rank(self, candidates: Sequence[Candidates], *, progress: bool = True) -> tuple[dict[str, Ranked], RerankStats]:
        wanted = sorted({(c.query, text) for c in candidates for text in c.texts} - set(self._memo))
        group = max(self.batch_size * 8, 1)
        with progress_bar(f"re-ranking ({self.name})", len(wanted),
                          enabled=progress and len(wanted) > self.batch_size) as advance:
            for start in range(0, len(wanted), group):
                part = wanted[start : start + group]
                self._memo.update(zip(part, self._score(part)))
                advance(len(part))
        ranked = {}
        for c in candidates:
            scores = [round(self._memo[(c.query, text)], SCORE_DECIMALS) for text in c.texts]
            order = sorted(range(len(c.ids)), key=lambda i: (-scores[i], c.ids[i]))  # ties: by passage id
            ranked[c.turn] = Ranked([c.ids[i] for i in order], [scores[i] for i in order])
        return ranked, RerankStats(pairs_scored=len(wanted))


# ---- models: hub ids or local directories, never a silent download ---------------------------------
def model_location(model: str) -> tuple[str, bool]:
    """``(what to load, is it a local directory)``; a path-looking name that does not exist is an error."""
    path = Path(model).expanduser()
    if path.exists():
        return str(path.resolve()), True
    if model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise ApcirError(f"re-ranker model directory not found: {model} (give --model PATH, a directory with the "
                         "model, or a hub id)")
    return model, False


def load_error(model: str, exc: BaseException, local: bool) -> ApcirError:
    """The one-line error for a model that could not be loaded (offline hub ids say how to get a local copy)."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if local:
        return ApcirError(f"could not load re-ranker model from {model}: {reason}")
    return ApcirError(
        f"could not load re-ranker model {model!r}: it needs network access to the Hugging Face hub or a local copy "
        f"({reason}). Download it where there is network (`hf download {model} --local-dir DIR`) and pass the "
        "directory: --model PATH (also --reranker-model PATH; in a config, rerank.model)"
    )


@contextmanager
def loading(location: str, local: bool) -> Iterator[None]:
    """Load a re-ranker's checkpoint within: transformers' reports silenced (:func:`quiet_transformers`, restored
    after), and a failure turned into :func:`load_error`'s one line."""
    from transformers.utils import logging as hf_logging

    verbosity = quiet_transformers()
    try:
        yield
    except Exception as exc:  # OSError (not found, offline), ValueError (not the right kind of model), ...
        raise load_error(location, exc, local) from None
    finally:
        hf_logging.set_verbosity(verbosity)


def quiet_transformers() -> Any:
    """Silence transformers' weight-loading reports and bars; returns the verbosity to restore."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    return verbosity
