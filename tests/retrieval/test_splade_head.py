"""The sliced-head SPLADE encoder equals today's (sentence-transformers') encoder; its tokenising worker."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from apcir import datasets
from apcir.errors import ApcirError
from apcir.retrieval.encoder import SpladeEncoder, splade_tiny_path
from apcir.retrieval.splade_head import Batch, ChunkEnd, SpladeHead, Tokeniser

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("sentence_transformers")


def demo_texts(n: int | None = None) -> list[str]:
    passages = datasets.iter_collection(datasets.collection_path("ikat23-provenance"))
    return [p.contents for i, p in enumerate(passages) if n is None or i < n]


def assert_same_vectors(ours: sp.csr_matrix, today: sp.csr_matrix, tolerance: float = 1e-5) -> None:
    """The same nonzeros (row, term) and weights within ``tolerance``."""
    assert ours.shape == today.shape
    ours, today = sp.csr_matrix(ours), sp.csr_matrix(today)
    ours.sort_indices()
    today.sort_indices()
    np.testing.assert_array_equal(ours.indptr, today.indptr)
    np.testing.assert_array_equal(ours.indices, today.indices)
    np.testing.assert_allclose(ours.data, today.data, rtol=0, atol=tolerance)


@pytest.fixture(scope="module")
def tiny() -> SpladeEncoder:
    return SpladeEncoder("splade-tiny", device="cpu", batch_size=8)


def test_splade_tiny_takes_the_sliced_head(tiny):
    assert tiny.head is not None and tiny.dtype == "float32"


def test_sliced_head_equals_todays_encoder_on_demo_passages(tiny):
    texts = demo_texts(48)
    ours = tiny.encode_documents(texts, progress=False)
    today = tiny.encode_reference(texts, tiny.doc_max_length + 2)
    assert ours.nnz > 48 * 50
    assert_same_vectors(ours, today)


@pytest.mark.slow
def test_sliced_head_equals_todays_encoder_on_the_whole_demo_collection(demo):
    """The vectors of the demo's index (built by `apcir run demo` with the split head, the default batch of 32, in
    the suite's shared demo run) are today's encoder's, passage for passage."""
    from apcir.retrieval.embedded import passage_vectors

    encoder = SpladeEncoder("splade-tiny", device="cpu")
    passages = list(datasets.iter_collection(datasets.collection_path("ikat23-provenance")))
    texts = [p.contents for p in passages]
    assert len(texts) == 894 and texts == demo_texts()
    vectors, stored = passage_vectors(demo.index)
    position = {pid: i for i, pid in enumerate(stored)}
    ours = sp.csr_matrix(vectors[[position[p.id] for p in passages]])
    today = encoder.encode_reference(texts, encoder.doc_max_length + 2)
    assert_same_vectors(ours, today)
    assert ours.nnz == today.nnz > 200_000


def test_queries_equal_todays_encoder(tiny):
    turns = [t for t in datasets.topics("ikat23-test") if t.manual_rewrite][:12]
    queries = [(t.manual_rewrite, t.response or None) for t in turns]
    ours = tiny.encode_queries(queries, progress=False)
    today = tiny.encode_reference([tiny.query_text(q) for q in queries], tiny.query_input_length, "query")
    assert_same_vectors(ours, today)


