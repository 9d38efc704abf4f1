"""Any PyTerrier retriever as the retriever of APCIR's three lists (the ``pyterrier`` backend).

The retriever is a PyTerrier transformer: queries in (``qid`` and ``query``, or ``query_toks``), results out (``qid``,
``docno``, ``score``). A config names the function that makes it, ``retriever = "module:function"`` (or
``"FILE.py:function"``), which apcir calls once, with the index folder, when the backend opens; in Python,
:class:`apcir.pyterrier.RetrieveLists` takes the transformer itself (``retriever=``).

Each list's queries are handed over in the form ``query_form`` asks for:

* ``text``: the ``query`` column, the list's input as text (a rewrite and a response joined by a space, as the
  Lucene BM25 backend searches them);
* ``toks``: the ``query_toks`` column, ``{term: weight}`` from apcir's SPLADE encoder (the config's ``encoder``),
  the weights as the encoder gives them (a learned-sparse retriever scales them itself, as pyterrier-pisa's
  ``toks_scale`` does). The vectors are kept beside the lists, as for apcir's own SPLADE backends.

What comes back becomes a run as any backend's does: ``docno`` is the passage id, ``score`` the score, each turn's
passages in apcir's one ranking order, cut at the depth ``k``; the lists then carry the usual run tags, so fusion,
tuning, re-ranking, responses and submissions take them unchanged. A retriever that returns fewer than ``k``
passages for a turn gives fewer.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import scipy.sparse as sp

from apcir.contract.records import Run
from apcir.contract.reformulations import QueryInput
from apcir.contract.runs import ranking
from apcir.errors import ApcirError
from apcir.retrieval.embedded import check_k
from apcir.retrieval.manifest import IndexManifest
from apcir.retrieval.options import PyTerrierOptions


def query_text(query: QueryInput) -> str:
    """A list's input as one text: the query, or a (query, response) pair joined by a space."""
    if isinstance(query, str):
        return query
    text, response = query
    return text if not response else f"{text} {response}"


class TransformerRetriever:
    """A PyTerrier transformer searched as an apcir backend (a vector backend when it takes ``query_toks``)."""

    manifest: IndexManifest | None = None

    def __init__(self, transformer: Any, query_form: str = "text", encoder: Any = None, *,
                 name: str = "the PyTerrier retriever") -> None:
        if query_form not in ("text", "toks"):
            raise ApcirError(f"query_form {query_form!r}: expected text or toks")
        if not callable(getattr(transformer, "transform", None)):
            raise ApcirError(f"{name} is not a PyTerrier transformer (no transform method): "
                             f"{type(transformer).__name__}")
        if query_form == "toks" and not hasattr(encoder, "encode_queries"):
            raise ApcirError("query_form toks needs apcir's SPLADE encoder (retrieval.encoder, --encoder)")
        self.transformer = transformer
        self.query_form = query_form
        self.name = name
        self._encoder: Any = encoder if query_form == "toks" else None

    @property
    def encoder(self) -> Any:
        """The SPLADE encoder of ``query_toks`` (None for text queries: the backend then encodes nothing)."""
        return self._encoder

    @property
    def vocab_size(self) -> int:
        return int(self._encoder.vocab_size) if self._encoder is not None else 0

    def search(self, queries: Mapping[str, QueryInput], k: int = 1000, *, progress: bool = True) -> Run:
        check_k(k)
        turn_ids = list(queries)
        if self.query_form == "toks":
            return self.search_vectors(turn_ids, self._encoder.encode_queries([queries[t] for t in turn_ids],
                                                                              progress=progress), k)
        return self._retrieve(turn_ids, "query", [query_text(queries[t]) for t in turn_ids], k)

    def search_vectors(self, turn_ids: list[str], matrix: sp.csr_matrix, k: int = 1000, *,
                       progress: bool = True) -> Run:
        """Top-k passages for encoded queries, handed over as ``query_toks`` (``{term: weight}``)."""
        check_k(k)
        if self._encoder is None:
            raise ApcirError("this PyTerrier retriever takes text queries (query_form text), not vectors")
        return self._retrieve(turn_ids, "query_toks", self._encoder.to_terms(sp.csr_matrix(matrix)), k)

    def _retrieve(self, turn_ids: list[str], column: str, values: list[Any], k: int) -> Run:
        import pandas as pd

        run: Run = {turn: {} for turn in turn_ids}
        asked = [row for row, value in enumerate(values) if value]
        if not asked:
            return run
        frame = pd.DataFrame({"qid": [str(row) for row in asked], column: [values[row] for row in asked]})
        try:
            results = self.transformer.transform(frame)
        except ApcirError:
            raise
        except Exception as exc:  # the retriever's own failure, said in one line with what it was given
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ApcirError(f"{self.name} failed on the {column} of {len(asked)} queries: "
                             f"{type(exc).__name__}: {reason}".rstrip(": ")) from exc
        missing = [c for c in ("qid", "docno", "score") if c not in getattr(results, "columns", [])]
        if missing:
            raise ApcirError(f"{self.name} returned no {', '.join(missing)} column: a retriever's results are qid, "
                             "docno, score (got a " + type(results).__name__ + ")")
        scored: dict[str, dict[str, float]] = {}
        for qid, docno, score in zip(results["qid"].astype(str).tolist(), results["docno"].astype(str).tolist(),
                                     results["score"].tolist()):
            scored.setdefault(qid, {}).setdefault(docno, float(score))
        for row in asked:
            run[turn_ids[row]] = dict(ranking(scored.get(str(row), {}), k))
        return run


def open_retriever(folder: Path, manifest: IndexManifest | None, encoder: Any, *, threads: int,
                   options: PyTerrierOptions) -> TransformerRetriever:
    """``pyterrier``'s ``open``: the configured function called once with the index folder."""
    from apcir.registry import call_ref

    reference = options.retriever
    assert reference is not None  # the options' validator requires it
    try:
        transformer = call_ref(reference, folder)
    except ApcirError:
        raise
    except (ImportError, AttributeError) as exc:
        raise ApcirError(f"retriever {reference!r} cannot be loaded: {type(exc).__name__}: {exc}") from None
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ApcirError(f"retriever {reference!r} failed when called with {folder}: "
                         f"{type(exc).__name__}: {reason}".rstrip(": ")) from exc
    return TransformerRetriever(transformer, options.query_form, encoder, name=f"retriever {reference}")
