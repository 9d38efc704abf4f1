"""monoT5 and cross-encoder re-ranking on tiny random models built offline (issue 10).

The monoT5 score must equal an independent computation of log P(true | {true, false}) at the first decoder
step (pygaggle's formula) to 1e-5, whatever the batch size, with long inputs truncated as pygaggle does, and
the re-ranked run must keep everything below the depth cut in its order.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from tiny_models import tiny_cross_encoder, tiny_t5, tiny_t5_sentencepiece

from apcir.contract.runs import ranking, read_run_file, write_run
from apcir.errors import ApcirError
from apcir.reranking.settings import RerankSettings
from apcir.reranking.stage import rerank_run

QUERY = "which universities in the netherlands are best for computer science"
DOCS = {
    "d01": "Delft and Eindhoven are known for engineering; computer science is strong at both.",
    "d02": "Short one.",
    "d03": "The price of cheese in Amsterdam rose again this year, according to the market report.",
    "d04": "Utrecht offers an exchange programme in computing for students from abroad, with courses in "
           "English and a research track in algorithms and data. " * 3,
    "d05": "true false true false",
    "d06": "A passage about vegetarian recipes and why people keep asking about lasagne.",
    "d07": "Computer science rankings list the University of Amsterdam, Delft and Leiden.",
    "d08": "Nothing relevant here at all.",
    "d09": "Another passage, this time about football clubs in Rotterdam and their stadiums.",
    "d10": "the history of science in the netherlands is long and varied " * 120,  # > 512 tokens
}


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    return tiny_t5(tmp_path_factory.mktemp("t5") / "model")


@pytest.fixture(scope="module")
def t5_sp(tmp_path_factory):
    return tiny_t5_sentencepiece(tmp_path_factory.mktemp("t5sp") / "model")


@pytest.fixture(scope="module")
def cross(tmp_path_factory):
    return tiny_cross_encoder(tmp_path_factory.mktemp("ce") / "model")


def independent_log_p_true(model_dir, query, document, true_word="true", false_word="false"):
    """Encoder and decoder called separately, one pair at a time; the softmax done in float64 by hand."""
    import torch
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = T5ForConditionalGeneration.from_pretrained(str(model_dir), local_files_only=True).eval()
    true_id = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(true_word))[0]
    false_id = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(false_word))[0]
    text = f"Query: {query} Document: {document} Relevant:"
    encoded = tokenizer(text, truncation=True, max_length=512, return_tensors="pt")
    with torch.no_grad():
        hidden = model.get_encoder()(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"])
        start = torch.tensor([[model.config.decoder_start_token_id]])
        logits = model(encoder_outputs=hidden, attention_mask=encoded["attention_mask"],
                       decoder_input_ids=start).logits[0, -1].double().numpy()
    z_true, z_false = logits[true_id], logits[false_id]
    return float(z_true - np.logaddexp(z_true, z_false)), int(encoded["input_ids"].shape[1])


def one_turn_run(ids, turn="9-1_1"):
    return {turn: {pid: float(len(ids) - i) for i, pid in enumerate(ids)}}


@pytest.mark.parametrize("batch_size", [1, 3, 16])
def test_monot5_score_is_log_p_true_of_the_first_decoder_step(t5, tmp_path, batch_size):
    settings = RerankSettings(reranker="monot5", model=str(t5), depth=100, batch_size=batch_size, device="cpu")
    run = one_turn_run(list(DOCS))
    reranked, summary = rerank_run(run, {"9-1_1": QUERY}, DOCS, settings, progress=False)
    write_run(reranked, tmp_path / "out.run")
    written = read_run_file(tmp_path / "out.run").run["9-1_1"]
    assert summary.passages_reranked == len(DOCS) and summary.rank_score_turns == 0
    for pid, text in DOCS.items():
        expected, length = independent_log_p_true(t5, QUERY, text)
        assert abs(written[pid] - expected) < 1e-5, pid
        assert -20 < expected < 0  # not saturated: the test can see a wrong formula
    assert independent_log_p_true(t5, QUERY, DOCS["d10"])[1] == 512  # the long passage was cut, as pygaggle does
    order = [p for p, _ in ranking(written)]
    assert order == sorted(DOCS, key=lambda p: -written[p])


def test_monot5_on_a_sentencepiece_vocabulary_uses_the_word_start_pieces(t5_sp):
    from transformers import AutoTokenizer

    from apcir.reranking.monot5 import MonoT5

    tokenizer = AutoTokenizer.from_pretrained(str(t5_sp), local_files_only=True)
    scorer = MonoT5(str(t5_sp), device="cpu", batch_size=4)
    assert scorer.ids == [tokenizer.get_vocab()["▁false"], tokenizer.get_vocab()["▁true"]]
    docs = list(DOCS.values())[:6]
    scores = scorer.score([(QUERY, d) for d in docs])
    for doc, score in zip(docs, scores):
        assert abs(score - independent_log_p_true(t5_sp, QUERY, doc)[0]) < 1e-5


def test_an_answer_word_the_vocabulary_lacks_is_an_error_naming_it(t5):
    from apcir.reranking.monot5 import MonoT5

    with pytest.raises(ApcirError, match="answer word 'zzyzx-nope'"):
        MonoT5(str(t5), device="cpu", true_token="zzyzx-nope")


def test_below_the_cut_keeps_its_order_and_stays_beneath(t5):
    ids = [f"p{i:02d}" for i in range(30)]
    texts = {p: f"{list(DOCS.values())[i % 9]} {p}" for i, p in enumerate(ids)}
    run = {"9-1_1": {p: 100.0 - i for i, p in enumerate(ids)}, "9-1_2": {p: 50.0 - i for i, p in enumerate(ids[:5])}}
    settings = RerankSettings(reranker="monot5", model=str(t5), depth=10, batch_size=4, device="cpu")
    reranked, summary = rerank_run(run, {"9-1_1": QUERY, "9-1_2": "cheese"}, texts, settings, progress=False)
    order = [p for p, _ in ranking(reranked["9-1_1"])]
    assert sorted(order[:10]) == ids[:10] and order[10:] == ids[10:]
    assert order[:10] != ids[:10]  # something moved
    assert min(reranked["9-1_1"][p] for p in ids[:10]) > max(reranked["9-1_1"][p] for p in ids[10:])
    assert summary.short_turns == 1 and summary.passages_reranked == 15 and summary.pairs_scored == 15


def test_passages_without_text_keep_their_place(t5):
    ids = [f"p{i:02d}" for i in range(8)]
    texts = {p: list(DOCS.values())[i] for i, p in enumerate(ids) if p not in ("p00", "p03", "p04")}
    run = one_turn_run(ids)
    settings = RerankSettings(reranker="monot5", model=str(t5), depth=6, device="cpu")
    reranked, summary = rerank_run(run, {"9-1_1": QUERY}, texts, settings, progress=False)
    order = [p for p, _ in ranking(reranked["9-1_1"])]
    assert order[0] == "p00" and order[3] == "p03" and order[4] == "p04"
    assert order[6:] == ["p06", "p07"]
    assert summary.missing_passages == 3 and summary.missing_example == "p00"


def test_no_passage_in_the_collection_is_an_error(t5):
    settings = RerankSettings(reranker="monot5", model=str(t5), depth=5, device="cpu")
    with pytest.raises(ApcirError, match="none of the run's passages"):
        rerank_run(one_turn_run(["x1", "x2"]), {"9-1_1": QUERY}, {}, settings, progress=False)


def test_cross_encoder_score_is_the_raw_logit(cross):
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    settings = RerankSettings(reranker="cross-encoder", model=str(cross), batch_size=3, device="cpu")
    docs = dict(list(DOCS.items())[:8])
    reranked, _ = rerank_run(one_turn_run(list(docs)), {"9-1_1": QUERY}, docs, settings, progress=False)
    tokenizer = AutoTokenizer.from_pretrained(str(cross), local_files_only=True)
    model = BertForSequenceClassification.from_pretrained(str(cross), local_files_only=True).eval()
    for pid, text in docs.items():
        encoded = tokenizer(QUERY, text, truncation="longest_first", max_length=512, return_tensors="pt")
        with torch.no_grad():
            logit = float(model(**encoded).logits[0, 0])
        assert abs(reranked["9-1_1"][pid] - logit) < 1e-5


@pytest.mark.parametrize("reranker", ["monot5", "cross-encoder"])
def test_an_unloadable_hub_model_names_itself_and_the_way_out(reranker, monkeypatch):
    from apcir.reranking.stage import load_reranker

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    settings = RerankSettings(reranker=reranker, device="cpu")
    with pytest.raises(ApcirError) as error:
        load_reranker(settings)
    message = str(error.value)
    assert settings.model_name in message and "--model PATH" in message and "network" in message


def test_a_missing_local_directory_is_named():
    from apcir.reranking.stage import load_reranker

    with pytest.raises(ApcirError, match="directory not found: /no/such/monot5"):
        load_reranker(RerankSettings(reranker="monot5", model="/no/such/monot5", device="cpu"))


def test_settings_refuse_bad_values():
    with pytest.raises(ValueError, match="unknown re-ranker 'monobert'"):
        RerankSettings(reranker="monobert")
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        RerankSettings(depth=0)
    with pytest.raises(ValueError, match="larger than window"):
        RerankSettings(reranker="rankgpt", window=5, step=10)
    with pytest.raises(ValueError, match="true_token: not used by the rankgpt re-ranker"):
        RerankSettings(reranker="rankgpt", true_token="yes")
    with pytest.raises(ValueError, match="unknown system"):
        RerankSettings(systems=["nope"])
    assert RerankSettings(reranker="rankgpt").model_name == "gpt-4o-mini"
    assert math.isclose(RerankSettings().depth, 100)


def _absent_gpu() -> str:
    import torch

    return f"cuda:{torch.cuda.device_count() + 7}" if torch.cuda.is_available() else "cuda:7"


@pytest.mark.parametrize("device, message", [("banana", "device 'banana' is not a torch device"),
                                             (None, "CUDA GPU")])
@pytest.mark.parametrize("reranker", ["monot5", "cross-encoder"])
def test_a_device_torch_does_not_know_or_this_machine_lacks_is_refused(t5, cross, reranker, device, message):
    from apcir.reranking.stage import load_reranker

    model = t5 if reranker == "monot5" else cross
    with pytest.raises(ApcirError, match=message):
        load_reranker(RerankSettings(reranker=reranker, model=str(model), device=device or _absent_gpu()))


def test_the_retrieval_encoders_share_the_device_check():
    from apcir.retrieval.encoder import SpladeEncoder

    with pytest.raises(ApcirError, match="device 'banana' is not a torch device"):
        SpladeEncoder("splade-tiny", device="banana")
    with pytest.raises(ApcirError, match="CUDA GPU"):
        SpladeEncoder("splade-tiny", device=_absent_gpu())


def test_a_model_that_is_not_a_cross_encoder_is_refused(t5):
    from apcir.reranking.stage import load_reranker

    # a T5 loads as T5ForSequenceClassification with a newly initialised (random) head: its scores would be noise
    with pytest.raises(ApcirError, match=r"is not a cross-encoder: its config names T5ForConditionalGeneration"):
        load_reranker(RerankSettings(reranker="cross-encoder", model=str(t5), device="cpu"))


def test_answer_words_that_are_the_same_token_are_refused(t5):
    from apcir.reranking.monot5 import MonoT5

    with pytest.raises(ValueError, match="the same word as true_token"):
        RerankSettings(true_token="true", false_token=" true")
    # the BERT vocabulary of the tiny T5 is uncased: TRUE is the token of true
    with pytest.raises(ApcirError, match="'true' and 'TRUE' are the same token"):
        MonoT5(str(t5), device="cpu", true_token="true", false_token="TRUE")


def test_an_empty_list_of_systems_is_refused():
    with pytest.raises(ValueError, match="no system to re-rank"):
        RerankSettings(systems=[])
    assert RerankSettings(systems="all").systems == "all"


@pytest.mark.parametrize("reranker", ["monot5", "cross-encoder"])
def test_the_precision_is_a_setting_and_bfloat16_stays_close_to_float32(t5, cross, reranker):
    import torch

    from apcir.reranking.stage import load_reranker

    model = str(t5 if reranker == "monot5" else cross)
    docs = dict(list(DOCS.items())[:6])
    pairs = [(QUERY, text) for text in docs.values()]
    scores = {}
    for dtype in ("auto", "bfloat16"):
        loaded = load_reranker(RerankSettings(reranker=reranker, model=model, device="cpu", dtype=dtype))
        scorer = loaded._score.__self__  # the MonoT5 / CrossEncoderScorer behind the pointwise re-ranker
        network = scorer.model if reranker == "monot5" else scorer.model.model
        assert scorer.dtype == ("float32" if dtype == "auto" else "bfloat16")  # auto on a CPU: float32
        assert next(network.parameters()).dtype == getattr(torch, scorer.dtype)
        scores[dtype] = np.array(loaded._score(pairs))
    assert np.isfinite(scores["bfloat16"]).all()
    assert np.abs(scores["bfloat16"] - scores["auto"]).max() < 0.05 * (np.abs(scores["auto"]).max() + 1)


def test_non_finite_scores_are_one_line_naming_the_precision():
    from apcir.reranking.base import check_finite

    check_finite([0.5, -3.0], "float16")
    with pytest.raises(ApcirError, match="non-finite scores in float16 .*T5 overflows in float16; use --dtype "
                                         "bfloat16 or float32"):
        check_finite([0.5, float("nan")], "float16", "T5 overflows in float16; ")
