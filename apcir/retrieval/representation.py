"""Query-representation fusion (paper Table 4): one query vector per turn from several reformulations.

Each reformulation of a turn is encoded as the backend's encoder encodes any
query (SPLADE: a sparse vocabulary vector; dense: an embedding, each with the
paper's length budgets); the turn's query is ``w1*v1 + w2*v2 + w3*v3`` with
the turn's weights, summed left to right, and searched once. Backends without
query vectors (BM25) cannot do this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from apcir.contract.records import Run
from apcir.contract.reformulations import QueryInput
from apcir.errors import ApcirError


def weighted_sum(vectors: Sequence[Any], weights: np.ndarray) -> Any:
    """``sum_i weights[:, i] * vectors[i]`` row by row, left to right (sparse or dense rows)."""
    if not vectors:
        raise ValueError("no vectors to sum")
    total: Any = None
    for column, block in enumerate(vectors):
        w = weights[:, column].astype(np.float32)
        if sp.issparse(block):
            term = sp.diags(w) @ sp.csr_matrix(block, dtype=np.float32)
        else:
            term = np.asarray(block, dtype=np.float32) * w[:, None]
        total = term if total is None else total + term
    if sp.issparse(total):
        total = sp.csr_matrix(total, dtype=np.float32)
        total.eliminate_zeros()
        total.sort_indices()
    return total


def search_fused_representation(
    backend: Any,
    inputs: Mapping[str, Sequence[QueryInput]],
    weights: Mapping[str, Sequence[float]],
    k: int = 1000,
    *,
    progress: bool = True,
    stored: Sequence[Mapping[str, Any] | None] = (),
) -> Run:
    """One search per turn with the weighted sum of its inputs' query vectors.

    ``inputs``: turn -> its N retrieval inputs (q', q'+r', third); ``weights``:
    turn -> N weights. Turns without weights are left out. ``stored``: for input i, the vectors the retrieval of
    its list already encoded (``{turn: 1 x vocabulary row}``, :func:`apcir.retrieval.stage.load_query_vectors`),
    used instead of encoding input i again when they hold every turn.
    """
    encoder: Any = getattr(backend, "encoder", None)
    search_vectors = getattr(backend, "search_vectors", None)
    if not hasattr(encoder, "encode_queries") or search_vectors is None:
        name = backend.manifest.backend if getattr(backend, "manifest", None) is not None else type(backend).__name__
        raise ApcirError(f"query-representation fusion needs a backend that searches with query vectors "
                         f"(embedded, lucene-splade, dense, dense-faiss), not {name}")
    turn_ids = [t for t in inputs if t in weights]
    if not turn_ids:
        return {}
    sizes = {len(inputs[t]) for t in turn_ids} | {len(weights[t]) for t in turn_ids}
    if len(sizes) != 1:
        raise ApcirError(f"every turn needs as many inputs as weights (found sizes {sorted(sizes)})")
    n = sizes.pop()
    blocks = []
    for i in range(n):
        kept = stored[i] if i < len(stored) else None
        if kept is not None and all(t in kept for t in turn_ids):
            blocks.append(sp.vstack([kept[t] for t in turn_ids], format="csr", dtype=np.float32))
        else:
            blocks.append(encoder.encode_queries([inputs[t][i] for t in turn_ids], progress=progress,
                                                 description=f"encoding queries ({i + 1}/{n})"))
    matrix = np.array([[float(w) for w in weights[t]] for t in turn_ids], dtype=np.float64)
    return search_vectors(turn_ids, weighted_sum(blocks, matrix), k, progress=progress)  # type: ignore[no-any-return]
