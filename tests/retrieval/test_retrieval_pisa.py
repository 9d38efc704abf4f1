"""The pisa backend (pyterrier-pisa's engine over apcir's quantised SPLADE vectors): what it recalls of the embedded
engine's exact top 1000 on the demo's rewrites, its scores (the exact quantised dot products, whatever the query
algorithm), its manifest and options, sharded and resumed builds (a killed one too), and `apcir run` on it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("pyterrier_pisa")
pytest.importorskip("sentence_transformers")

from apcir import datasets
from apcir.contract.layout import RunLayout
from apcir.contract.reformulations import LIST_NAMES, load_reformulations
from apcir.contract.runs import load_run, ranking
from apcir.retrieval import build_index, open_index
from apcir.retrieval.core import list_queries
from apcir.retrieval.embedded import load_embedded
from apcir.retrieval.encoder import SpladeEncoder
from apcir.retrieval.pisa import PISA_DIR, RUNS
from apcir.retrieval.vectors import quantize


@pytest.fixture(scope="module")
def encoder() -> SpladeEncoder:
    return SpladeEncoder("splade-tiny", device="cpu")


@pytest.fixture(scope="module")
def indexes(tmp_path_factory, demo, encoder) -> tuple[Path, Path]:
    """The demo collection's embedded splade-tiny index (a copy of the suite's demo run's) and a pisa index built
    from its passage vectors, as `apcir index build --backend pisa --vectors-from` builds it."""
    root = tmp_path_factory.mktemp("pisa")
    embedded, pisa = root / "embedded", root / "pisa"
    shutil.copytree(demo.index, embedded)
    build_index("ikat23-provenance", "pisa", pisa, encoder=encoder, vectors_from=embedded, progress=False)
    return embedded, pisa


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.slow
def test_pisa_recalls_the_embedded_top_1000_on_the_demo_rewrites(indexes, demo, run_cli, tmp_path):
    """`apcir index build --backend pisa` on the demo collection, then `apcir retrieve` of the demo's three lists:
    at the default scale (100) each list keeps at least 0.99 of the embedded engine's exact top 1000 (measured:
    0.9994 over the 996 lists, the rest are passages whose only shared weights round to 0)."""
    embedded, _ = indexes
    out = tmp_path / "pisa"
    code, printed, err = run_cli("index", "build", "--backend", "pisa", "--collection", "ikat23-provenance",
                                 "--encoder", "splade-tiny", "--vectors-from", str(embedded), "--out", str(out),
                                 "--json")
    assert code == 0, err
    manifest = json.loads(printed)["manifest"]  # the command's JSON is PISA's log-free
    assert manifest["backend"] == "pisa" and manifest["passages"] == 894 and manifest["quantization_scale"] == 100
    assert manifest["options"] == {"quantization_scale": 100} and manifest["model"] == "splade-tiny"
    assert (out / PISA_DIR / "pt_meta.json").is_file() and not (out / "_build").exists()

    reformulations = RunLayout(demo.run_dir).reformulations
    runs = {}
    for name, index in (("pisa", out), ("embedded", embedded)):
        code, _, err = run_cli("retrieve", "--index", str(index), "--queries", str(reformulations), "--field",
                               ",".join(LIST_NAMES), "--k", "1000", "--out", str(tmp_path / f"runs-{name}"))
        assert code == 0, err
        runs[name] = {field: load_run(tmp_path / f"runs-{name}" / f"{field}.run") for field in LIST_NAMES}
    kept = total = 0
    for field in LIST_NAMES:
        exact, ours = runs["embedded"][field], runs["pisa"][field]
        assert exact.keys() == ours.keys() and len(exact) > 300
        found = sum(len(set(exact[t]) & set(ours[t])) for t in exact)
        wanted = sum(len(exact[t]) for t in exact)
        assert found / wanted >= 0.99, (field, found / wanted)
        kept, total = kept + found, total + wanted
        assert all(len(ours[t]) <= 1000 for t in ours)
    print(f"pisa recall of the embedded top 1000 on the demo's rewrites: {kept / total:.4f} ({kept} of {total})")
    assert kept / total >= 0.99


@pytest.mark.slow
def test_pisa_scores_are_the_quantised_dot_products_and_every_algorithm_gives_the_same_top_k(indexes, encoder, demo):
    """Every query algorithm offered is rank-safe: each returns exactly the top k of the quantised scores
    (round(100 q) . round(100 d) / 100^2), in apcir's ranking order, ties at the cut included."""
    embedded, pisa = indexes
    postings, ids = load_embedded(embedded)
    documents = sp.csr_matrix(postings.T)
    records = load_reformulations(RunLayout(demo.run_dir).reformulations)
    queries = list_queries(records, "rewrite_response")
    turns = sorted(queries)[:40]
    matrix = encoder.encode_queries([queries[t] for t in turns], progress=False)
    exact = (quantize(matrix).astype(np.int64) @ quantize(documents).astype(np.int64).T).toarray()
    runs = {}
    for algorithm in ("maxscore", "block_max_wand", "block_max_maxscore", "wand", "ranked_or"):
        index = open_index(pisa, encoder, options={"query_algorithm": algorithm})
        runs[algorithm] = index.search_vectors(turns, matrix, 25, progress=False)
    for algorithm, run in runs.items():
        assert run == runs["ranked_or"] and list(map(list, run.values())) == list(map(list, runs["ranked_or"].values()))
        for row, turn in enumerate(turns):
            scores = {ids[c]: exact[row, c] / 100**2 for c in np.flatnonzero(exact[row] > 0)}
            assert list(run[turn].items()) == ranking(scores, 25), (algorithm, turn)


