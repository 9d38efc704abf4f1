"""PTKB statement ranking: every statement of a turn's profile, best first, as a TREC-style run.

The ``apcir`` ranking puts first the statements the reformulation says it used
(its ``ptkb_used``, in its order), then every other statement by its
similarity to the turn's personalised rewrite (the third rewrite q^u at levels
b/c, the rewrite q' at level a), ties in profile order. The similarity is
the index's own encoder (SPLADE: the sparse dot product of the rewrite
encoded as a query and the statement encoded as a passage), or, for a BM25
index or without an index, BM25 (k1=0.9, b=0.4) over the profile's own
statements (a small BM25 with statistics from that profile alone, see
:func:`apcir.responses.text.bm25_scores`).

Two reference rankings go with it: ``heuristic`` (the heuristic reformulator's
tf-idf cosine of each statement with the utterance and its context terms,
:func:`apcir.reformulation.offline.ptkb_similarities`) and ``profile`` (the
profile's own order).

A ranking is written as a TREC run over statement ids (``9-1_3 Q0 4 1 1.0 tag``)
with scores ``(n - i) / n`` for the i-th of n statements, so scores strictly
decrease with the rank: ``apcir evaluate`` scores it against
``ikat23-test-ptkb``, and the 2023 submission's ``ptkb_provenance`` carries
the same scores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from apcir.console import shown, warn
from apcir.contract.records import Run, Turn
from apcir.contract.reformulations import ReformulationRecord
from apcir.contract.runs import load_run, ranking, write_run
from apcir.errors import ApcirError
from apcir.registry import Registry
from apcir.responses.text import bm25_scores

# turn id -> [(statement id, score)], best first
PtkbRanking = dict[str, list[tuple[str, float]]]
BM25 = "bm25"

# (query, statement texts) of each turn -> similarities of the statements, in the same order
Similarity = Callable[[Sequence[tuple[str, list[str]]]], list[list[float]]]


def personalised_rewrite(turn: Turn, record: ReformulationRecord | None) -> str:
    """The personalised rewrite q^u at levels b/c, the rewrite q' at level a; the utterance without one."""
    if record is None or record.output is None:
        return turn.utterance
    out = record.output
    text = out.third_rewrite if out.level in ("b", "c") else out.rewrite
    return (text or out.rewrite or turn.utterance).strip()


def statements_used(turn: Turn, record: ReformulationRecord | None) -> list[str]:
    """The reformulation's ``ptkb_used`` that are in the profile, in its order, without repeats."""
    if record is None or record.output is None:
        return []
    used: list[str] = []
    for statement in record.output.ptkb_used:
        key = str(statement).strip()
        if key in turn.ptkb and key not in used:
            used.append(key)
    return used


@dataclass(frozen=True)
class SimilaritySpec:
    similarity: Similarity
    name: str
    """``bm25`` or the SPLADE model, recorded with the ranking."""


def bm25_similarity() -> SimilaritySpec:
    def similarity(items: Sequence[tuple[str, list[str]]]) -> list[list[float]]:
        return [bm25_scores(query, texts) for query, texts in items]

    return SimilaritySpec(similarity, BM25)


def encoder_similarity(model: str, kind: str | None = None, dtype: str | None = "auto") -> SimilaritySpec:
    """Inner products of a model's vectors, the rewrite as a query and each statement as a passage: sparse dot
    products for SPLADE, cosine for a bi-encoder that normalises (as MiniLM does). ``dtype``: the model's
    precision (:mod:`apcir.retrieval.precision`)."""
    from apcir.retrieval.registry import kind_of_model

    spec = kind_of_model(model, kind)
    encoder = spec.make(model, dtype=dtype)

    def similarity(items: Sequence[tuple[str, list[str]]]) -> list[list[float]]:
        unique = sorted({text for _, texts in items for text in texts})
        if not unique:
            return [[] for _ in items]
        statements = encoder.encode_documents(unique, progress=False, description="encoding PTKB statements")
        queries = encoder.encode_queries([q for q, _ in items], progress=False)
        row = {text: i for i, text in enumerate(unique)}
        scores = spec.rows(queries @ statements.T)
        return [[float(scores[n, row[t]]) for t in texts] for n, (_, texts) in enumerate(items)]

    return SimilaritySpec(similarity, encoder.name)


def similarity_for(encoder: str | None, kind: str | None = None, dtype: str | None = "auto") -> SimilaritySpec:
    """The similarity named ``encoder``: ``bm25`` (or None), else that model's (``kind`` as an index records it;
    by default a known bi-encoder such as ``minilm`` is dense, any other model SPLADE), in precision ``dtype``."""
    if encoder is None or encoder == BM25:
        return bm25_similarity()
    return encoder_similarity(encoder, kind, dtype)


def _scored(order: list[str]) -> list[tuple[str, float]]:
    n = len(order)
    return [(sid, (n - i) / n) for i, sid in enumerate(order)]


def _warn_empty(turns: Sequence[Turn]) -> None:
    empty = [t.turn_id for t in turns if not t.ptkb]
    if empty:
        listed = shown(empty)
        warn(f"{len(empty)} turn(s) have a profile with no statements, so no PTKB ranking and no PTKB provenance: "
             f"{listed}")


