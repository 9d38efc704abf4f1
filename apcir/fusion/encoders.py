"""The text encoder E of the entropy and DEPS baselines: TF-IDF, or a SPLADE model densified.

``apcir baseline --encoder`` and ``apcir run`` (the index's own model, or TF-IDF
for a BM25 index) both get theirs from :func:`text_encoder`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from apcir.errors import ApcirError
from apcir.fusion.baselines import tfidf_encoder

Encoder = Callable[[list[str]], np.ndarray]


class MemoEncoder:
    """Dense vectors of texts, encoded once each: ``prime`` encodes many texts in one batch."""

    def __init__(self, encode_batch: Callable[[list[str]], Any]):
        self.encode_batch = encode_batch
        self.vectors: dict[str, Any] = {}

    def prime(self, texts: Sequence[str]) -> None:
        new = sorted({t for t in texts if t not in self.vectors})
        if new:
            for text, vector in zip(new, self.encode_batch(new)):
                self.vectors[text] = vector

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.prime(texts)
        return np.vstack([self.vectors[t] for t in texts])


def text_encoder(name: str, corpus: Sequence[str] | None = None, kind: str = "splade",
                 dtype: str | None = "auto") -> Encoder:
    """``tfidf`` (IDF from ``corpus`` when given, else from each call's texts) or a model's dense vectors.

    ``kind`` says what the model is: ``splade`` (its sparse vectors, densified) or ``dense`` (a bi-encoder's
    embeddings, for an experiment on a dense index); ``dtype`` its precision (:mod:`apcir.retrieval.precision`).
    """
    if name == "tfidf":
        return tfidf_encoder(corpus)
    try:
        from apcir.retrieval.encoder import make_encoder
        from apcir.retrieval.registry import ENCODER_KINDS
    except ImportError as exc:  # pragma: no cover - depends on the retrieval extra
        raise ApcirError(f"encoder {name}: the retrieval encoders are unavailable ({exc}); use tfidf") from None
    model = make_encoder(kind, name, dtype=dtype)
    spec = ENCODER_KINDS.get(kind)
    return MemoEncoder(lambda texts: spec.rows(model.encode_documents(texts, progress=False)))