def test_a_text_s_vector_does_not_depend_on_the_texts_batched_with_it(tiny):
    """Each text is padded to its own width (its length rounded up to PAD_TO tokens) and batched only with texts of
    that width, so its vector is the same bits alone, among others, in any chunk: a sharded index build equals a
    one-go build byte for byte, and a query encoded alone equals the same query in a batch."""
    from apcir.retrieval.splade_head import PAD_TO

    texts = demo_texts(40)
    together = tiny.encode_documents(texts, progress=False)
    for i in (0, 7, 23, 39):
        alone = tiny.encode_documents([texts[i]], progress=False)
        np.testing.assert_array_equal(alone.indices, together[i].indices)
        np.testing.assert_array_equal(alone.data, together[i].data)
    chunked = sp.vstack(list(tiny.encode_chunks([texts[:9], texts[9:10], texts[10:]])), format="csr")
    np.testing.assert_array_equal(chunked.indptr, together.indptr)
    np.testing.assert_array_equal(chunked.indices, together.indices)
    np.testing.assert_array_equal(chunked.data, together.data)
    queries = ["hiking boots", "what is the best diet for someone with diabetes and high blood pressure?"]
    both = tiny.encode_queries(queries, progress=False)
    for i, query in enumerate(queries):
        np.testing.assert_array_equal(tiny.encode_queries([query], progress=False).data, both[i].data)
    with Tokeniser([texts], tiny.tokenizer, tiny.doc_max_length + 2, 8) as worker:
        batches = [b for b in worker if isinstance(b, Batch)]
    for batch in batches:  # one padded width a batch: each row's own length rounded up
        width = batch.input_ids.shape[1]
        lengths = batch.attention_mask.sum(dim=1).tolist()
        assert all(-(-n // PAD_TO) * PAD_TO == width or width == tiny.doc_max_length + 2 for n in lengths)


def test_head_slices_of_any_width_give_the_same_vectors(tiny):
    texts = demo_texts(12)
    whole = tiny.encode_documents(texts, progress=False)
    narrow = SpladeEncoder("splade-tiny", device="cpu", batch_size=5, head_tokens=3)
    assert narrow.head is not None and narrow.head.head_tokens == 3
    assert_same_vectors(narrow.encode_documents(texts, progress=False), whole)


def test_on_a_cpu_the_head_goes_by_vocabulary_blocks_and_equals_token_slices_bit_for_bit(tiny):
    """The CPU default (blocks of vocabulary entries, the bias added to the maximum) and the GPU default (slices of
    tokens, the model's own head) give the same float32 vectors, not merely close ones."""
    from apcir.retrieval.splade_head import VOCAB_BLOCK

    assert tiny.head is not None and tiny.head.vocab_block == VOCAB_BLOCK
    sliced = SpladeEncoder("splade-tiny", device="cpu", batch_size=8, head_tokens=64)
    assert sliced.head is not None and sliced.head.vocab_block is None
    texts = demo_texts(40)
    blocks, slices = tiny.encode_documents(texts, progress=False), sliced.encode_documents(texts, progress=False)
    assert blocks.nnz > 40 * 50
    np.testing.assert_array_equal(blocks.indptr, slices.indptr)
    np.testing.assert_array_equal(blocks.indices, slices.indices)
    np.testing.assert_array_equal(blocks.data, slices.data)
    odd = SpladeHead(tiny.head.model, tiny.head.parts, tiny.head.activation, "cpu", vocab_block=1000)  # uneven last
    ids = tiny.tokenizer(texts[:3], padding=True, truncation=True, max_length=64, return_tensors="pt")
    import torch

    with torch.inference_mode():
        np.testing.assert_array_equal(odd.pool(ids["input_ids"], ids["attention_mask"]).numpy(),
                                      tiny.head.pool(ids["input_ids"], ids["attention_mask"]).numpy())


def test_chunks_come_back_in_order_whatever_the_length_order(tiny):
    texts = demo_texts(30)
    chunks = [texts[:7], [], texts[7:8], texts[8:30]]
    seen: list[int] = []
    parts = list(tiny.encode_chunks(chunks, advance=seen.append))
    assert [p.shape[0] for p in parts] == [7, 0, 1, 22]
    assert sum(seen) == 30
    assert_same_vectors(sp.vstack(parts, format="csr"), tiny.encode_documents(texts, progress=False))


@pytest.mark.parametrize("architecture", ["roberta", "distilbert"])
def test_other_masked_language_models_split_and_equal_the_reference(tmp_path, architecture):
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(splade_tiny_path()))
    torch.manual_seed(3)
    size = {"vocab_size": len(tokenizer), "max_position_embeddings": 600}
    if architecture == "roberta":
        config = transformers.RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                            intermediate_size=64, pad_token_id=tokenizer.pad_token_id, **size)
        model = transformers.RobertaForMaskedLM(config)
    else:
        config = transformers.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                               pad_token_id=tokenizer.pad_token_id, **size)
        model = transformers.DistilBertForMaskedLM(config)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    encoder = SpladeEncoder(str(tmp_path), device="cpu", batch_size=4, head_tokens=16)
    assert encoder.head is not None
    texts = demo_texts(10)
    today = encoder.encode_reference(texts, encoder.doc_max_length + 2)
    assert today.nnz > 0
    assert_same_vectors(encoder.encode_documents(texts, progress=False), today)


def test_a_model_with_prompts_is_left_to_sentence_transformers(tiny):
    saved = dict(tiny.model.prompts)
    try:
        tiny.model.prompts = {"query": "query: ", "document": ""}
        assert SpladeHead.of(tiny.model, "cpu", tiny.tokenizer) is None
    finally:
        tiny.model.prompts = saved


def test_non_finite_weights_are_one_line_naming_the_precision(tiny, monkeypatch):
    assert tiny.head is not None
    real = tiny.head.pool
    monkeypatch.setattr(tiny.head, "pool", lambda ids, mask: real(ids, mask) * float("nan"))
    with pytest.raises(ApcirError, match="non-finite SPLADE weights in float32 .*bfloat16 or float32"):
        tiny.encode_documents(["cheese"], progress=False)