def _warn_uncovered(turns: Sequence[Turn], records: Mapping[str, ReformulationRecord]) -> None:
    """Say how many turns the reformulations given do not cover (their statements are ranked against the utterance)."""
    if not records:
        return
    lacking = [t.turn_id for t in turns if t.turn_id not in records]
    if len(lacking) == len(turns):
        warn(f"none of the {len(turns)} topic turn(s) has a record in the reformulations given ({len(records)} "
             f"records, e.g. {next(iter(records))}): are they for these topics? Every turn's statements are ranked "
             "against its utterance, with no statement used first")
    elif lacking:
        warn(f"{len(lacking)} of the {len(turns)} topic turn(s) have no reformulation, so their statements are ranked "
             f"against the utterance, with no statement used first: {', '.join(lacking[:10])}"
             f"{' ...' if len(lacking) > 10 else ''}")


def rank_statements(
    turns: Sequence[Turn], records: Mapping[str, ReformulationRecord], similarity: SimilaritySpec
) -> PtkbRanking:
    """The ``apcir`` ranking of every turn's statements (see the module docstring)."""
    _warn_empty(turns)
    _warn_uncovered(turns, records)
    with_profile = [t for t in turns if t.ptkb]
    items = [(personalised_rewrite(t, records.get(t.turn_id)), list(t.ptkb.values())) for t in with_profile]
    similarities = similarity.similarity(items) if items else []
    ranked: PtkbRanking = {}
    for turn, sims in zip(with_profile, similarities):
        used = statements_used(turn, records.get(turn.turn_id))
        position = {sid: i for i, sid in enumerate(turn.ptkb)}
        by_id = dict(zip(turn.ptkb, sims))
        rest = sorted((sid for sid in turn.ptkb if sid not in used), key=lambda sid: (-by_id[sid], position[sid]))
        ranked[turn.turn_id] = _scored(used + rest)
    return ranked


def heuristic_order(turns: Sequence[Turn]) -> PtkbRanking:
    """The heuristic reformulator's statement ranking: tf-idf cosine with the utterance and its context terms."""
    from apcir.reformulation.offline import ptkb_similarities

    _warn_empty(turns)
    ranked: PtkbRanking = {}
    for turn in turns:
        if turn.ptkb:
            sims = ptkb_similarities(turn)
            position = {sid: i for i, sid in enumerate(turn.ptkb)}
            ranked[turn.turn_id] = _scored(sorted(turn.ptkb, key=lambda sid: (-sims[sid], position[sid])))
    return ranked


def profile_order(turns: Sequence[Turn]) -> PtkbRanking:
    """Every statement in the profile's own order."""
    _warn_empty(turns)
    return {t.turn_id: _scored(list(t.ptkb)) for t in turns if t.ptkb}


def as_run(ranked: PtkbRanking) -> Run:
    return {turn: dict(items) for turn, items in ranked.items()}


def write_ptkb_run(ranked: PtkbRanking, path: Path, tag: str = "apcir-ptkb") -> None:
    """The ranking as a TREC run over statement ids."""
    write_run(as_run(ranked), path, tag=tag)


def load_ptkb_run(path: Path, turns: Sequence[Turn] | None = None) -> PtkbRanking:
    """A ranking from a TREC run over statement ids; with ``turns``, ids outside a turn's profile are an error."""
    run = load_run(path)
    by_id = {t.turn_id: t for t in turns} if turns is not None else {}
    ranked: PtkbRanking = {}
    for turn_id, scores in run.items():
        topic = by_id.get(turn_id)
        if topic is not None:
            unknown = sorted(sid for sid in scores if sid not in topic.ptkb)
            if unknown:
                raise ApcirError(f"turn {turn_id}: statement id(s) {', '.join(unknown)} are not in the profile "
                                 f"(ids {', '.join(topic.ptkb)}); is this a PTKB ranking of these topics?", path=path)
        ranked[turn_id] = ranking(scores)
    return ranked


@dataclass(frozen=True)
class PtkbMethod:
    """A way of ranking a turn's PTKB statements (``apcir rank-ptkb --method``)."""

    name: str
    description: str
    rank: Callable[..., tuple[PtkbRanking, str]]
    """``rank(turns, records, encoder, kind, dtype)``."""
    reference: bool = False
    """A reference order ``apcir run`` writes (``ptkb/<name>.run``) and evaluates beside apcir's own."""
    compares: bool = False
    """Ranks by similarity to the rewrites: takes reformulations and an encoder."""


def _by_similarity(turns: Sequence[Turn], records: Mapping[str, ReformulationRecord] | None, encoder: str | None,
                   kind: str | None, dtype: str | None = "auto") -> tuple[PtkbRanking, str]:
    spec = similarity_for(encoder, kind, dtype)
    used = "the reformulation's ptkb_used first, then " if records else ""
    return rank_statements(turns, records or {}, spec), f"{used}similarity ({spec.name}) to the personalised rewrite"


PTKB_METHODS: Registry[PtkbMethod] = Registry("PTKB ranking method")
PTKB_METHODS.add(PtkbMethod("apcir", "the statements the reformulation used first, then by similarity",
                            _by_similarity, compares=True))
PTKB_METHODS.add(PtkbMethod("heuristic", "the heuristic reformulator's tf-idf order",
                            lambda turns, *_: (heuristic_order(turns), "the heuristic reformulator's tf-idf order"),
                            reference=True))
PTKB_METHODS.add(PtkbMethod("profile", "the profile's own order",
                            lambda turns, *_: (profile_order(turns), "profile order"), reference=True))
METHODS: tuple[str, ...] = PTKB_METHODS.names()


def rank_by(method: str, turns: Sequence[Turn], records: Mapping[str, ReformulationRecord] | None = None,
            encoder: str | None = None, kind: str | None = None, dtype: str | None = "auto") -> tuple[PtkbRanking, str]:
    """The ranking ``method`` names, and a description of how it was made (``dtype``: the encoder's precision)."""
    return PTKB_METHODS.get(method).rank(turns, records, encoder, kind, dtype)
