"""SPLADE encoding at ClueWeb22 scale: on the GPU when there is one, else a small CPU version of the same table.

Four tables, every figure measured in this run, on this machine's device (``cuda`` when torch sees a GPU, else
the CPU):

1. **splade-tiny, device against CPU.** The demo's 894 real passages repeated to ``--tiny-passages``, encoded by
   apcir on the device in float32 and by today's encoder (sentence-transformers' ``SparseEncoder``, the path
   apcir took before the sliced head) on the CPU: the largest weight difference, the nonzeros of each, and
   whether the top 10 of the demo's queries agree. Without a GPU the device is the CPU, so the row compares
   apcir's sliced-head encoder with today's encoder on the same CPU.
2. **bfloat16 against float32 on the demo** (splade-tiny, the 894 passages, the demo's heuristic rewrites of
   the 332 iKAT-23 turns as three lists): top-10 overlap and the largest score difference.
3. **A SPLADE-v3-sized model**: BERT-base (12 layers, hidden 768, 30,522-token vocabulary) with its MLM head,
   random weights, the output bias shifted so that a passage keeps about 245 terms, as trained SPLADE models
   do (speed does not depend on the weights). Passages/s on the demo passages repeated to ``--passages`` for:
   apcir before this change (sentence-transformers, float32, batch 32); apcir in float32 and in bfloat16;
   a plain-PyTorch loop (bfloat16, length-sorted batches, the head over 64 tokens at a time, log(1+ReLU) and
   the max on the device, only nonzero pairs copied back; tokenised up front on the main thread); and
   ``apcir index build --shard 0/2`` end to end (reading, validating and writing chunks too). Each with the
   projected hours for ClueWeb22-B (116.8M passages) on one device and on a node of 8 (a projection: one
   process per device, ``--shard i/8 --device cuda:i``, assumed to scale linearly).
4. **Padding**: the share of token positions that are padding when batches are length-sorted within groups
   of 8 batches (sentence-transformers), within a chunk of an index build (10,000), or over a whole shard,
   for passage lengths drawn from the demo's.
5. **Tokenising**: CPU time per passage of the fast tokenizer, so how many cores a device at a given rate
   keeps busy tokenising (the worker runs it on the cores the tokenizer takes).

Run: ``.venv/bin/python benchmarks/encode_gpu.py`` (about 5-8 minutes on an H100/H200; the CPU version takes
a few minutes on 2 cores); ``--smoke`` runs every table at toy sizes with a 2-layer model (a test runs it).
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CLUEWEB22_B = 116_800_000
NODE_GPUS = 8
TARGET_TERMS = 245
HEAD_TOKENS = 64


def demo_texts() -> list[str]:
    from apcir import datasets

    return [p.contents for p in datasets.iter_collection(datasets.collection_path("ikat23-provenance"))]


def repeated(texts: list[str], n: int) -> list[str]:
    return [texts[i % len(texts)] for i in range(n)]


@functools.lru_cache(maxsize=2)
def demo_queries(limit: int | None) -> dict[str, list[str]]:
    """The demo's retrieval inputs: the heuristic reformulator's three lists over the iKAT-23 test turns."""
    from apcir import api, datasets

    turns = datasets.topics("ikat23-test")[:limit]
    records = api.reformulate(turns, "heuristic")
    lists: dict[str, list[str]] = {}
    for record in records.values():
        if record.output is None:
            continue
        for name, query in record.list_inputs().items():
            text = query if isinstance(query, str) else f"{query[0]} {query[1] or ''}".strip()
            lists.setdefault(name, []).append(text)
    return lists


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(run: Callable[[], Any], device: str) -> tuple[Any, float, float]:
    """``run()``'s result, its wall seconds and this process's CPU seconds (all its threads)."""
    synchronize(device)
    started, cpu = time.perf_counter(), time.process_time()
    result = run()
    synchronize(device)
    return result, time.perf_counter() - started, time.process_time() - cpu


def top10(queries: sp.csr_matrix, passages: sp.csr_matrix) -> tuple[list[set[int]], np.ndarray]:
    scores = (queries @ passages.T).toarray()
    best = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    return [set(row.tolist()) for row in best], scores


# ---- 1. splade-tiny: device against CPU --------------------------------------------------------------------------
def tiny_equality(device: str, n: int, n_queries: int | None) -> list[list[str]]:
    from apcir.retrieval.encoder import SpladeEncoder

    demo = demo_texts()
    texts = repeated(demo, n)
    queries = demo_queries(n_queries)["rewrite"]
    ours = SpladeEncoder("splade-tiny", device=device, dtype="float32", batch_size=256 if device != "cpu" else 32)
    today = ours if device == "cpu" else SpladeEncoder("splade-tiny", device="cpu", dtype="float32")
    ours.encode_documents(texts[:64], progress=False)  # warm up
    mine, seconds, cpu = timed(lambda: ours.encode_documents(texts, progress=False), device)
    reference, reference_seconds, reference_cpu = timed(
        lambda: today.encode_reference(texts, today.doc_max_length + 2), "cpu")
    difference = float(abs(mine - reference).max()) if mine.nnz or reference.nnz else 0.0
    same = (mine != 0).astype(bool)
    pattern = same.nnz == (reference != 0).nnz and (same != (reference != 0)).nnz == 0
    shown = min(len(demo), n)
    q_ours = ours.encode_queries(queries, progress=False)
    q_today = today.encode_reference([today.query_text(q) for q in queries], today.query_input_length, "query")
    tops_ours, _ = top10(q_ours, mine[:shown])
    tops_today, _ = top10(q_today, reference[:shown])
    agree = sum(a == b for a, b in zip(tops_ours, tops_today))
    label = f"apcir sliced head on {device}, float32" + (" (no GPU here)" if device == "cpu" else "")
    return [[label, f"{n:,}", f"{seconds:.2f} ({cpu:.1f})", f"{reference_seconds:.2f} ({reference_cpu:.1f})",
             f"{difference:.1e}",
             f"{mine.nnz:,} / {reference.nnz:,}", "yes" if pattern else "NO", f"{agree}/{len(queries)}"]]


# ---- 2. bfloat16 against float32 on the demo ----------------------------------------------------------------------
def precision_effect(device: str, n_passages: int | None, n_queries: int | None) -> list[list[str]]:
    from apcir.retrieval.encoder import SpladeEncoder

    texts = demo_texts()[:n_passages]
    lists = demo_queries(n_queries)
    rows = []
    encoders = {dtype: SpladeEncoder("splade-tiny", device=device, dtype=dtype) for dtype in ("float32", "bfloat16")}
    passages = {dtype: e.encode_documents(texts, progress=False) for dtype, e in encoders.items()}
    terms = {dtype: m.nnz / max(m.shape[0], 1) for dtype, m in passages.items()}
    for name, queries in lists.items():
        tops, scores = {}, {}
        for dtype, encoder in encoders.items():
            vectors = encoder.encode_queries(queries, progress=False)
            tops[dtype], scores[dtype] = top10(vectors, passages[dtype])
        overlap = np.array([len(a & b) / 10 for a, b in zip(tops["float32"], tops["bfloat16"])])
        difference = np.abs(scores["float32"] - scores["bfloat16"])
        relative = difference.max() / max(float(np.abs(scores["float32"]).max()), 1e-9)
        rows.append([name, f"{len(queries)}", f"{overlap.mean():.3f}", f"{(overlap == 1).mean():.3f}",
                     f"{overlap.min():.1f}", f"{difference.max():.4f}", f"{relative:.2%}"])
    rows.append(["(terms per passage)", f"{len(texts)} passages", f"float32 {terms['float32']:.1f}",
                 f"bfloat16 {terms['bfloat16']:.1f}", "", "", ""])
    return rows


# ---- 3. a SPLADE-v3-sized model -----------------------------------------------------------------------------------
def base_sized_model(folder: Path, smoke: bool, sample: list[str]) -> Path:
    """BERT-base with the MLM head, random weights, the output bias shifted so a passage keeps ~245 terms."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from apcir.retrieval.encoder import splade_tiny_path

    tokenizer = AutoTokenizer.from_pretrained(str(splade_tiny_path()), local_files_only=True)
    shape = ({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}
             if smoke else {})  # BertConfig's defaults are BERT-base's
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), **shape)).eval()
    batch = tokenizer(sample, padding=True, truncation=True, max_length=258, return_tensors="pt")
    with torch.inference_mode():
        logits = model(**batch).logits.masked_fill(~batch["attention_mask"].bool()[..., None], float("-inf"))
        pooled = logits.amax(dim=1)
    # the shift that leaves TARGET_TERMS positive terms in the average sampled passage
    threshold = float(torch.quantile(pooled.flatten().float(), 1 - TARGET_TERMS / pooled.shape[1]))
    with torch.no_grad():
        model.cls.predictions.bias -= threshold
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def plain_pytorch(folder: Path, texts: list[str], device: str, batch_size: int) -> tuple[int, float, float]:
    """The peer: what a participant writes by hand in plain PyTorch, bfloat16 where the device has it."""
    import torch
    from transformers import AutoTokenizer, BertForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = BertForMaskedLM.from_pretrained(str(folder), local_files_only=True).to(device, torch.bfloat16).eval()

    def run() -> int:
        encoded = tokenizer(texts, truncation=True, max_length=258)["input_ids"]
        order = sorted(range(len(texts)), key=lambda i: -len(encoded[i]))
        nonzeros = 0
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = len(encoded[rows[0]])
            ids = torch.zeros((len(rows), width), dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, row in enumerate(rows):
                ids[i, : len(encoded[row])] = torch.tensor(encoded[row])
                mask[i, : len(encoded[row])] = 1
            ids, mask = ids.to(device), mask.to(device)
            with torch.inference_mode():
                hidden = model.bert(input_ids=ids, attention_mask=mask)[0]
                best = None
                for s in range(0, width, HEAD_TOKENS):
                    logits = model.cls(hidden[:, s : s + HEAD_TOKENS])
                    logits = logits.masked_fill(~mask[:, s : s + HEAD_TOKENS, None].bool(), float("-inf"))
                    part = logits.amax(dim=1)
                    best = part if best is None else torch.maximum(best, part)
                assert best is not None
                weights = torch.log1p(torch.relu(best.float()))
                r, c = weights.nonzero(as_tuple=True)
                values = weights[r, c].cpu()
            nonzeros += int(values.numel())
        return nonzeros

    with torch.inference_mode():
        run_warm = texts[: min(len(texts), batch_size)]
        warm = tokenizer(run_warm[:2], padding=True, truncation=True, max_length=258, return_tensors="pt",
                         return_token_type_ids=False)
        model.bert(**{k: v.to(device) for k, v in warm.items()})
    return timed(run, device)


def shard_build(folder: Path, texts: list[str], device: str, dtype: str, batch_size: int,
                scratch: Path) -> tuple[int, float, float]:
    """``apcir index build --shard 0/2`` (its Python function), end to end, on the first half of ``texts``."""
    import json

    from apcir.retrieval import build_index
    from apcir.retrieval.encoder import SpladeEncoder

    collection = scratch / "passages.jsonl"
    collection.write_text("".join(json.dumps({"id": f"p{i}", "contents": t}) + "\n" for i, t in enumerate(texts)))
    encoder = SpladeEncoder(str(folder), device=device, dtype=dtype, batch_size=batch_size)
    encoder.encode_documents(texts[:2], progress=False)  # warm up
    out = scratch / "index"
    result, seconds, cpu = timed(lambda: build_index(collection, "embedded", out, encoder=encoder, shard="0/2",
                                                     chunk_size=max(len(texts) // 8, 1), progress=False), device)
    return result.passages_encoded, seconds, cpu


def throughput(device: str, n: int, batch_size: int, smoke: bool, scratch: Path) -> list[list[str]]:
    import torch

    from apcir.retrieval.encoder import SpladeEncoder
    from apcir.retrieval.precision import gpu_supports_bfloat16

    demo = demo_texts()
    texts = repeated(demo, n)
    folder = base_sized_model(scratch / "base-splade", smoke, demo[: 4 if smoke else 16])
    half = "bfloat16"
    rows: list[list[str]] = []

    def add(how: str, batch: int, count: int, seconds: float, cpu: float, nonzeros: int | None) -> None:
        rate = count / seconds
        hours = CLUEWEB22_B / rate / 3600
        terms = f"{nonzeros / count:.0f}" if nonzeros is not None else ""
        rows.append([how, str(batch), f"{count:,}", terms, f"{rate:,.2f}", f"{count / max(cpu, 1e-9):,.2f}",
                     f"{hours:,.1f}", f"{hours / NODE_GPUS:,.1f}"])

    before = SpladeEncoder(str(folder), device=device, dtype="float32", batch_size=32)
    sample = texts[: max(n // 4, 8)] if device == "cpu" else texts  # today's path is slow on a CPU
    before.encode_reference(texts[:2], 258)
    matrix, seconds, cpu = timed(lambda: before.encode_reference(sample, 258), device)
    add("apcir before (sentence-transformers), float32", 32, len(sample), seconds, cpu, matrix.nnz)
    before = None
    for dtype in ("float32", half):
        encoder = SpladeEncoder(str(folder), device=device, dtype=dtype, batch_size=batch_size)
        encoder.encode_documents(texts[:2], progress=False)
        matrix, seconds, cpu = timed(lambda encoder=encoder: encoder.encode_documents(texts, progress=False), device)
        add(f"apcir, {dtype}", batch_size, len(texts), seconds, cpu, matrix.nnz)
        del encoder
    nonzeros, seconds, cpu = plain_pytorch(folder, texts, device, batch_size)
    add("plain PyTorch loop, bfloat16", batch_size, len(texts), seconds, cpu, nonzeros)
    shard_dtype = half if gpu_supports_bfloat16(device) else "float32"
    count, seconds, cpu = shard_build(folder, texts, device, shard_dtype, batch_size, scratch)
    add(f"apcir index build --shard 0/2, {shard_dtype} (auto), end to end", batch_size, count, seconds, cpu, None)
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows


# ---- 4. padding --------------------------------------------------------------------------------------------------
def padding(batch_size: int, chunk: int, n: int) -> list[list[str]]:
    from transformers import AutoTokenizer

    from apcir.retrieval.encoder import splade_tiny_path

    tokenizer = AutoTokenizer.from_pretrained(str(splade_tiny_path()), local_files_only=True)
    lengths = np.array([len(ids) for ids in tokenizer(demo_texts(), truncation=True, max_length=258)["input_ids"]])
    drawn = np.random.default_rng(0).choice(lengths, size=n)

    def share(window: int, sort: bool = True) -> float:
        """Padding when each run of ``window`` passages is sorted by length (or not) and cut into batches."""
        padded = 0
        for start in range(0, n, window):
            part = np.sort(drawn[start : start + window])[::-1] if sort else drawn[start : start + window]
            for b in range(0, len(part), batch_size):
                padded += int(part[b : b + batch_size].max()) * len(part[b : b + batch_size])
        return 1 - drawn.sum() / padded

    return [[label, f"{share(window, sort):.2%}"] for label, window, sort in
            (("not sorted (file order)", n, False),
             (f"within groups of 8 batches ({8 * batch_size:,}): sentence-transformers, apcir before", 8 * batch_size,
              True),
             (f"within a chunk ({chunk:,}): apcir index build", chunk, True),
             (f"over the whole shard ({n:,})", n, True))]


# ---- 5. tokenising -----------------------------------------------------------------------------------------------
def tokenising(n: int) -> list[list[str]]:
    """CPU time the fast tokenizer spends per passage (what the worker must keep up with, per device)."""
    from transformers import AutoTokenizer

    from apcir.retrieval.encoder import splade_tiny_path

    tokenizer = AutoTokenizer.from_pretrained(str(splade_tiny_path()), local_files_only=True)
    texts = repeated(demo_texts(), n)
    cpu, wall = time.process_time(), time.perf_counter()
    tokenizer(texts, truncation=True, max_length=258, return_attention_mask=False, return_token_type_ids=False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    rate = n / max(cpu, 1e-9)
    return [[f"{n:,}", f"{cpu:.2f}", f"{wall:.2f}", f"{rate:,.0f}",
             ", ".join(f"{target:,}: {target / rate:.1f}" for target in (1_813, 5_000))]]


def table(title: str, header: Sequence[str], rows: list[list[str]]) -> None:
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main(argv: Sequence[str] | None = None) -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda, cuda:1 or cpu (default: cuda when there is a GPU)")
    parser.add_argument("--passages", type=int, default=None, help="passages per BERT-base row (GPU 20,000; CPU 48)")
    parser.add_argument("--tiny-passages", type=int, default=None, help="splade-tiny passages (GPU 32,000; CPU 894)")
    parser.add_argument("--batch-size", type=int, default=None, help="apcir and peer batch (GPU 256; CPU 32)")
    parser.add_argument("--queries", type=int, default=None, help="turns whose rewrites are searched (default all)")
    parser.add_argument("--smoke", action="store_true", help="toy sizes and a 2-layer model: checks the script")
    parser.add_argument("--tables", default="1,2,3,4,5", help="which tables to run (default all: 1,2,3,4,5)")
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    gpu = device.startswith("cuda")
    if args.smoke:
        passages, tiny, batch, turns, precision_passages = 12, 16, 4, 6, 24
    else:
        passages = args.passages or (20_000 if gpu else 48)
        tiny = args.tiny_passages or (32_000 if gpu else 894)
        batch = args.batch_size or (256 if gpu else 32)
        turns, precision_passages = args.queries, None
    name = torch.cuda.get_device_name(torch.device(device)) if gpu else "no GPU: the CPU version of the tables"
    cpu = platform.processor() or platform.machine()
    print(f"SPLADE encoding: device {device} ({name}); {os.cpu_count()} CPU cores ({cpu}); torch {torch.__version__}"
          f"{'; --smoke: toy sizes, a 2-layer model' if args.smoke else ''}")
    started = time.perf_counter()
    wanted = {int(t) for t in args.tables.split(",") if t.strip()}
    if 1 in wanted:
        table("splade-tiny: apcir on the device against today's encoder on the CPU",
              ["encoder", "passages", "device s (CPU s)", "CPU (today's) s (CPU s)", "max |difference|",
               "nonzeros (device / CPU)", "same nonzeros", "same top 10"], tiny_equality(device, tiny, turns))
    if 2 in wanted:
        table(f"bfloat16 against float32, splade-tiny on the demo ({device})",
              ["list", "queries", "top-10 overlap", "identical top 10", "worst overlap", "max |score difference|",
               "of the largest score"], precision_effect(device, precision_passages, turns))
    if 3 in wanted:
        with tempfile.TemporaryDirectory(prefix="apcir-encode-") as scratch:
            model = "a 2-layer BERT (smoke)" if args.smoke else "BERT-base (SPLADE-v3-sized)"
            rows = throughput(device, passages, batch, args.smoke, Path(scratch))
            table(f"{model} with a shifted MLM bias, {device}: passages/s and projected hours for ClueWeb22-B "
                  f"({CLUEWEB22_B:,} passages)",
                  ["how", "batch", "passages", "terms/passage", "passages/s", "passages per CPU-second",
                   "hours, 1 device", f"hours, {NODE_GPUS} devices (projection)"], rows)
            shutil.rmtree(scratch, ignore_errors=True)
    if 4 in wanted:
        table(f"padding share of token positions, batch {batch}, passage lengths drawn from the demo's",
              ["batches sorted by length", "padding"], padding(batch, 10_000, 10_000 if args.smoke else 1_000_000))
    if 5 in wanted:
        table("tokenising (the fast tokenizer, all the cores it takes; CPU time of this process)",
              ["passages", "CPU s", "wall s", "passages per CPU-second", "cores busy at passages/s"],
              tokenising(2_000 if args.smoke else 20_000))
    print(f"\n{time.perf_counter() - started:.0f} s in all")


if __name__ == "__main__":
    main()
