"""RankGPT: listwise re-ranking by an LLM with sliding windows (Sun et al., EMNLP 2023).

The prompt, the parsing and the loop are those of sunnweiwei/RankGPT
``rank_gpt.py`` (commit 0d62bc3): ``create_permutation_instruction``,
``receive_permutation`` and ``sliding_windows``.

* **Prompt.** A system message, the instruction, ``[i] passage`` /
  ``Received passage [i].`` turns, then the request for ``[] > []``. A passage is
  its first 300 whitespace-separated words (``max_words``).
* **Parsing** (never loses or duplicates a passage). Every non-digit becomes a
  space; each number ``i`` names passage ``i``; a repeated id keeps its first
  place (counted as a duplicate), an id outside ``1..n`` is ignored (counted as
  unknown) and the passages the answer leaves out follow in their previous
  relative order (counted as missing). An answer with no valid id at all gets
  one repair request; if that fails too, the window keeps its order and is
  counted as failed (exit status 1; the next run asks again).
* **Windows.** From the bottom of the list to the top: ``(depth - window,
  depth)``, then ``step`` higher, while the start is not negative. For 100/20/10
  that is 9 windows, ``floor((depth - window) / step) + 1`` in general; when
  ``step`` does not divide ``depth - window`` RankGPT's loop never shows the top
  ``(depth - window) mod step`` passages to the model. ``windows = "cover"``
  adds the window clamped to the top that rank_llm adds (``ceil`` instead of
  ``floor``). A list shorter than the window is ranked in one window (RankGPT's
  loop would skip it); a list of one passage needs no request.

The windows of one turn depend on each other, so they run in order; the turns
run concurrently: every turn's first window, then every turn's second, ...,
each position one :func:`apcir.llm.jobs.ask_all` call (cache, concurrency,
retries, accounting; the key is never written). A re-run answers every window
from the cache: 0 requests.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from apcir.console import progress as progress_bar
from apcir.console import warn
from apcir.llm.accounting import Accounting
from apcir.llm.jobs import Answer, Ask, ask_all
from apcir.reranking.base import Candidates, Ranked, RerankStats
from apcir.reranking.options import RANKGPT_WINDOWS, RankGPTOptions
from apcir.reranking.settings import RerankSettings

SYSTEM = "You are RankGPT, an intelligent assistant that can rank passages based on their relevancy to the query."
Message = dict[str, str]


def passage_text(content: str, max_words: int = 300) -> str:
    """RankGPT's passage: ``Title: Content:`` of an empty title removed, then the first ``max_words`` words."""
    content = content.replace("Title: Content: ", "").strip()
    return " ".join(content.split()[:max_words])


def permutation_messages(query: str, passages: Sequence[str], max_words: int = 300) -> list[Message]:
    """RankGPT's ``create_permutation_instruction`` for one window."""
    num = len(passages)
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"I will provide you with {num} passages, each indicated by number identifier []. "
                                    f"\nRank the passages based on their relevance to query: {query}."},
        {"role": "assistant", "content": "Okay, please provide the passages."},
    ]
    for rank, content in enumerate(passages, start=1):
        messages.append({"role": "user", "content": f"[{rank}] {passage_text(content, max_words)}"})
        messages.append({"role": "assistant", "content": f"Received passage [{rank}]."})
    messages.append({"role": "user", "content": (
        f"Search Query: {query}. \nRank the {num} passages above based on their relevance to the search query. "
        "The passages should be listed in descending order using identifiers. The most relevant passages should be "
        "listed first. The output format should be [] > [], e.g., [1] > [2]. Only response the ranking results, "
        "do not say any word or explain.")})
    return messages


@dataclass(frozen=True)
class Permutation:
    """A window's new order (0-based positions in the window) and what the answer got wrong."""

    order: list[int]
    missing: int
    duplicates: int
    unknown: int


def parse_permutation(answer: str, n: int) -> Permutation:
    """RankGPT's ``receive_permutation``, counting what it repairs; an answer with no valid id is a ValueError."""
    numbers = [int(x) - 1 for x in re.sub(r"\D", " ", answer).split()]
    order: list[int] = []
    seen: set[int] = set()
    duplicates = unknown = 0
    for number in numbers:
        if not 0 <= number < n:
            unknown += 1
        elif number in seen:
            duplicates += 1
        else:
            seen.add(number)
            order.append(number)
    if not order and n > 0:
        raise ValueError(f"no passage identifier between [1] and [{n}] in the answer")
    missing = [i for i in range(n) if i not in seen]
    return Permutation(order + missing, len(missing), duplicates, unknown)


