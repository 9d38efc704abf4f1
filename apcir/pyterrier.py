"""apcir's stages as PyTerrier transformers (``pip install -e '.[pyterrier]'``, in ``make setup``'s environment).

They take and give PyTerrier's frames (queries: ``qid``, ``query``; results: ``qid``,
``docno``, ``score``, ``rank``) and compose with ``>>``::

    import pyterrier as pt
    from apcir.pyterrier import Answer, Reformulate, Retrieve, Fuse, Rerank

    apcir_pipeline = Reformulate("heuristic", topics="ikat23-test") >> Fuse("index/", weights="weights.json")
    single = Reformulate("heuristic", topics="ikat23-test") >> Retrieve("index/", field="rewrite")
    pt.Experiment([single, apcir_pipeline], topics, qrels, eval_metrics=["nDCG@3", "RR"])
    answered = Answer("my-experiment.toml")(topics)     # the whole turn as apcir converse answers it

``Reformulate`` needs each turn's conversation and PTKB: from ``topics=`` (any name, ir_datasets
id or file apcir takes), or from the frame's own columns when it comes from
``pt.get_dataset("irds:trec-ikat/2023/test")`` (``import apcir.irds`` first).
Each transformer calls the same functions as ``apcir run``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyterrier as pt

from apcir import api
from apcir.contract.records import HistoryEntry, Turn
from apcir.contract.reformulations import LIST_NAMES, QueryInput
from apcir.contract.runs import ranking
from apcir.contract.weights import WeightsFile
from apcir.errors import ApcirError

REWRITE_COLUMNS = ["level", "rewrite", "response", "third_rewrite", "third_response"]


def run_of(results: pd.DataFrame) -> api.Run:
    """A results frame as an apcir run ``{qid: {docno: score}}``."""
    run: dict[str, dict[str, float]] = {}
    for qid, docno, score in zip(results["qid"].astype(str), results["docno"].astype(str), results["score"]):
        run.setdefault(qid, {})[docno] = float(score)
    return api.Run(run)


def frame_of(run: Mapping[str, Mapping[str, float]], queries: pd.DataFrame | None = None,
             extra: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """An apcir run as a results frame (``rank`` from 0, trec_eval's order), with each query's columns."""
    rows = [(qid, doc, score, rank) for qid in run for rank, (doc, score) in enumerate(ranking(run[qid]))]
    frame = pd.DataFrame(rows, columns=["qid", "docno", "score", "rank"])
    for column, value in (extra or {}).items():
        frame[column] = value
    if queries is not None:
        kept = queries.drop(columns=[c for c in ("docno", "score", "rank", "list") if c in queries.columns])
        frame = frame.merge(kept.drop_duplicates("qid"), on="qid", how="left")
    return frame


def qrels_frame(name_or_path: str | Path) -> pd.DataFrame:
    """Qrels (a bundled name, an ir_datasets id or a file) as PyTerrier's frame: qid, docno, label."""
    rows = [(turn, doc, grade) for turn, grades in api.qrels(name_or_path).items() for doc, grade in grades.items()]
    return pd.DataFrame(rows, columns=["qid", "docno", "label"])


def topics_frame(name_or_path: str | Path | Sequence[Turn]) -> pd.DataFrame:
    """Topics as PyTerrier's frame: qid and query (the utterance); ``Reformulate(topics=...)`` adds the rest."""
    turns = api.topics(name_or_path) if isinstance(name_or_path, (str, Path)) else list(name_or_path)
    return pd.DataFrame({"qid": [t.turn_id for t in turns], "query": [t.utterance for t in turns]})


def _require(columns: list[str], needed: list[str], who: Any) -> None:
    """PyTerrier's own check (``pt.validate``): a pipeline missing a column fails before it runs."""
    pt.validate.columns(list(columns), includes=needed, context=who)


def _turn_from_row(row: Any) -> Turn:
    """A Turn from an ir_datasets iKAT query row (``apcir.irds``'s columns)."""
    history = [HistoryEntry(turn_id=str(h[0]), utterance=str(h[1]), response=str(h[2]))
               for h in (row.get("history") or ())]
    ptkb = {str(k): str(v) for k, v in (row.get("ptkb") or ())}
    text = row.get("text", row.get("query", ""))
    conversation, _, number = str(row["qid"]).rpartition("_")
    return Turn(turn_id=str(row["qid"]), conversation_id=str(row.get("conversation_id") or conversation),
                turn_number=int(row.get("turn_number") or number or 0), utterance=str(text),
                manual_rewrite=str(row.get("manual_rewrite", "")), ptkb=ptkb, history=history)


class Reformulate(pt.Transformer):  # type: ignore[misc]
    """Queries in; each turn's level and three rewrites out (``query`` becomes q', the utterance moves to
    ``query_0``): columns ``level``, ``rewrite``, ``response`` (r'), ``third_rewrite``, ``third_response``."""

    def __init__(self, method: str = "heuristic", *, topics: str | Path | Sequence[Turn] | None = None,
                 out: str | Path | None = None, **settings: Any):
        self.method = method
        self.topics = topics
        self.out = out
        self.settings = settings
        self._turns: dict[str, Turn] | None = None

    def _known(self) -> dict[str, Turn]:
        if self._turns is None:
            chosen = api.topics(self.topics) if isinstance(self.topics, (str, Path)) else list(self.topics or [])
            self._turns = {t.turn_id: t for t in chosen}
        return self._turns

    def transform_outputs(self, columns: list[str]) -> list[str]:
        _require(columns, ["qid"], self)
        return list(dict.fromkeys([*columns, "query_0", *REWRITE_COLUMNS, "query"]))

    def transform(self, queries: pd.DataFrame) -> pd.DataFrame:
        known = self._known()
        turns = []
        for row in queries.to_dict("records"):
            qid = str(row["qid"])
            if qid in known:
                turns.append(known[qid])
            elif "ptkb" in row and "history" in row:
                turns.append(_turn_from_row(row))
            else:
                raise ApcirError(f"Reformulate: turn {qid} is not in topics={self.topics!r} and the frame has no "
                                 "history/ptkb columns (give topics=, or a frame of an irds:trec-ikat dataset)")
        records = api.reformulate(turns, self.method, out=self.out, **self.settings)
        out = queries.copy()
        out["qid"] = out["qid"].astype(str)
        if "query" in out.columns:
            out["query_0"] = out["query"]
        outputs = [records[str(q)].output for q in out["qid"]]
        out["level"] = [o.level if o else "a" for o in outputs]
        out["rewrite"] = [o.rewrite if o else t.utterance for o, t in zip(outputs, turns)]
        out["response"] = [o.response if o else "" for o in outputs]
        out["third_rewrite"] = [o.third_rewrite if o else t.utterance for o, t in zip(outputs, turns)]
        out["third_response"] = [o.third_response if o else "" for o in outputs]
        out["query"] = out["rewrite"]
        return out


class Answer(pt.Transformer):  # type: ignore[misc]
    """A whole turn as ``apcir converse`` and ``apcir run`` answer it, from an experiment config (a file, a bundled
    config's name or a dict): the per-turn pipeline (:mod:`apcir.experiment.turns`: reformulation, the three lists,
    level-weighted fusion, the submitted re-rankers, the response). Queries in; the final ranking out (``qid``,
    ``docno``, ``score``, ``rank``), with each turn's ``level``, its ``answer`` (the response's text) and
    ``ptkb_used`` (the ids of the PTKB statements it relied on, a list)."""

    def __init__(self, config: str | Path | Mapping[str, Any], *, topics: str | Path | Sequence[Turn] | None = None,
                 out: str | Path | None = None, **overrides: Any):
        self.experiment = api.Experiment.from_config(config, **overrides)
        self.topics = topics if topics is not None else self.experiment.config.topics
        self.out = out
        self._reformulate = Reformulate(topics=self.topics)

    def transform_outputs(self, columns: list[str]) -> list[str]:
        _require(columns, ["qid"], self)
        return list(dict.fromkeys(["qid", "docno", "score", "rank", *columns, "level", "answer", "ptkb_used"]))

    def transform(self, queries: pd.DataFrame) -> pd.DataFrame:
        known = self._reformulate._known()
        turns = [known[str(row["qid"])] if str(row["qid"]) in known else _turn_from_row(row)
                 for row in queries.to_dict("records")]
        answers = self.experiment.answer(turns, out=self.out)
        frames = []
        for qid, done in answers.items():
            frame = frame_of({qid: done.ranking}, queries[queries["qid"].astype(str) == qid],
                             {"level": done.level, "answer": done.text})
            frame["ptkb_used"] = pd.Series([list(done.ptkb_used)] * len(frame), index=frame.index, dtype=object)
            frames.append(frame)
        return pd.concat(frames, ignore_index=True) if frames else frame_of({}, None)


def _query_inputs(queries: pd.DataFrame, field: str) -> dict[str, QueryInput]:
    """Each query's retrieval input for ``field`` (rewrite, rewrite_response, third; or query)."""
    if field == "query" or "rewrite" not in queries.columns:
        return {str(r["qid"]): (str(r["query"]), None) for r in queries.to_dict("records")}
    columns = {"rewrite": ("rewrite", None), "rewrite_response": ("rewrite", "response"),
               "third": ("third_rewrite", "third_response")}
    if field not in columns:
        raise ApcirError(f"field {field!r}: expected query or one of {', '.join(LIST_NAMES)}")
    text, extra = columns[field]
    return {str(r["qid"]): (str(r[text]), (str(r[extra]) or None) if extra else None)
            for r in queries.to_dict("records")}


class Retrieve(pt.Transformer):  # type: ignore[misc]
    """Search an apcir index (or a Lucene one) with one of the rewrites: ``field`` is rewrite (q'),
    rewrite_response (q'+r'), third, or query (the frame's query).

    ``retriever``: any PyTerrier retriever (a transformer) instead of an index, as the ``pyterrier`` backend uses
    one: it is given each query's text (``query_form="text"``) or, with ``query_form="toks"``, the ``query_toks``
    apcir's SPLADE ``encoder`` makes (default splade-v3). ``options``: the backend's own options
    (``query_algorithm`` for a pisa index, ``bm25_k1`` for a Lucene one, ...)."""

    def __init__(self, index: str | Path | None = None, *, field: str = "rewrite", k: int = 1000,
                 encoder: str | None = None, device: str | None = None, backend: str | None = None,
                 dtype: str = "auto", retriever: Any = None, query_form: str = "text", **options: Any):
        if (index is None) == (retriever is None):
            raise ApcirError("give an index or a retriever (a PyTerrier transformer), not both or neither")
        self.index, self.field, self.k = Path(index) if index is not None else None, field, k
        self.encoder, self.device, self.backend, self.dtype = encoder, device, backend, dtype
        self.retriever, self.query_form, self.options = retriever, query_form, options
        self._searcher: Any = None

    def _open(self) -> Any:
        from apcir.retrieval.backends import open_index

        if self.retriever is None:
            assert self.index is not None
            return open_index(self.index, self.encoder, device=self.device, backend=self.backend, dtype=self.dtype,
                              options=self.options or None)
        from apcir.retrieval.encoder import DEFAULT_MODEL, make_encoder
        from apcir.retrieval.transformer import TransformerRetriever

        encoder = None
        if self.query_form == "toks":
            encoder = make_encoder("splade", self.encoder or DEFAULT_MODEL, device=self.device, dtype=self.dtype)
        return TransformerRetriever(self.retriever, self.query_form, encoder, name=repr(self.retriever))

    def run_field(self, queries: pd.DataFrame, field: str | None = None) -> api.Run:
        from apcir.retrieval.core import ListRetrieval

        if self._searcher is None:
            self._searcher = self._open()
        name = field or self.field
        runs = ListRetrieval(self._searcher, self.k).search({name: _query_inputs(queries, name)})
        return api.Run(runs[name], name=name)

    def transform_outputs(self, columns: list[str]) -> list[str]:
        _require(columns, ["qid", "query"], self)
        return list(dict.fromkeys(["qid", "docno", "score", "rank", *columns]))

    def transform(self, queries: pd.DataFrame) -> pd.DataFrame:
        return frame_of(self.run_field(queries), queries)


class RetrieveLists(Retrieve):
    """The three lists APCIR fuses (q', q'+r', third), in one results frame with a ``list`` column: from an index,
    or from any PyTerrier retriever (``retriever=``, with ``query_form`` text or toks; see :class:`Retrieve`)."""

    def __init__(self, index: str | Path | None = None, *, k: int = 1000, **kwargs: Any):
        super().__init__(index, k=k, **kwargs)

    def transform_outputs(self, columns: list[str]) -> list[str]:
        return [*super().transform_outputs(columns), "list"]

    def transform(self, queries: pd.DataFrame) -> pd.DataFrame:
        return pd.concat([frame_of(self.run_field(queries, name), queries, {"list": name}) for name in LIST_NAMES],
                         ignore_index=True)


class LevelFusion(pt.Transformer):  # type: ignore[misc]
    """Fuse the three lists of a ``RetrieveLists`` frame with each turn's level's weights (min-max normalised
    per list, unless the weights say otherwise): APCIR's fusion.

    Weights tuned on some of the turns fused are said so: a warning ("tuned on test") when it runs, since an
    evaluation on their qrels is then not held out, and the transformer's name (what ``pt.Experiment`` shows
    without ``names=``) says which turns the weights were tuned on."""

    def __init__(self, weights: WeightsFile | str | Path, *, norm: str | None = None, depth: int | None = None,
                 missing_level: str | None = "a"):
        from apcir.contract.weights import load_weights

        self.weights = load_weights(weights) if isinstance(weights, (str, Path)) else weights
        self.source = str(weights) if isinstance(weights, (str, Path)) else "the weights given"
        self.norm, self.depth, self.missing_level = norm, depth, missing_level
        self.tuned_on_test = 0
        """How many of the turns last fused the weights were tuned on."""

    def __repr__(self) -> str:
        tuned_on = self.weights.tuned_on
        tuned = f", tuned on {tuned_on.turns} turns of {tuned_on.qrels}" if tuned_on.turns else ""
        return f"LevelFusion({self.source!r}{tuned})"

    __str__ = __repr__

    def transform_outputs(self, columns: list[str]) -> list[str]:
        _require(columns, ["qid", "docno", "score", "list", "level"], self)
        return [c for c in columns if c != "list"]

    def transform(self, results: pd.DataFrame) -> pd.DataFrame:
        if "list" not in results.columns or "level" not in results.columns:
            raise ApcirError("LevelFusion takes the frame of RetrieveLists over Reformulate's queries (columns "
                             "'list' and 'level')")
        lists = [run_of(results[results["list"] == name]) for name in LIST_NAMES]
        levels = dict(zip(results["qid"].astype(str), results["level"].astype(str)))
        tuning = set(self.weights.tuned_on.turn_fingerprints)
        self.tuned_on_test = len(tuning & set(levels))
        if self.tuned_on_test:
            from apcir.console import warn

            warn(f"LevelFusion: tuned on test: the weights ({self.source}) were tuned on {self.tuned_on_test} of the "
                 f"{len(levels)} turns fused (on {self.weights.tuned_on.qrels or 'their qrels'}); scored on those "
                 "qrels, these numbers are not held out")
        fused = api.fuse(lists, levels, self.weights, norm=self.norm, depth=self.depth,
                         missing_level=self.missing_level)
        queries = results.drop(columns=["docno", "score", "rank", "list"]).drop_duplicates("qid")
        return frame_of(fused, queries)


def Fuse(index: str | Path | None, weights: WeightsFile | str | Path, *, k: int = 1000, norm: str | None = None,
         depth: int | None = None, **retrieve: Any) -> Any:
    """APCIR's retrieval and fusion in one transformer: ``RetrieveLists(index) >> LevelFusion(weights)`` (index None
    with ``retriever=``: any PyTerrier retriever's three lists)."""
    return RetrieveLists(index, k=k, **retrieve) >> LevelFusion(weights, norm=norm, depth=depth)


class Rerank(pt.Transformer):  # type: ignore[misc]
    """Re-rank a results frame's top ``depth`` passages (the rest keep their place below) with an apcir
    re-ranker; the query is the ``field`` column (default: rewrite, else query)."""

    def __init__(self, reranker: str = "cross-encoder", *, passages: str | Path | Mapping[str, str],
                 field: str = "rewrite", **settings: Any):
        self.reranker, self.passages, self.field, self.settings = reranker, passages, field, settings

    def transform_outputs(self, columns: list[str]) -> list[str]:
        _require(columns, ["qid", "docno", "score"], self)
        return list(columns)

    def transform(self, results: pd.DataFrame) -> pd.DataFrame:
        column = self.field if self.field in results.columns else "query"
        queries = dict(zip(results["qid"].astype(str), results[column].astype(str)))
        reranked = api.rerank(run_of(results), queries, self.passages, self.reranker, field=self.field,
                              **self.settings)
        kept = results.drop(columns=["docno", "score", "rank"]).drop_duplicates("qid")
        return frame_of(reranked, kept)


__all__ = ["Answer", "Fuse", "LevelFusion", "Reformulate", "Rerank", "Retrieve", "RetrieveLists", "frame_of", "qrels_frame",
           "run_of", "topics_frame"]
