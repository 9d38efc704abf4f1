"""Re-ranking throughput: (query, passage) pairs per second for monoT5 and a cross-encoder, CPU (and GPU if present).

No model can be downloaded here, so the models are randomly initialised with the shapes of the real ones:

* monoT5: the tiny T5 of the tests (d_model 32, 2 layers, BERT vocabulary), and a T5 with
  t5-base's shape (d_model 768, 12+12 layers, 32,128-token vocabulary: castorini/monot5-base-msmarco-10k's);
* cross-encoder: a tiny BERT (hidden 32, 2 layers), and a BERT with
  cross-encoder/ms-marco-MiniLM-L-6-v2's shape (hidden 384, 6 layers, 12 heads).

Weights do not change the arithmetic, so the real-shaped rows are what the real checkpoints cost.
Pairs: the iKAT-23 test manual rewrites against the demo collection's passages (real lengths; monoT5 cuts
the whole input at 512 tokens, the cross-encoder the pair at 512). The peer, measured in the same run on
the same model: pygaggle's batching for monoT5 (one query at a time, batches of 8 in run order, padded to
the longest) and batch size 1 for the cross-encoder; apcir batches 16 pairs of similar length.

Run: ``.venv/bin/python benchmarks/rerank.py [--pairs 256] [--real-pairs 48]``. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def tokenizer():
    from transformers import AutoTokenizer

    from apcir.retrieval.encoder import splade_tiny_path

    return AutoTokenizer.from_pretrained(str(splade_tiny_path()), local_files_only=True)


def t5_model(folder: Path, real: bool) -> Path:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    tok = tokenizer()
    shape = ({"d_model": 768, "d_ff": 3072, "d_kv": 64, "num_layers": 12, "num_heads": 12} if real
             else {"d_model": 32, "d_ff": 64, "d_kv": 16, "num_layers": 2, "num_heads": 2})
    vocab = 32_128 if real else len(tok)  # the T5 vocabulary's size; the BERT ids all fit in it
    config = T5Config(vocab_size=vocab, pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id,
                      decoder_start_token_id=tok.pad_token_id, n_positions=512, **shape)
    torch.manual_seed(0)
    T5ForConditionalGeneration(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def bert_model(folder: Path, real: bool) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    tok = tokenizer()
    shape = ({"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536}
             if real else {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64})
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig(vocab_size=len(tok), max_position_embeddings=512, num_labels=1,
                                             **shape)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def pairs(count: int) -> list[tuple[str, str]]:
    from apcir import datasets

    passages = [p.contents for p in datasets.iter_collection(datasets.collection_path("ikat23-provenance"))]
    queries = [t.manual_rewrite for t in datasets.topics("ikat23-test") if t.manual_rewrite]
    return [(queries[i % len(queries)], passages[(i * 7) % len(passages)]) for i in range(count)]


def pygaggle_batches(scorer, chosen: list[tuple[str, str]]) -> None:
    """pygaggle's MonoT5: per query, batches of 8 passages in run order, padded to the longest of the batch."""
    import torch

    from apcir.reranking.monot5 import TEMPLATE

    for start in range(0, len(chosen), 8):
        batch = chosen[start : start + 8]
        texts = [TEMPLATE.format(query=q, document=d) for q, d in batch]
        enc = scorer.tokenizer(texts, padding="longest", truncation=True, max_length=512,
                               return_tensors="pt").to(scorer.device)
        decoder = torch.full((len(batch), 1), scorer.start, dtype=torch.long, device=scorer.device)
        with torch.inference_mode():
            logits = scorer.model(**enc, decoder_input_ids=decoder).logits[:, -1, :]
        torch.log_softmax(logits[:, scorer.ids].float(), dim=-1)


def rate(fn, n: int) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=256, help="pairs for the tiny models")
    parser.add_argument("--real-pairs", type=int, default=48, help="pairs for the real-shaped models")
    args = parser.parse_args()
    import torch

    from apcir.reranking.cross_encoder import CrossEncoderScorer
    from apcir.reranking.monot5 import MonoT5

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    root = Path(tempfile.mkdtemp(prefix="apcir-bench-rerank-"))
    rows = []
    try:
        for real in (False, True):
            n = args.real_pairs if real else args.pairs
            chosen = pairs(n)
            shape = "t5-base shape, random" if real else "tiny T5 (tests)"
            t5 = t5_model(root / f"t5-{real}", real)
            for device in devices:
                scorer = MonoT5(str(t5), device=device, batch_size=16)
                scorer.score(chosen[:4])  # warm-up
                ours = rate(lambda scorer=scorer, chosen=chosen: scorer.score(chosen), n)
                peer = rate(lambda scorer=scorer, chosen=chosen: pygaggle_batches(scorer, chosen), n)
                rows.append((f"monoT5, {shape}", device, n, f"{ours:,.1f}", f"{peer:,.1f} (pygaggle's batching)"))
            shape = "MiniLM-L-6 shape, random" if real else "tiny BERT (tests)"
            bert = bert_model(root / f"bert-{real}", real)
            for device in devices:
                ce = CrossEncoderScorer(str(bert), device=device, batch_size=16)
                ce.score(chosen[:4])
                ours = rate(lambda ce=ce, chosen=chosen: ce.score(chosen), n)
                single = CrossEncoderScorer(str(bert), device=device, batch_size=1)
                peer = rate(lambda single=single, chosen=chosen: single.score(chosen), n)
                rows.append((f"cross-encoder, {shape}", device, n, f"{ours:,.1f}", f"{peer:,.1f} (batch size 1)"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(f"apcir re-ranking throughput: {os.cpu_count()} cores ({cpu}), torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, GPU: {gpu}\n")
    print("| model | device | pairs | apcir, pairs/s | peer, pairs/s |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")


if __name__ == "__main__":
    main()
