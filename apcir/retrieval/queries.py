"""Query files for ``apcir retrieve``: TSV, or the reformulations JSONL of the LLM stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from apcir.contract.reformulations import LIST_NAMES, QueryInput, load_reformulations
from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id, check_run_id
from apcir.io import iter_lines

FIELDS: tuple[str, ...] = LIST_NAMES


@dataclass
class QuerySet:
    """Queries by turn id, and the turns of a reformulations file that had nothing to retrieve."""

    queries: dict[str, QueryInput]
    skipped: dict[str, str] = field(default_factory=dict)


def load_queries(path: Path, field_name: str | None = None) -> QuerySet:
    """Read ``turn_id<TAB>query[<TAB>response]`` lines, or a reformulations JSONL (``field_name`` picks the input).

    In a reformulations file, ``rewrite`` is q' alone, ``rewrite_response`` q' + r',
    and ``third`` the third rewrite with its response (personalised for levels b/c).
    """
    if path.is_dir():
        raise ApcirError("queries file is a directory, not a file", path=path)
    if not path.is_file():
        raise ApcirError("queries file not found", path=path)
    if _is_jsonl(path):
        return _from_reformulations(path, field_name)
    if field_name is not None:
        raise ApcirError(f"--field {field_name} applies to a reformulations JSONL file, not a TSV", path=path)
    return QuerySet(_from_tsv(path))


def is_jsonl(path: Path) -> bool:
    """Whether a queries file is JSON/JSONL (a reformulations file) rather than a TSV."""
    return _is_jsonl(path)


def _is_jsonl(path: Path) -> bool:
    if path.suffix in (".jsonl", ".json"):
        return True
    for _, line in iter_lines(path, "queries file"):
        if line.strip():
            return line.lstrip().startswith("{")
    return False


def _turn_id(raw: str, path: Path, number: int) -> str:
    text = check_run_id(raw.strip(), "turn id", path, number)
    try:
        return canonical_turn_id(text)
    except ApcirError:
        return text  # not an iKAT id: kept as written


def _from_tsv(path: Path) -> dict[str, QueryInput]:
    queries: dict[str, QueryInput] = {}
    for number, line in iter_lines(path, "queries file"):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) not in (2, 3):
            raise ApcirError(
                f"expected 'turn_id<TAB>query' or 'turn_id<TAB>query<TAB>response', found {len(parts)} field(s)",
                path=path,
                line=number,
            )
        turn = _turn_id(parts[0], path, number)
        if turn in queries:
            raise ApcirError(f"turn {turn} appears twice", path=path, line=number)
        if not parts[1].strip():
            raise ApcirError(f"turn {turn} has an empty query", path=path, line=number)
        queries[turn] = parts[1] if len(parts) == 2 else (parts[1], parts[2] or None)
    if not queries:
        raise ApcirError("queries file holds no queries", path=path)
    return queries


def _from_reformulations(path: Path, field_name: str | None) -> QuerySet:
    if field_name is None:
        raise ApcirError(
            f"a reformulations file holds three inputs per turn; choose one with --field {'|'.join(FIELDS)}", path=path
        )
    if field_name not in FIELDS:
        raise ApcirError(f"--field {field_name!r}: expected one of {', '.join(FIELDS)}")
    result = QuerySet({})
    for turn, record in load_reformulations(path).items():
        if record.status != "ok" or record.output is None:
            result.skipped[turn] = record.error or "reformulation failed"
            continue
        result.queries[turn] = record.list_inputs()[field_name]
    if not result.queries:
        raise ApcirError("no turn of the reformulations file has a usable reformulation", path=path)
    return result
