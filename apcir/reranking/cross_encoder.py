"""Cross-encoders through sentence-transformers' ``CrossEncoder`` (e.g. ``cross-encoder/ms-marco-MiniLM-L-6-v2``).

The score is the model's raw logit: ``activation_fn=torch.nn.Identity()`` is
passed explicitly, because ``CrossEncoder`` otherwise applies a sigmoid to a
one-label model whose saved config names no activation (a monotone change, but
then the scores would depend on what the checkpoint happens to record). The
pair is tokenised as (query, passage) with ``longest_first`` truncation to
``max_length`` tokens; sentence-transformers sorts each batch group by length
and restores the order.
"""

from __future__ import annotations

from typing import Any

from apcir.errors import ApcirError
from apcir.reranking.base import (
    PointwiseReranker,
    check_finite,
    fixed_threads,
    loading,
    model_location,
)
from apcir.reranking.options import PointwiseOptions
from apcir.reranking.settings import RerankSettings
from apcir.retrieval.encoder import check_length, resolve_device
from apcir.retrieval.precision import resolve_dtype, torch_dtype


class CrossEncoderScorer:
    def __init__(self, model: str, *, device: str | None = None, batch_size: int = 16, max_length: int = 512,
                 dtype: str | None = "auto") -> None:
        import torch
        from sentence_transformers import CrossEncoder

        location, local = model_location(model)
        target = resolve_device(device)
        self.dtype = resolve_dtype(dtype, target)
        with loading(location, local):
            self.model = CrossEncoder(location, device=target, local_files_only=local,
                                      max_length=max_length, activation_fn=torch.nn.Identity())
        check_classifier(self.model, location)
        self.model.to(torch_dtype(self.dtype))
        config = getattr(getattr(self.model, "model", None), "config", None)
        check_length(config, max_length, "max_length (--max-length, rerank.max_length)", location)
        labels = getattr(config, "num_labels", 1)
        if isinstance(labels, int) and labels != 1:
            raise ApcirError(f"{location} has {labels} output labels; apcir scores a pair by a one-label "
                             "cross-encoder's logit (e.g. cross-encoder/ms-marco-MiniLM-L-6-v2), and with several "
                             "labels which one means 'relevant' is not known")
        fixed_threads()
        self.batch_size = batch_size

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        values = self.model.predict([list(p) for p in pairs], batch_size=self.batch_size, show_progress_bar=False,
                                    convert_to_numpy=True)
        scores = values.reshape(len(pairs), -1)[:, 0]
        check_finite(scores, self.dtype)
        return [float(v) for v in scores]


def check_classifier(model: Any, location: str) -> None:
    """Refuse a checkpoint that is not a sequence-classification model (its config's ``architectures`` say so).

    ``CrossEncoder`` loads any checkpoint as ``AutoModelForSequenceClassification``; for one saved as another
    architecture (a monoT5's ``T5ForConditionalGeneration``, a plain ``BertModel``) the score head is newly
    initialised at random, and transformers' note saying so is silenced here, so the scores would be noise.
    A config without ``architectures`` cannot be told apart and is accepted.
    """
    config = getattr(getattr(model, "model", None), "config", None)
    architectures = [str(a) for a in (getattr(config, "architectures", None) or [])]
    if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
        raise ApcirError(
            f"{location} is not a cross-encoder: its config names {', '.join(architectures)}, not a "
            "...ForSequenceClassification model, so its score head would be newly initialised and every score "
            "random; give a cross-encoder checkpoint (e.g. cross-encoder/ms-marco-MiniLM-L-6-v2), or --reranker "
            "monot5 (rerank.reranker) for a monoT5 model"
        )


def load(settings: RerankSettings) -> PointwiseReranker:
    own = settings.own(PointwiseOptions)
    scorer = CrossEncoderScorer(settings.model_name, device=own.device, batch_size=own.batch_size,
                                max_length=own.max_length, dtype=own.dtype)
    reranker = PointwiseReranker(settings.model_name, scorer.score, own.batch_size)
    reranker.name = "cross-encoder"
    return reranker
