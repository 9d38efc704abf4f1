"""The embedded index written chunk by chunk with bounded memory (apcir/retrieval/postings_writer.py) is byte for byte
the index the in-memory build writes (``save_embedded``: every chunk stacked, transposed, sorted by id)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from apcir.retrieval import postings_writer
from apcir.retrieval.embedded import ARRAYS, ID_ARRAY, IDS, array_path, passage_vectors, save_embedded, write_index

FILES = [*(f"postings.{name}.npy" for name in ARRAYS), ID_ARRAY, IDS]


class Vocabulary:
    def __init__(self, size: int) -> None:
        self.vocab_size = size


def same_files(a: Path, b: Path) -> None:
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def generated(n: int, vocab: int, seed: int) -> tuple[list[str], sp.csr_matrix]:
    """``n`` passages of 1-12 terms (a few terms in most passages, as SPLADE's), ids of several widths and scripts."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 13, size=n)
    rows = np.repeat(np.arange(n), lengths)
    terms = np.minimum(rng.zipf(1.3, size=rows.size) - 1, vocab - 1)
    weights = rng.lognormal(0, 0.8, size=rows.size).astype(np.float32)
    matrix = sp.coo_matrix((weights, (rows, terms)), shape=(n, vocab)).tocsr()
    matrix.sum_duplicates()
    words = ["doc", "Doc", "dóc", "文書", "d"]
    ids = [f"{words[i % 5]}-{rng.integers(0, 10 ** int(rng.integers(1, 9)))}:{i}" for i in range(n)]
    return ids, matrix


def chunked(ids: list[str], matrix: sp.csr_matrix, size: int) -> list[tuple[list[str], sp.csr_matrix]]:
    return [(ids[i:i + size], matrix[i:i + size]) for i in range(0, len(ids), size)]


@pytest.fixture
def tiny_batches(monkeypatch):
    """Groups, ranges and term x block slices far smaller than a chunk, so that every boundary is crossed."""
    monkeypatch.setattr(postings_writer, "GROUP_POSTINGS", 20_000)
    monkeypatch.setattr(postings_writer, "RANGE_POSTINGS", 30_000)
    monkeypatch.setattr(postings_writer, "BOUNDS_BYTES", 8 * 4 * 7)  # 7 terms at a time at 3 blocks
    monkeypatch.setattr(postings_writer, "IDS_AT_ONCE", 1_000)


def test_the_small_collection_index_is_the_in_memory_build(small, tmp_path):
    """The small fixture's index (apcir index build, splade-tiny vectors of real passages) equals, file for file,
    what the build in memory writes from the same vectors."""
    _, _, index, _ = small
    documents, ids = passage_vectors(index)
    save_embedded(tmp_path, sp.csr_matrix(documents, copy=True), ids)
    same_files(index, tmp_path)


@pytest.mark.parametrize("one_shot", [False, True], ids=["reread", "generator"])
def test_chunks_out_of_id_order_give_the_in_memory_build(tmp_path, tiny_batches, one_shot):
    """70,000 passages (3 of the engine's blocks) in shuffled chunks of 3,000, as a list read twice and as a
    generator read once (its chunks kept in ``work``): every file equals the in-memory build's."""
    ids, matrix = generated(70_000, 300, seed=7)
    shuffled = np.random.default_rng(1).permutation(len(ids))
    ids = [ids[i] for i in shuffled]
    matrix = matrix[shuffled]
    expected, out, work = tmp_path / "memory", tmp_path / "streamed", tmp_path / "work"
    save_embedded(expected, matrix, ids)
    chunks = chunked(ids, matrix, 3_000)
    chunks.insert(5, ([], sp.csr_matrix((0, 300), dtype=np.float32)))  # an empty chunk changes nothing
    facts = write_index(out, iter(chunks) if one_shot else chunks, Vocabulary(300), threads=1, work=work)
    assert facts == {"nonzeros": matrix.nnz}
    same_files(expected, out)
    assert not (work / postings_writer.SPILL).exists()
    assert np.load(array_path(out, "bounds")).shape == (300, 4)


def test_chunks_in_id_order_and_a_repeated_term(tmp_path, tiny_batches):
    """Chunks already in id order skip the sort; a chunk that repeats a (passage, term) entry has its weights
    added, as the encoder's own chunks never repeat one."""
    ids, matrix = generated(9_000, 50, seed=3)
    order = sorted(range(len(ids)), key=ids.__getitem__)
    ids, matrix = [ids[i] for i in order], matrix[order]
    expected, out = tmp_path / "memory", tmp_path / "streamed"
    save_embedded(expected, matrix, ids)
    chunks = chunked(ids, matrix, 1_000)
    first_ids, first = chunks[0]
    end = first.indptr[1]  # passage 0's first term again, with weight 0: the sum is passage 0's own weight
    repeated = sp.csr_matrix((np.r_[first.data[:end], [0.0], first.data[end:]],
                              np.r_[first.indices[:end], first.indices[:1], first.indices[end:]],
                              np.r_[0, first.indptr[1:] + 1]), shape=first.shape)
    repeated.has_canonical_format = False
    chunks[0] = (first_ids, repeated)
    write_index(out, chunks, Vocabulary(50), threads=1, work=tmp_path / "work")
    same_files(expected, out)


def test_an_empty_collection_and_mismatched_ids(tmp_path):
    expected, out = tmp_path / "memory", tmp_path / "streamed"
    save_embedded(expected, sp.csr_matrix((0, 40), dtype=np.float32), [])
    write_index(out, [], Vocabulary(40), threads=1, work=tmp_path / "work")
    same_files(expected, out)
    with pytest.raises(ValueError, match="2 vectors for 1 ids"):
        write_index(out, [(["a"], sp.csr_matrix((2, 40), dtype=np.float32))], Vocabulary(40), threads=1,
                    work=tmp_path / "work")


def test_chunks_that_change_between_passes_are_refused(tmp_path):
    class Shrinking:
        def __init__(self) -> None:
            self.passes = 0

        def __iter__(self):
            self.passes += 1
            ids, matrix = generated(100, 20, seed=self.passes)
            return iter([(ids, matrix)])

    with pytest.raises(ValueError, match="changed between the two passes"):
        write_index(tmp_path / "out", Shrinking(), Vocabulary(20), threads=1, work=tmp_path / "work")


PEAK = """
import resource
from pathlib import Path
import numpy as np, scipy.sparse as sp
from apcir.retrieval import postings_writer
from apcir.retrieval.embedded import write_index

postings_writer.GROUP_POSTINGS, postings_writer.RANGE_POSTINGS = 2_000_000, 4_000_000  # both sizes exceed them

class Vocabulary:
    vocab_size = 30_522

class Chunks:  # generated again at each pass: one chunk in memory at a time
    def __iter__(self):
        for c in range({chunks}):
            rng = np.random.default_rng(c)
            terms = rng.integers(0, 30_522, size=2_000_000).astype(np.int32)
            m = sp.csr_matrix((rng.random(terms.size, dtype=np.float32), terms, np.arange(0, terms.size + 1, 200)),
                              shape=(10_000, 30_522))
            yield [f"p{{c:05d}}-{{i:05d}}" for i in range(10_000)], m

write_index(Path({out!r}), Chunks(), Vocabulary(), threads=1, work=Path({work!r}))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_collection(tmp_path):
    """Building 4 and 16 chunks of 10,000 passages x 200 postings (8M and 32M postings: 64 and 256 MB as CSR,
    several times that for the build that stacks and transposes them) peaks at about the same resident memory
    (groups and ranges of 2M and 4M postings here, smaller than both)."""
    peaks = []
    for chunks in (4, 16):
        script = PEAK.format(chunks=chunks, out=str(tmp_path / f"out{chunks}"), work=str(tmp_path / f"work{chunks}"))
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
        peaks.append(int(done.stdout.split()[-1]))
    assert peaks[1] < peaks[0] + 40, peaks  # MiB: 4x the postings (+192 MB as CSR), not 4x the memory


def test_the_merge_checks_ids_by_their_hashes_and_reads_them_again_only_on_a_repeat():
    from apcir.errors import ApcirError
    from apcir.retrieval.chunks import check_unique

    class Counting(list):
        passes = 0

        def __iter__(self):
            type(self).passes += 1
            return super().__iter__()

    ids = Counting(f"p:{i}" for i in range(1000))
    assert check_unique(ids) == 1000 and Counting.passes == 1
    ids.append("p:17")
    with pytest.raises(ApcirError, match=r"duplicate passage id 'p:17' \(passages 17 and 1000 of the collection"):
        check_unique(ids)
    assert Counting.passes == 3
