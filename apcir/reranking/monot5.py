"""monoT5 as pygaggle computes it, on ``transformers`` (about thirty lines).

pygaggle (castorini/pygaggle ``pygaggle/rerank/transformer.py``, ``MonoT5.rescore``;
``pygaggle/model/tokenize.py``, ``T5BatchTokenizer``; ``pygaggle/model/decode.py``,
``greedy_decode``) scores a (query, passage) pair as:

1. the text ``Query: {query} Document: {passage} Relevant:``, tokenised with
   ``truncation=True, max_length=512`` (the whole string is cut, so a long
   passage loses ``Relevant:``; the end-of-sequence token stays);
2. one decoder step from ``decoder_start_token_id``: the logits of the first
   output position over the vocabulary;
3. ``log_softmax`` over the two logits of the tokens ``false`` and ``true``;
   the score is the ``true`` entry, log P(true | {true, false}).

pygaggle itself cannot be installed next to apcir (its last release pins
transformers 4.0, pyserini 0.10, pydantic 1.5 and tensorflow), and the two
maintained libraries were checked and not used: rerankers' T5 ranker returns
P(true) rather than its log (in float32, exp(-3e-8) is 1.0, so confident
passages tie) and maps a token missing from the vocabulary silently to
``<unk>``; pyterrier-t5 appends ``Relevant:`` after the padding, so a score
depends on which passages share its batch (up to 9.5e-3 on a tiny model).

The ``true``/``false`` ids come from the model's own tokenizer (the word as the
tokenizer splits it: ``▁true`` = 1176 in the T5 vocabulary), never from a
table, so any T5 vocabulary works; mT5 models answer ``yes``/``no``
(``true_token``/``false_token``). Inputs are batched by length (batch
composition changes a score by < 1e-6); the forward pass runs on the GPU when
present, in the precision ``dtype`` names (``auto``: bfloat16 on a GPU that has it, else float32; float16
overflows in T5 and is refused when it does).
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
from apcir.reranking.options import MonoT5Options
from apcir.reranking.settings import RerankSettings
from apcir.retrieval.encoder import resolve_device
from apcir.retrieval.precision import resolve_dtype, torch_dtype

TEMPLATE = "Query: {query} Document: {document} Relevant:"


def answer_token_id(tokenizer: Any, word: str, model: str) -> int:
    """The vocabulary id of ``word`` as the model would write it first (one piece), else an error naming it."""
    pieces = tokenizer.tokenize(word)
    if len(pieces) != 1:
        vocab = tokenizer.get_vocab()
        if word in vocab:
            return int(vocab[word])
        raise ApcirError(f"{model}: the answer word {word!r} is not one token of the model's vocabulary (it splits "
                         f"into {pieces}); set --true-token/--false-token to the words the model answers with")
    token_id = tokenizer.convert_tokens_to_ids(pieces[0])
    if token_id is None or token_id == tokenizer.unk_token_id:
        raise ApcirError(f"{model}: the answer word {word!r} is unknown to the model's vocabulary")
    return int(token_id)


class MonoT5:
    """Scores of (query, passage) pairs: log P(true), exactly pygaggle's number."""

    def __init__(self, model: str, *, device: str | None = None, batch_size: int = 16, max_length: int = 512,
                 true_token: str = "true", false_token: str = "false", dtype: str | None = "auto") -> None:
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        location, local = model_location(model)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        with loading(location, local):
            self.tokenizer = AutoTokenizer.from_pretrained(location, local_files_only=local)
            self.model = AutoModelForSeq2SeqLM.from_pretrained(location, local_files_only=local)
        self.model.to(self.device, torch_dtype(self.dtype)).eval()
        fixed_threads()
        self.batch_size = batch_size
        self.max_length = max_length
        self.ids = [answer_token_id(self.tokenizer, false_token, model),
                    answer_token_id(self.tokenizer, true_token, model)]
        if self.ids[0] == self.ids[1]:
            raise ApcirError(f"{model}: the answer words {true_token!r} and {false_token!r} are the same token "
                             f"(id {self.ids[0]}) of the model's vocabulary, so every score would be equal; set "
                             "--true-token/--false-token to two different words")
        start = getattr(self.model.config, "decoder_start_token_id", None)
        if start is None:  # transformers 5's T5Config has no default for it; real monoT5 configs carry 0
            start = getattr(self.model.generation_config, "decoder_start_token_id", None)
        self.start = self.model.config.pad_token_id if start is None else start

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        """log P(true) of each (query, passage) pair, in the order given."""
        import torch

        texts = [TEMPLATE.format(query=q, document=d) for q, d in pairs]
        encoded = self.tokenizer(texts, truncation=True, max_length=self.max_length)["input_ids"]
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
        scores = [0.0] * len(texts)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            inputs = self.tokenizer.pad({"input_ids": [encoded[i] for i in batch]}, padding="longest",
                                        return_tensors="pt").to(self.device)
            decoder = torch.full((len(batch), 1), self.start, dtype=torch.long, device=self.device)
            with torch.inference_mode():
                logits = self.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                    decoder_input_ids=decoder).logits[:, -1, :]
            values = torch.log_softmax(logits[:, self.ids].float(), dim=-1)[:, 1].tolist()
            check_finite(values, self.dtype, "T5 overflows in float16; ")
            for i, value in zip(batch, values):
                scores[i] = float(value)
        return scores


def load(settings: RerankSettings) -> PointwiseReranker:
    own = settings.own(MonoT5Options)
    scorer = MonoT5(settings.model_name, device=own.device, batch_size=own.batch_size, max_length=own.max_length,
                    true_token=own.true_token, false_token=own.false_token, dtype=own.dtype)
    reranker = PointwiseReranker(settings.model_name, scorer.score, own.batch_size)
    reranker.name = "monot5"
    return reranker