def test_pisa_options_are_validated_and_the_index_keeps_its_scale(indexes, run_cli, tmp_path):
    embedded, pisa = indexes
    info = run_cli("index", "info", str(pisa), "--json")
    assert info[0] == 0 and json.loads(info[1])["quantization_scale"] == 100
    queries = tmp_path / "q.tsv"
    queries.write_text("9-1_1\thiking boots for wet weather\n")

    def one_line(*args: str) -> str:
        code, _, err = run_cli(*args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        return err

    base = ("retrieve", "--index", str(pisa), "--queries", str(queries), "--out", str(tmp_path / "x.run"))
    assert "quantization_scale 100, not 50" in one_line(*base, "--quantization-scale", "50")
    assert "bm25_k1: not used by the pisa retrieval backend" in one_line(*base, "--bm25-k1", "1.2")
    assert "--query-algorithm 'fast'" in one_line(*base, "--query-algorithm", "fast")
    assert "query_algorithm: not used by the embedded retrieval backend" in one_line(
        "retrieve", "--index", str(embedded), "--queries", str(queries), "--out", str(tmp_path / "y.run"),
        "--query-algorithm", "wand")
    code, _, err = run_cli(*base, "--query-algorithm", "wand", "--k", "5")
    assert code == 0 and len(load_run(tmp_path / "x.run")["9-1_1"]) == 5, err
    # the scale shapes the index: asked for another, the build says the index differs
    assert "quantization_scale 100, not 50" in one_line(
        "index", "build", "--backend", "pisa", "-c", "ikat23-provenance", "--encoder", "splade-tiny", "--out",
        str(pisa), "--quantization-scale", "50")
    code, out, _ = run_cli("index", "build", "--backend", "pisa", "-c", "ikat23-provenance", "--encoder",
                           "splade-tiny", "--out", str(pisa))
    assert code == 0 and "up to date" in out


@pytest.fixture
def small_collection(tmp_path) -> Path:
    passages = list(datasets.iter_collection(datasets.collection_path("ikat23-provenance")))[:37]
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps({"id": p.id, "contents": p.contents}) + "\n" for p in passages))
    return path


