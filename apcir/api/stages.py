"""The stages as functions: records and runs in memory, the same calls as the stage commands."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from apcir import datasets
from apcir.api.data import PathLike, judgements_of, passage_texts, turn_list
from apcir.api.runs import Run, load_run
from apcir.contract.records import Turn
from apcir.contract.reformulations import ReformulationRecord
from apcir.contract.responses import ResponseRecord
from apcir.contract.weights import WeightsFile


def records_file(out: PathLike | None, scratch: list[tempfile.TemporaryDirectory[str]], name: str) -> Path:
    if out is not None:
        return Path(out)
    scratch.append(tempfile.TemporaryDirectory(prefix="apcir-"))
    return Path(scratch[-1].name) / name


def reformulate(turns: PathLike | Sequence[Turn], method: str = "heuristic", *, out: PathLike | None = None,
                progress: bool = False, **settings: Any) -> dict[str, ReformulationRecord]:
    """One record per turn (level and three rewrites) by ``method`` (``heuristic``, ``manual``, ``file:PATH`` or an
    LLM such as ``gpt-4o``; ``settings`` are ``[reformulator]``'s keys, e.g. ``base_url``). With ``out`` the
    records are kept there and a second call resumes; failed turns fall back to their utterance at level a."""
    from apcir.reformulation.core import Reformulation
    from apcir.reformulation.settings import ReformulatorOptions

    options = ReformulatorOptions.model_validate({**settings, "method": method})
    scratch: list[Any] = []
    path = records_file(out, scratch, "reformulations.jsonl")
    return Reformulation(options, path, redo_stale=True, progress=progress)(turn_list(turns))


def retrieve(queries: Mapping[str, Any], index: PathLike, *, k: int = 1000, field: str = "rewrite",
             encoder: str | None = None, device: str | None = None, backend: str | None = None,
             progress: bool = False, dtype: str = "auto", **options: Any) -> Run:
    """Search an index (``apcir index build``, or a Lucene index) as ``apcir retrieve`` does: ``queries`` are
    reformulation records (``field`` picks rewrite, rewrite_response or third) or ``{turn_id: text}``;
    ``dtype``: the query encoder's precision (auto, float32, bfloat16, float16); ``options``: the backend's own
    (``query_algorithm="wand"`` for pisa, ``retriever="module:function"`` with ``backend="pyterrier"``, ...)."""
    from apcir.retrieval.backends import open_index
    from apcir.retrieval.core import ListRetrieval, list_queries

    if queries and all(isinstance(v, ReformulationRecord) for v in queries.values()):
        asked: Mapping[str, Any] = list_queries(queries, field)
    else:
        asked = {t: str(v) for t, v in queries.items()}
    searcher = open_index(index, encoder, device=device, threads=2, backend=backend, dtype=dtype,
                          options=options or None)
    runs = ListRetrieval(searcher, k, progress).search({field: asked})
    return Run(runs[field], name=field)


def tune(lists: Sequence[Any], levels: Mapping[str, str] | PathLike, qrels: PathLike | Mapping[str, Any], *,
         objective: str = "paper", step: float | str = 0.01, norm: str = "minmax", depth: int = 1000,
         rel_threshold: int = 1, min_turns: int = 1, missing_level: str | None = None,
         progress: bool = False, **rule: Any) -> WeightsFile:
    """Per-level weights by the exact grid search of ``apcir tune`` over the fused lists (runs or paths, in weight
    order); ``levels`` is ``{turn_id: level}``, a levels file or ``annotators:TOPICS``. ``rule``: how the points
    are chosen, as ``[fusion.weights]`` says it (``shrinkage=0 | "cv"``, ``select="argmax" | "plateau"``,
    ``epsilon``, ``bootstrap``, ``seed``)."""
    from apcir import datasets
    from apcir.fusion.protocol import FusionInputs, search_for, tune_variants
    from apcir.fusion.settings import FusionParams, TuningSettings

    params = FusionParams.of(norm=norm, depth=depth, rel_threshold=rel_threshold, missing_level=missing_level)
    runs = [load_run(r) if isinstance(r, (str, Path)) else r for r in lists]
    level_map = datasets.levels(levels) if isinstance(levels, (str, Path)) else dict(levels)
    judgements, qrels_name = judgements_of(qrels)
    tuning = TuningSettings.model_validate({"step": str(step), "objective": objective, "min_turns": min_turns, **rule})
    inputs = FusionInputs(lists=runs, levels=level_map, qrels=judgements, qrels_name=qrels_name,
                          run_names=[getattr(r, "name", f"list{i + 1}") for i, r in enumerate(runs)],
                          levels_name="levels")
    search, _ = search_for(inputs, tuning, params, progress=progress)
    return tune_variants(inputs, tuning, ["apcir"], params, search=search)["apcir"]


def fuse(lists: Sequence[Any], levels: Mapping[str, str] | PathLike, weights: WeightsFile | PathLike, *,
         norm: str | None = None, depth: int | None = None, missing_level: str | None = "a") -> Run:
    """The fused run: each turn's lists min-max normalised (or ``norm``) and summed with its level's weights."""
    from apcir.contract.levels import load_levels
    from apcir.contract.weights import load_weights
    from apcir.fusion.core import LevelFusion
    from apcir.fusion.normalise import check_norm

    tuned = load_weights(weights) if isinstance(weights, (str, Path)) else weights
    runs = [load_run(r) if isinstance(r, (str, Path)) else r for r in lists]
    level_map = load_levels(levels) if isinstance(levels, (str, Path)) else dict(levels)
    chosen_norm = norm or tuned.norm
    check_norm(chosen_norm)
    return Run(LevelFusion(tuned, chosen_norm, depth or tuned.depth, missing_level)(runs, level_map), name="fused", weights=tuned, weights_source=str(weights) if isinstance(weights, (str, Path)) else
               f"weights tuned on {tuned.tuned_on.qrels or 'unnamed qrels'}")


def rerank(run: Mapping[str, Mapping[str, float]], queries: Mapping[str, Any], passages: PathLike | Mapping[str, str],
           reranker: str = "cross-encoder", *, field: str = "rewrite", progress: bool = False,
           **settings: Any) -> Run:
    """``run`` re-ranked (its top ``depth`` passages; the rest keep their place below): ``queries`` are
    reformulation records or ``{turn_id: text}``, ``passages`` a collection or ``{passage_id: text}``;
    ``settings`` are ``[rerank]``'s keys (model, depth, ...)."""
    from apcir.reranking.core import Reranking
    from apcir.reranking.settings import RerankSettings

    config = RerankSettings.model_validate({**settings, "reranker": reranker, "field": field})
    if all(isinstance(v, ReformulationRecord) for v in queries.values()):
        from apcir.reranking.stage import record_queries

        texts_of = record_queries(queries, field)
    else:
        texts_of = {t: str(v) for t, v in queries.items()}
    result = Reranking(config, lambda ids: passage_texts(passages, ids), progress)({t: dict(h) for t, h in run.items()},
                                                                             texts_of)
    return Run(result, name=f"{getattr(run, 'name', 'run')}+{config.label}")


def respond(turns: PathLike | Sequence[Turn], reformulations: Mapping[str, ReformulationRecord],
            run: Mapping[str, Mapping[str, float]], passages: PathLike | Mapping[str, str],
            responder: str = "extractive", *, out: PathLike | None = None, progress: bool = False,
            ptkb_encoder: str | None = None, **settings: Any) -> dict[str, ResponseRecord]:
    """One grounded response per turn from ``run``'s top passages, citing them, with the PTKB statements it relied
    on (``responder``: extractive or an LLM; ``settings`` are ``[respond]``'s keys). Resumable with ``out``.
    The statements are ranked the reformulation's ``ptkb_used`` first, then by similarity to the personalised
    rewrite: BM25, or ``ptkb_encoder``'s (the retrieval encoder, e.g. ``splade-tiny``, ranks them as ``apcir run``
    does with that encoder)."""
    from apcir.responses.core import Responding, StatementRanking
    from apcir.responses.settings import RespondSettings

    config = RespondSettings.model_validate({**settings, "responder": responder})
    scratch: list[Any] = []
    path = records_file(out, scratch, "responses.jsonl")
    responding = Responding(config, path, StatementRanking.of(ptkb_encoder), lambda ids: passage_texts(passages, ids),
                            redo_stale=True, progress=progress)
    return responding(turn_list(turns), reformulations, {t: dict(h) for t, h in run.items()})


def nugget_recall(responses: PathLike | Sequence[PathLike], nuggets: PathLike, topics: PathLike,
                  matcher: str = "lexical", *, baseline: str | None = None, compare_matcher: str | None = None,
                  **settings: Any) -> Any:
    """Nugget recall of one or many runs' responses, as ``apcir evaluate-responses --nuggets`` computes it:
    ``responses`` are files (apcir's JSONL, iKAT 2024 or 2025 forms) or ``ikat25-runs``; ``nuggets`` a set name
    (``ikat25-test``) or file; ``settings`` the matcher's (``tau``, ``encoder``, ``model``, ``batched``,
    ``learned_model``). The default matcher is apcir's (``DEFAULT_MATCHER``: the one that agreed best with people)."""
    from apcir import datasets
    from apcir.evaluation.nuggets.gold import load_nuggets, load_response_runs
    from apcir.evaluation.nuggets.scores import score_runs
    from apcir.evaluation.nuggets.settings import MatcherSettings

    sources = [responses] if isinstance(responses, (str, Path)) else list(responses)
    gold = load_nuggets(nuggets, {t.turn_id for t in datasets.topics(topics)})
    return score_runs(gold, load_response_runs(sources), matcher, MatcherSettings.model_validate({**settings, "matcher": matcher}),
                      baseline=baseline, compare_matcher=compare_matcher)


def export(run: Mapping[str, Mapping[str, float]], turns: PathLike | Sequence[Turn], out: PathLike, *,
           run_name: str = "apcir", team_id: str = "apcir", responses: Mapping[str, ResponseRecord] | None = None,
           reformulations: Mapping[str, ReformulationRecord] | None = None,
           passages: PathLike | Mapping[str, str] | None = None, format: str | None = None,
           year: int | None = None, ptkb_encoder: str | None = None, **settings: Any) -> Path:
    """An iKAT submission of ``run`` (with responses and PTKB provenance) in the topics' year's format, or
    ``format`` (``apcir formats`` lists them); ``settings`` are ``[export]``'s keys; the statements ranked as
    :func:`respond` ranks them (``ptkb_encoder``). Returns the file written."""
    from apcir.responses.core import StatementRanking
    from apcir.submission.common import USED_TOP, SubmissionInputs
    from apcir.submission.settings import ExportSettings
    from apcir.submission.stage import text_ids, write_submission

    chosen = turn_list(turns)
    the_year = year or (datasets.topics_year(turns) if isinstance(turns, (str, Path)) else 2023)
    config = ExportSettings.model_validate({**settings, **({"format": format} if format else {}),
                                            "team_id": team_id}).resolved(the_year)
    fmt = config.format
    assert fmt is not None
    plain = {t: dict(h) for t, h in run.items()}
    records = dict(reformulations or {})
    used_top = USED_TOP
    wanted = text_ids(plain, responses, used_top)
    texts = passage_texts(passages, wanted) if passages is not None else {}
    inputs = SubmissionInputs(run=plain, turns=chosen, run_name=run_name, run_type=config.run_type, team_id=team_id,
                              reformulations=records, passages=texts, mode=config.text, used_top=used_top,
                              responses=dict(responses) if responses is not None else None,
                              ptkb=StatementRanking.of(ptkb_encoder)(chosen, records),
                              ptkb_mode=config.ptkb, eval_response=config.eval_response, year=the_year)
    return write_submission(inputs, fmt, Path(out), allow_missing_text=config.allow_missing_text or passages is None)


def validate(path: PathLike, turns: PathLike | Sequence[Turn], format: str | None = None,
             year: int | None = None) -> list[str]:
    """The problems the offline iKAT checks find in a submission file (empty: it passes)."""
    from apcir.submission.stage import validate_submission

    chosen = turn_list(turns)
    the_year = year or (datasets.topics_year(turns) if isinstance(turns, (str, Path)) else None)
    return validate_submission(Path(path), chosen, format, the_year)
