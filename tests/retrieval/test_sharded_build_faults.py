"""Faults of a sharded index build (issue 49): a shard job whose --chunk-size differs from the plan's is refused
(it was ignored without a word), and a saved chunk found damaged at the merge is named and encoded again (the
merge died on BadZipFile), giving the index an undamaged build gives."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sentence_transformers")
from apcir import datasets
from apcir.errors import ApcirError
from apcir.retrieval import build_index
from apcir.retrieval.embedded import load_embedded
from apcir.retrieval.encoder import SpladeEncoder

pytestmark = pytest.mark.slow  # each test encodes shards with a real model (splade-tiny): 10 to 40 s here
SHARD0 = Path("_build") / "shard-00000-of-00002"


@pytest.fixture(scope="module")
def encoder() -> SpladeEncoder:
    return SpladeEncoder("splade-tiny", device="cpu")


@pytest.fixture(scope="module")
def collection(tmp_path_factory) -> Path:
    passages = list(datasets.iter_collection(datasets.collection_path("ikat23-provenance")))[:23]
    path = tmp_path_factory.mktemp("collection") / "small.jsonl"
    path.write_text("".join(json.dumps({"id": p.id, "contents": p.contents}) + "\n" for p in passages))
    return path


@pytest.fixture(scope="module")
def plain(tmp_path_factory, collection, encoder) -> Path:
    """The index of an undamaged one-machine build with the same chunk size."""
    out = tmp_path_factory.mktemp("plain") / "index"
    build_index(collection, "embedded", out, encoder=encoder, chunk_size=5, progress=False)
    return out


def shards_done(collection: Path, encoder: SpladeEncoder, out: Path) -> None:
    for shard in ("0/2", "1/2"):
        result = build_index(collection, "embedded", out, encoder=encoder, shard=shard, chunk_size=5, progress=False)
        assert result.status == "shard-done"


def same_index(a: Path, b: Path) -> None:
    vectors_a, ids_a = load_embedded(a)
    vectors_b, ids_b = load_embedded(b)
    assert ids_a == ids_b
    np.testing.assert_allclose(vectors_a.toarray(), vectors_b.toarray(), rtol=1e-5, atol=1e-6)


def test_a_shard_with_another_chunk_size_is_refused_and_one_without_keeps_the_plan_s(tmp_path, collection, encoder,
                                                                                     run_cli):
    out = tmp_path / "index"
    build_index(collection, "embedded", out, encoder=encoder, shard="0/2", chunk_size=5, progress=False)
    with pytest.raises(ApcirError, match=r"unfinished build with other settings .*\(chunk_size: 5 -> 50\)"):
        build_index(collection, "embedded", out, encoder=encoder, shard="1/2", chunk_size=50, progress=False)
    code, _, err = run_cli("index", "build", "-c", str(collection), "-e", "splade-tiny", "-o", str(out),
                           "--shard", "1/2", "--chunk-size", "50")
    assert code == 2 and "(chunk_size: 5 -> 50)" in err and len(err.strip().splitlines()) == 1, err
    assert not (out / "_build" / "shard-00001-of-00002").exists()
    # left out, the chunk size is the plan's: shard 1 is saved in chunks of 5 too
    build_index(collection, "embedded", out, encoder=encoder, shard="1/2", progress=False)
    sizes = [len(p.read_text().splitlines()) for p in sorted((out / "_build" / "shard-00001-of-00002").glob("*.ids"))]
    assert sizes and all(size == 5 for size in sizes[:-1]) and 1 <= sizes[-1] <= 5


@pytest.mark.parametrize("damage", ["cut short", "emptied", "ids lost", "ids disagree"])
def test_a_damaged_chunk_is_named_and_encoded_again_at_the_merge(tmp_path, collection, encoder, plain, capsys,
                                                                 damage):
    out = tmp_path / "index"
    shards_done(collection, encoder, out)
    vectors = out / SHARD0 / "chunk-000001.npz"
    ids = vectors.with_suffix(".ids")
    passages = len(ids.read_text().splitlines())
    if damage == "cut short":  # a copy or a full disk cut the file: BadZipFile
        vectors.write_bytes(vectors.read_bytes()[: vectors.stat().st_size // 2])
    elif damage == "emptied":
        vectors.write_bytes(b"")
    elif damage == "ids lost":
        ids.unlink()
    else:
        ids.write_text(ids.read_text() + "extra:1\n")
    capsys.readouterr()
    merged = build_index(collection, "embedded", out, encoder=encoder, progress=False)
    err = capsys.readouterr().err
    assert merged.status == "built"
    assert f"{vectors}: damaged (" in err and "encoding its passages again" in err, err
    assert merged.passages_encoded == passages  # that chunk's passages, and no other
    same_index(out, plain)
    assert not (out / "_build").exists()


def test_the_merge_command_redoes_a_damaged_chunk_and_says_so(tmp_path, collection, encoder, plain, run_cli):
    out = tmp_path / "index"
    shards_done(collection, encoder, out)
    vectors = out / SHARD0 / "chunk-000000.npz"
    vectors.write_bytes(vectors.read_bytes()[:100])
    code, stdout, err = run_cli("index", "build", "-c", str(collection), "-e", "splade-tiny", "-o", str(out))
    assert code == 0, err
    assert "damaged (BadZipFile" in err and "chunk-000000.npz" in err and "built embedded index" in stdout
    same_index(out, plain)


def test_a_chunk_that_cannot_be_of_the_collection_is_refused(tmp_path, collection, encoder):
    out = tmp_path / "index"
    shards_done(collection, encoder, out)
    folder = out / SHARD0
    after = 1 + max(int(p.stem.split("-")[1]) for p in folder.glob("chunk-*.npz"))
    (folder / f"chunk-{after:06d}.npz").write_bytes(b"not a chunk")  # beyond every passage of the shard
    (folder / f"chunk-{after:06d}.ids").write_text("x\n")
    with pytest.raises(ApcirError, match=r"chunk-\d+\.npz: damaged, and past the end of shard 0/2"):
        build_index(collection, "embedded", out, encoder=encoder, progress=False)