def window_bounds(n: int, window: int, step: int, mode: str = "rankgpt") -> list[tuple[int, int]]:
    """The (start, end) of each window over the first ``n`` passages, bottom first."""
    if n <= 1:
        return []
    if n <= window:
        return [(0, n)]
    bounds = []
    end, start = n, n - window
    while start >= 0:
        bounds.append((start, end))
        end, start = end - step, start - step
    if mode == "cover" and bounds[-1][0] > 0:
        bounds.append((0, bounds[-1][1] - step))  # rank_llm: the next window, its start clamped to the top
    return bounds


def expected_windows(n: int, window: int, step: int, mode: str = RANKGPT_WINDOWS) -> int:
    """How many requests a list of ``n`` passages costs (see the module doc)."""
    if n <= 1:
        return 0
    if n <= window:
        return 1
    rounding = math.floor if mode == RANKGPT_WINDOWS else math.ceil
    return int(rounding((n - window) / step)) + 1


def _repair(messages: list[Message], n: int, raw: str, problem: str) -> list[Message]:
    return [*messages, {"role": "assistant", "content": raw}, {"role": "user", "content": (
        f"Your answer could not be read: {problem}. Answer only with the ranking of the {n} passages, most relevant "
        f"first, using the identifiers [1] to [{n}], e.g. [2] > [1] > [3].")}]


class RankGPT:
    """The listwise re-ranker: ``rank`` runs the sliding windows of every turn."""

    name = "rankgpt"

    def __init__(self, settings: RerankSettings) -> None:
        self.settings = settings.own(RankGPTOptions)
        self.model = settings.model_name

    def rank(self, candidates: Sequence[Candidates], *, progress: bool = True) -> tuple[dict[str, Ranked], RerankStats]:
        cfg = self.settings
        orders = {c.turn: list(range(len(c.ids))) for c in candidates}
        bounds = {c.turn: window_bounds(len(c.ids), cfg.window, cfg.step, cfg.windows) for c in candidates}
        stats = RerankStats(windows=sum(len(b) for b in bounds.values()))
        accounting = Accounting(cfg.llm.price_table())
        positions = max((len(b) for b in bounds.values()), default=0)
        with progress_bar(f"re-ranking ({self.model}, windows)", stats.windows,
                          enabled=progress and stats.windows > 1) as advance:
            for position in range(positions):
                asks: list[Ask[Permutation]] = []
                spans: dict[str, tuple[int, int]] = {}
                for c in candidates:
                    if position >= len(bounds[c.turn]):
                        continue
                    start, end = spans[c.turn] = bounds[c.turn][position]
                    window = orders[c.turn][start:end]
                    messages = permutation_messages(c.query, [c.texts[i] for i in window], cfg.max_words)
                    asks.append(Ask(key=c.turn, messages=messages, parse=partial(parse_permutation, n=len(window)),
                                    repair=partial(_repair, messages, len(window))))

                def on_answer(ask: Ask[Permutation], answer: Answer[Permutation], position: int = position,
                              spans: dict[str, tuple[int, int]] = spans) -> None:
                    advance(1)
                    start, end = spans[ask.key]
                    if answer.value is None:
                        stats.failed_windows += 1
                        stats.failed.append(f"{ask.key}#{position + 1}")
                        warn(f"turn {ask.key}, window {position + 1} ({start + 1}-{end}): {answer.error}; "
                             "the window keeps its order")
                        return
                    permutation = answer.value
                    stats.missing_ids += permutation.missing
                    stats.duplicate_ids += permutation.duplicates
                    stats.unknown_ids += permutation.unknown
                    window = orders[ask.key][start:end]
                    orders[ask.key][start:end] = [window[i] for i in permutation.order]

                ask_all(asks, model=self.model, settings=cfg.llm, accounting=accounting, on_answer=on_answer)
        for usage in accounting.summary():
            stats.requests += usage.requests
            stats.cache_hits += usage.cache_hits
            stats.input_tokens += usage.input_tokens
            stats.output_tokens += usage.output_tokens
            if usage.cost_usd is not None:
                stats.cost_usd = (stats.cost_usd or 0.0) + usage.cost_usd
        ranked = {}
        for c in candidates:
            n = len(c.ids)
            ranked[c.turn] = Ranked([c.ids[i] for i in orders[c.turn]], [float(n - r) for r in range(n)])
        return ranked, stats


def load(settings: RerankSettings) -> RankGPT:
    return RankGPT(settings)
