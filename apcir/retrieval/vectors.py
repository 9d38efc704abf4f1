"""Read and write pyserini's JsonVectorCollection JSONL.

One passage a line: ``{"id": "...", "contents": "...", "vector": {token: weight}}``
with float or integer weights (Anserini's impact indexes want integers, e.g.
``round(100 * w)``; Seismic takes floats).

:func:`read_vectors` streams a file and checks every line: a line that is not a
JSON object, lacks ``id`` or ``vector``, has an id that is empty or holds
whitespace (a run file could not hold it), an empty vector (or one whose weights
are all 0), or a weight that is not a finite non-negative number a 32-bit float
can hold (``true``, a string, NaN, infinity, a negative value, 1e39) raises
:class:`~apcir.errors.ApcirError` naming the file and line. Weights written as
JSON integers (``37``) are quantised impacts; any weight written with a fraction
or an exponent (``0.37``, ``37.0``) makes the file one of float weights
(:attr:`VectorStats.integral`). Tokens map to term ids through a given
vocabulary (``{token: id}``; unknown tokens are counted and skipped) or through
one built as the file is read (ids in order of first appearance). :func:`read_matrix` gathers a whole
file into a passages x vocabulary CSR matrix; :func:`write_vectors` writes one.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from apcir.errors import ApcirError
from apcir.ids import check_run_id
from apcir.io import atomic_write, iter_lines, json_loads, parse_json_line, write_text
from apcir.retrieval.options import QUANTIZATION_SCALE


@dataclass
class VectorRecord:
    """One passage: its id, text, term ids (in the line's order) and weights."""

    id: str
    contents: str
    terms: np.ndarray  # int64
    weights: np.ndarray  # float32 (float64 would keep integer impacts > 2**24 exact; SPLADE has none)


@dataclass
class VectorStats:
    """What a read saw: lines, unknown-token occurrences (by token), and the vocabulary used."""

    lines: int = 0
    unknown: dict[str, int] = field(default_factory=dict)
    vocabulary: dict[str, int] = field(default_factory=dict)
    integral: bool = True
    """Every weight read was written as a JSON integer (quantised impacts, as Anserini's ``-impact`` indexes use)."""
    first_unknown_line: int | None = None
    """The first line with a token outside the given vocabulary."""

    @property
    def unknown_total(self) -> int:
        return sum(self.unknown.values())


FLOAT32_MAX = float(np.finfo(np.float32).max)


def _weight(value: object, token: str, path: Path, line: int) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApcirError(f"weight of token {token!r} is not a number: {value!r}", path=path, line=line)
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise ApcirError(f"weight of token {token!r} is {value!r}; weights must be finite", path=path, line=line)
    if value < 0:
        raise ApcirError(f"weight of token {token!r} is negative ({value!r})", path=path, line=line)
    if value > FLOAT32_MAX:  # compared before float(): an int literal may not even fit a float64
        shown = f"{value:.3g}" if value <= sys.float_info.max else f"about 1e+{int(math.log10(value))}"
        raise ApcirError(f"weight of token {token!r} is {shown}, too large for a 32-bit float "
                         f"(at most {FLOAT32_MAX:.3g})", path=path, line=line)
    if value > 0 and np.float32(value) == 0:
        raise ApcirError(f"weight of token {token!r} is {value!r}, below the smallest 32-bit float: it would be "
                         "stored as 0; drop the token or scale the weights", path=path, line=line)
    return float(value)


_SPACE = re.compile(r"\s")


def _checked_weights(values: list[object]) -> np.ndarray | None:
    """The weights as float64 when every one is acceptable (a number, finite, >= 0, within float32 and not
    rounding to 0 there); None when one is not (the caller then finds and names it)."""
    if not all(type(v) is float or type(v) is int for v in values):
        return None
    try:
        array = np.array(values, dtype=np.float64)
    except OverflowError:
        return None
    with np.errstate(over="ignore"):
        narrow = array.astype(np.float32)
    if not (np.isfinite(array).all() and (array >= 0).all() and (array <= FLOAT32_MAX).all()
            and not ((array > 0) & (narrow == 0)).any()):
        return None
    return array


def _check_token(token: str, path: Path, line: int) -> None:
    if not token:
        raise ApcirError("a vector holds an empty token \"\"", path=path, line=line)
    if any(c.isspace() for c in token):
        raise ApcirError(f"token {token!r} holds whitespace; a pretokenized index splits it into other tokens "
                         "(Lucene's -pretokenized), so it would not match itself", path=path, line=line)


def read_vectors(
    path: str | Path, vocabulary: Mapping[str, int] | None = None, stats: VectorStats | None = None,
    what: str = "passage",
) -> Iterator[VectorRecord]:
    """Stream the records of a JsonVectorCollection file (see the module doc for the checks).

    With ``vocabulary`` tokens map through it and unknown ones are skipped and counted in
    ``stats.unknown``; without it ``stats.vocabulary`` grows as new tokens appear. A record
    whose tokens are all unknown has empty ``terms``. Blank lines are skipped. ``what`` names
    a record in messages (``passage``, ``query``)."""
    path = Path(path)
    stats = stats if stats is not None else VectorStats()
    own = stats.vocabulary
    numeric, first_numeric = 0, ""
    for number, text in iter_lines(path, "vector collection"):
        if not text.strip():
            continue
        obj = parse_json_line(text, path, number)  # NaN and Infinity are JSON to it: refused below as weights
        raw_id = obj.get("id")
        if raw_id is None:
            raise ApcirError("missing \"id\"", path=path, line=number)
        if isinstance(raw_id, int) and not isinstance(raw_id, bool):
            numeric += 1  # Anserini reads it as text too; said once per file, with the count
            first_numeric = first_numeric or f"line {number}: {raw_id}"
        elif not isinstance(raw_id, str):
            raise ApcirError(f"{what} id {raw_id!r} is neither a string nor an integer", path=path, line=number)
        record_id = check_run_id(str(raw_id), f"{what} id", path, number)
        vector = obj.get("vector")
        if not isinstance(vector, dict):
            raise ApcirError("missing \"vector\" object {token: weight}", path=path, line=number)
        if not vector:
            raise ApcirError(f"{what} {record_id!r} has an empty vector", path=path, line=number)
        tokens, values = list(vector), list(vector.values())
        for token in tokens:
            if not token or _SPACE.search(token):
                _check_token(token, path, number)
        checked = _checked_weights(values)
        if checked is None:  # something to refuse: the token-by-token checks name it
            checked = np.array([_weight(v, t, path, number) for t, v in zip(tokens, values)], dtype=np.float64)
        positive = bool((checked > 0).any())
        if stats.integral and not all(type(v) is int for v in values):
            stats.integral = False
        if vocabulary is not None:
            found = [vocabulary.get(token) for token in tokens]
            if None in found:
                for token, term in zip(tokens, found):
                    if term is None:
                        stats.unknown[token] = stats.unknown.get(token, 0) + 1
                if stats.first_unknown_line is None:
                    stats.first_unknown_line = number
                keep = [i for i, term in enumerate(found) if term is not None]
                found, checked = [found[i] for i in keep], checked[keep]
            terms = found
        else:
            terms = [own[token] if token in own else own.setdefault(token, len(own)) for token in tokens]
        weights = checked
        if not positive:
            raise ApcirError(f"{what} {record_id!r} has an empty vector (every weight is 0)", path=path, line=number)
        stats.lines += 1
        contents = obj.get("contents", "")
        yield VectorRecord(record_id, contents if isinstance(contents, str) else str(contents),
                           np.asarray(terms, dtype=np.int64), np.asarray(weights, dtype=np.float32))
    if numeric:
        from apcir.console import warn

        warn(f"{path}: {numeric} {what} id(s) are JSON numbers, read as text ({first_numeric}); "
             "JsonVectorCollection ids are strings")


def read_matrix(
    paths: str | Path | Iterable[str | Path], vocabulary: Mapping[str, int] | None = None, what: str = "passage",
) -> tuple[sp.csr_matrix, list[str], VectorStats]:
    """Whole files as a passages x vocabulary float32 CSR matrix, the passage ids, and the stats.

    The matrix has ``max(vocabulary ids) + 1`` columns (or the built vocabulary's size)."""
    if isinstance(paths, str | Path):
        paths = [paths]
    stats = VectorStats()
    ids: list[str] = []
    indptr = [0]
    terms: list[np.ndarray] = []
    weights: list[np.ndarray] = []
    for path in paths:
        for record in read_vectors(path, vocabulary, stats, what):
            ids.append(record.id)
            terms.append(record.terms)
            weights.append(record.weights)
            indptr.append(indptr[-1] + record.terms.size)
    if vocabulary is not None:
        columns = max(vocabulary.values(), default=-1) + 1
    else:
        columns = len(stats.vocabulary)
    matrix = sp.csr_matrix(
        (np.concatenate(weights) if weights else np.zeros(0, np.float32),
         np.concatenate(terms) if terms else np.zeros(0, np.int64), np.asarray(indptr, dtype=np.int64)),
        shape=(len(ids), columns), dtype=np.float32,
    )
    matrix.sum_duplicates()  # a JSON object cannot repeat a key, but two tokens may share an id
    return matrix, ids, stats


def write_vectors(
    path: str | Path, ids: list[str], matrix: sp.csr_matrix, vocabulary: list[str], *,
    contents: list[str] | None = None, integer_scale: float | None = None,
) -> int:
    """Write rows of ``matrix`` (passages x vocabulary) as JsonVectorCollection lines; returns the count.

    ``vocabulary[t]`` is term t's token. Weights are written as floats, or, with
    ``integer_scale``, as integers ``round(integer_scale * w)`` with the zeros dropped (Anserini's
    ``-impact`` indexes). A row left with no weight is an error (pyserini would index an empty passage)."""
    path = Path(path)
    matrix = sp.csr_matrix(matrix)
    if matrix.shape[0] != len(ids):
        raise ValueError(f"{matrix.shape[0]} rows for {len(ids)} ids")
    if contents is not None and len(contents) != len(ids):
        raise ValueError(f"{len(contents)} texts for {len(ids)} ids")
    with atomic_write(path) as out:
        for row, pid in enumerate(ids):
            lo, hi = matrix.indptr[row], matrix.indptr[row + 1]
            values = matrix.data[lo:hi]
            if not np.all(np.isfinite(values)) or np.any(values < 0):
                raise ApcirError(f"passage {pid!r} has a negative or non-finite weight")
            tokens = [vocabulary[t] for t in matrix.indices[lo:hi].tolist()]
            if integer_scale is not None:
                vector = {tok: v for tok, v in zip(tokens, np.rint(values * integer_scale).astype(np.int64).tolist()) if v > 0}
            else:
                vector = {tok: v for tok, v in zip(tokens, values.astype(np.float64).tolist()) if v > 0}
            if not vector:
                raise ApcirError(f"passage {pid!r} has an empty vector")
            text = contents[row] if contents is not None else ""
            out.write(json.dumps({"id": pid, "contents": text, "vector": vector}, ensure_ascii=False) + "\n")
    return len(ids)


def quantize(matrix: sp.csr_matrix, scale: int = QUANTIZATION_SCALE) -> sp.csr_matrix:
    """Integer impacts ``round(scale * w)`` (int32); entries that round to zero are removed. How the impact indexes
    (``lucene-splade``, ``pisa``) store passage weights and weigh query terms."""
    out = sp.csr_matrix(matrix, dtype=np.float32, copy=True)
    out.data = np.rint(out.data * scale)
    out.eliminate_zeros()
    return sp.csr_matrix(out, dtype=np.int32)


VOCABULARY_FILE = "vocab.txt"


@dataclass
class Vocabulary:
    """The token of each dimension of an index built from vectors with their own tokens (no model)."""

    vocabulary: list[str]
    name: str | None = None

    @property
    def vocab_size(self) -> int:
        return len(self.vocabulary)

    def ids(self) -> dict[str, int]:
        return {token: i for i, token in enumerate(self.vocabulary)}

    def save(self, folder: Path) -> None:
        write_text(folder / VOCABULARY_FILE, "".join(f"{json.dumps(token)}\n" for token in self.vocabulary))

    @classmethod
    def load(cls, folder: Path) -> Vocabulary:
        path = folder / VOCABULARY_FILE
        if not path.exists():
            raise ApcirError(f"index built from vectors without a model lacks its {VOCABULARY_FILE}", path=folder)
        return cls([json_loads(line, path, number) for number, line in iter_lines(path, "index vocabulary")
                    if line.strip()])


def describe_unknown(stats: VectorStats, limit: int = 5) -> str:
    """``N token occurrences (M distinct) not in the vocabulary, e.g. ...``."""
    common = sorted(stats.unknown.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    shown = ", ".join(f"{token!r} ({count})" for token, count in common)
    first = f", the first on line {stats.first_unknown_line}" if stats.first_unknown_line else ""
    return (f"{stats.unknown_total} token occurrence(s) ({len(stats.unknown)} distinct) not in the vocabulary{first}, "
            f"e.g. {shown}")
