"""SPLADE vectors from apcir equal the reference formula; truncation follows the paper's budgets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from apcir.errors import ApcirError
from apcir.retrieval.encoder import SpladeEncoder, splade_tiny_path

TEXTS = [
    "Which universities in the Netherlands are best for computer science?",
    "Short one.",
    "A much longer passage about vegetarian recipes, the price of cheese in Amsterdam, "
    "and why people keep asking about exchange programmes in Utrecht and Delft, " * 6,
]


def reference_vectors(model_dir: Path | str, texts: list[str], max_length: int) -> np.ndarray:
    """max over tokens of log(1 + relu(MLM logits)), masked by attention; one padded batch."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    model = transformers.AutoModelForMaskedLM.from_pretrained(str(model_dir)).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    weights = torch.log1p(torch.relu(logits)) * batch["attention_mask"].unsqueeze(-1)
    return weights.max(dim=1).values.numpy()


@pytest.fixture(scope="module")
def random_bert(tmp_path_factory) -> Path:
    """A randomly initialised tiny BertForMaskedLM with splade-tiny's tokenizer."""
    folder = tmp_path_factory.mktemp("random-bert")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(splade_tiny_path()))
    torch.manual_seed(13)
    config = transformers.BertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=512,
    )
    model = transformers.BertForMaskedLM(config)
    with torch.no_grad():  # a non-zero decoder bias, so the test sees it
        model.cls.predictions.bias.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny() -> SpladeEncoder:
    return SpladeEncoder("splade-tiny", device="cpu", batch_size=2)


@pytest.mark.parametrize("which", ["random", "splade-tiny"])
def test_document_vectors_equal_reference(which, random_bert, tiny):
    encoder = SpladeEncoder(str(random_bert), device="cpu", batch_size=2) if which == "random" else tiny
    location = random_bert if which == "random" else splade_tiny_path()
    ours = encoder.encode_documents(TEXTS, progress=False).toarray()
    reference = reference_vectors(location, TEXTS, encoder.doc_max_length + 2)
    assert ours.shape == reference.shape
    assert (ours > 0).sum() > 10
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)


def test_query_vectors_equal_reference_on_the_truncated_text(tiny):
    pair = ("what should I cook tonight " * 30, "You could cook a vegetarian lasagne " * 80)
    ours = tiny.encode_queries([pair, "cheap flights"], progress=False).toarray()
    texts = [tiny.query_text(pair), "cheap flights"]
    reference = reference_vectors(splade_tiny_path(), texts, tiny.query_input_length)
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)
    as_terms = tiny.encode("cheap flights")
    assert as_terms and all(w > 0 for w in as_terms.values())
    assert max(as_terms, key=as_terms.get) in {"cheap", "flights", "flight"}


def test_each_part_is_cut_to_its_own_budget(tiny):
    query = " ".join(f"word{i}" for i in range(200))
    response = " ".join(f"answer{i}" for i in range(500))
    text = tiny.query_text((query, response))
    head = tiny.truncate(query, 64)
    tail = tiny.truncate(response, 256)
    assert text == f"{head} {tail}"
    def count(s):
        return len(tiny.tokenizer(s, add_special_tokens=False)["input_ids"])
    assert count(head) == 64 and count(tail) == 256
    assert query.startswith(head) and response.startswith(tail)
    assert tiny.query_text(("short query", None)) == "short query"
    assert tiny.query_text(("short query", "  ")) == "short query"
    assert tiny.truncate("two words", 64) == "two words"


def test_passages_are_cut_at_the_document_budget(tiny):
    long = "vegetarian " * 600
    cut = SpladeEncoder("splade-tiny", device="cpu", doc_max_length=8)
    assert np.allclose(
        cut.encode_documents([long], progress=False).toarray(),
        reference_vectors(splade_tiny_path(), [long], 10),
        atol=1e-5,
    )
    assert not np.allclose(
        cut.encode_documents([long + " cheese"], progress=False).toarray(),
        tiny.encode_documents([long + " cheese"], progress=False).toarray(),
    )


def test_gated_or_unknown_hub_model_says_how_to_get_access(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ApcirError) as caught:
        SpladeEncoder("naver/splade-v3", device="cpu")
    message = str(caught.value)
    assert "naver/splade-v3" in message and "licence" in message and "HF_TOKEN" in message
    assert "naver/splade-cocondenser-ensembledistil" in message


def test_missing_local_model_directory():
    with pytest.raises(ApcirError, match="not found"):
        SpladeEncoder("./no/such/model/dir", device="cpu")