@pytest.mark.slow
def test_sharded_and_resumed_pisa_builds_equal_a_plain_build_byte_for_byte(tmp_path, small_collection, encoder,
                                                                           monkeypatch):
    import apcir.retrieval.pisa as pisa_module

    plain = tmp_path / "plain"
    build_index(small_collection, "pisa", plain, encoder=encoder, chunk_size=5, progress=False)

    sharded = tmp_path / "sharded"
    for i in (2, 0):
        result = build_index(small_collection, "pisa", sharded, encoder=encoder, shard=f"{i}/3", chunk_size=5,
                             progress=False)
        assert result.status == "shard-done"
    shard0 = sharded / "_build" / "shard-00000-of-00003"
    chunks = sorted(shard0.glob("chunk-*.npz"))
    lost = len(chunks[-1].with_suffix(".ids").read_text().splitlines())
    chunks[-1].unlink()
    (shard0 / "done.json").unlink()
    chunk_count = sum(len(list(folder.glob("chunk-*.npz"))) for folder in (sharded / "_build").glob("shard-*")) + 1
    assert chunk_count >= 6  # the lost chunk counted; shard 1 (not encoded yet) adds more
    # the merge is interrupted after 3 runs (a crash while inverting the chunks) ...
    written: list[int] = []
    write_run = pisa_module.write_run

    def failing(runs, number, *args):
        if len(written) == 3:
            raise KeyboardInterrupt
        written.append(number)
        write_run(runs, number, *args)

    monkeypatch.setattr(pisa_module, "write_run", failing)
    with pytest.raises(KeyboardInterrupt):
        build_index(small_collection, "pisa", sharded, encoder=encoder, progress=False)
    assert not (sharded / "manifest.json").exists() and len(list((sharded / "_build" / RUNS).glob("*.counts"))) == 3
    # ... and resumed: the runs on disk are kept, the others written, the result the plain build's bytes
    written.clear()
    monkeypatch.setattr(pisa_module, "write_run", lambda runs, number, *args: (written.append(number),
                                                                                write_run(runs, number, *args)))
    merged = build_index(small_collection, "pisa", sharded, encoder=encoder, progress=False)
    assert merged.status == "built" and merged.passages_encoded == 0  # shards 0 and 1 were encoded above
    chunks_now = sorted((sharded / "_build").glob("shard-*/chunk-*.npz")) if (sharded / "_build").exists() else []
    assert not chunks_now  # the build finished and removed its work
    assert written[0] == 3 and written == list(range(3, written[-1] + 1)) and len(written) > chunk_count - 3
    assert merged.manifest.passages == json.loads((plain / "manifest.json").read_text())["passages"] == 37
    assert _files(sharded / PISA_DIR) == _files(plain / PISA_DIR)
    assert not (sharded / "_build").exists()
    assert lost >= 1


@pytest.mark.slow
def test_a_pisa_build_killed_while_inverting_resumes_to_the_same_index(indexes, tmp_path):
    """A real kill (SIGKILL) of `apcir index build --backend pisa` while it writes its runs (one passage a chunk):
    the next build keeps the runs written, and the index is byte for byte the one built in one go."""
    embedded, pisa = indexes
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "apcir", "index", "build", "--backend", "pisa", "--collection",
               "ikat23-provenance", "--encoder", "splade-tiny", "--vectors-from", str(embedded), "--chunk-size", "1",
               "--out", str(out)]
    runs = out / "_build" / RUNS
    job = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and job.poll() is None:
        if runs.is_dir() and len(list(runs.glob("*.counts"))) >= 40:
            break
        time.sleep(0.01)
    assert job.poll() is None, job.stderr.read().decode() if job.stderr else ""
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    done = len(list(runs.glob("*.counts")))
    assert 40 <= done < 894 and not (out / "manifest.json").exists()

    again = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr
    assert _files(out / PISA_DIR) == _files(pisa / PISA_DIR)


@pytest.mark.slow
def test_apcir_run_searches_a_pisa_index_like_apcir_retrieve(small, tmp_path, run_cli, monkeypatch):
    """`apcir run` with backend = "pisa" (its index built from the small collection's embedded vectors, so the run
    finds it up to date): its three lists are `apcir retrieve`'s of the same reformulations."""
    root, collection, index, chosen = small
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("index", "build", "--backend", "pisa", "-c", str(collection), "--encoder", "splade-tiny",
                           "--vectors-from", str(index), "--out", "pisa-index")
    assert code == 0, err
    config = tmp_path / "p.toml"
    config.write_text(f'name = "p"\nturns = {json.dumps(chosen)}\n[reformulator]\nmethod = "heuristic"\n'
                      f'[retrieval]\nbackend = "pisa"\nindex = "pisa-index"\ncollection = "{collection}"\n'
                      'query_algorithm = "block_max_wand"\n'
                      '[fusion.weights]\nfolds = 2\nstep = 0.1\nbootstrap = 50\n[fusion]\nbaselines = ["no-levels"]\n'
                      '[evaluation]\nqrels = "ikat23-test-provenance"\n')
    code, out, err = run_cli("run", str(config), "--no-progress")
    assert code == 0, err
    assert "pisa-index is up to date" in out
    layout = RunLayout(tmp_path / "runs" / "p")
    code, _, err = run_cli("retrieve", "--index", "pisa-index", "--queries", str(layout.reformulations), "--field",
                           ",".join(LIST_NAMES), "--out", str(tmp_path / "direct"))
    assert code == 0, err
    for name, path in layout.lists().items():
        assert load_run(path) == load_run(tmp_path / "direct" / f"{name}.run"), name
        assert RunLayout.query_vectors(path).exists()  # kept for the baselines, as for the embedded backend