def test_bfloat16_runs_on_the_cpu_and_stays_close(tiny):
    texts = demo_texts(16)
    half = SpladeEncoder("splade-tiny", device="cpu", batch_size=8, dtype="bfloat16")
    assert half.dtype == "bfloat16" and next(half.model.parameters()).dtype == torch.bfloat16
    low, full = half.encode_documents(texts, progress=False), tiny.encode_documents(texts, progress=False)
    assert low.dtype == np.float32 and low.shape == full.shape
    difference = abs(low - full).max()
    assert 0 < difference < 0.25 * full.max()
    overlap = (low.toarray() > 0) == (full.toarray() > 0)
    assert overlap.mean() > 0.99


# ---- the tokenising worker -------------------------------------------------------------------------------------
def test_worker_batches_are_length_sorted_padded_and_complete(tiny):
    texts = ["one", "a somewhat longer text here", "two words", "", "the longest text of them all by far, truly"]
    with Tokeniser([texts, texts[:2]], tiny.tokenizer, 8, 2) as worker:
        items = list(worker)
    ends = [i for i in items if isinstance(i, ChunkEnd)]
    assert [(e.chunk, e.size) for e in ends] == [(0, 5), (1, 2)]
    first = [i for i in items if isinstance(i, Batch) and i.chunk == 0]
    assert sorted(int(r) for b in first for r in b.rows) == [0, 1, 2, 3, 4]
    widths = [b.input_ids.shape[1] for b in first]
    assert widths == sorted(widths, reverse=True) and max(widths) == 8  # cut at max_length
    for batch in first:
        for i, row in enumerate(batch.rows):
            ids = tiny.tokenizer(texts[row], truncation=True, max_length=8)["input_ids"]
            assert batch.input_ids[i, : len(ids)].tolist() == ids
            assert batch.attention_mask[i].tolist() == [1] * len(ids) + [0] * (batch.input_ids.shape[1] - len(ids))


def test_an_error_in_the_worker_reaches_the_caller(tiny):
    def chunks():
        yield ["fine"]
        raise ApcirError("line 7: malformed JSON")

    with pytest.raises(ApcirError, match="line 7"), Tokeniser(chunks(), tiny.tokenizer, 16, 4) as worker:
        list(worker)


def test_stopping_early_ends_the_worker(tiny):
    endless = (["text number %d" % i] * 4 for i in range(10**9))
    with Tokeniser(endless, tiny.tokenizer, 16, 1, ahead=2) as worker:
        next(iter(worker))
        thread = worker._thread
    assert not thread.is_alive()


@pytest.mark.parametrize("path", ["sliced head", "sentence-transformers"])
def test_the_demo_index_vectors_are_todays(tmp_path: Path, tiny, path, monkeypatch):
    """An index build goes through the chunks (and the worker): its vectors are today's, row for row, on either
    path of the encoder."""
    from apcir.retrieval import build_index
    from apcir.retrieval.embedded import passage_vectors

    if path == "sentence-transformers":
        monkeypatch.setattr(tiny, "head", None)

    texts = demo_texts(23)
    ids = [p.id for i, p in enumerate(datasets.iter_collection(datasets.collection_path("ikat23-provenance")))
           if i < 23]
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps({"id": i, "contents": t}) + "\n" for i, t in zip(ids, texts)))
    build_index(small, "embedded", tmp_path / "idx", encoder=tiny, chunk_size=6, progress=False)
    vectors, stored = passage_vectors(tmp_path / "idx")
    order = [stored.index(i) for i in ids]
    today = tiny.encode_reference(texts, tiny.doc_max_length + 2)
    assert_same_vectors(sp.csr_matrix(vectors[order]), today)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (runs where there is one)")
def test_on_a_gpu_the_vectors_are_the_cpus_and_auto_picks_the_cards_precision(tiny):
    from apcir.retrieval.precision import gpu_supports_bfloat16

    texts = demo_texts(64)
    gpu = SpladeEncoder("splade-tiny", device="cuda", dtype="float32", batch_size=16)
    assert gpu.head is not None and gpu.head.device == "cuda"
    ours, today = gpu.encode_documents(texts, progress=False), tiny.encode_reference(texts, tiny.doc_max_length + 2)
    assert np.abs(ours.toarray() - today.toarray()).max() < 1e-5
    assert abs(ours.nnz - today.nnz) <= 1e-4 * today.nnz
    auto = SpladeEncoder("splade-tiny", device="cuda")
    assert auto.dtype == ("bfloat16" if gpu_supports_bfloat16("cuda") else "float32")
    assert next(auto.model.parameters()).dtype == getattr(torch, auto.dtype)
    assert auto.encode_documents(texts, progress=False).dtype == np.float32
