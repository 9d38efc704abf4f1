"""The ``file:PATH`` reformulator: reformulations made elsewhere, read instead of asked for.

Published rewrites of other systems, or a model's answers from a batch API,
become apcir reformulation records, so every system can be compared with the
same retriever and fusion (the paper's "retrieval-aligned" setting, Table 1).
Three layouts are read:

* apcir's own reformulations JSONL (records with ``turn_id`` and ``output``);
* a TSV ``turn_id<TAB>rewrite[<TAB>response]``;
* JSON or JSONL mapping turn ids to fields: a JSON object ``{turn_id: {field:
  value}}`` (or ``{turn_id: "rewrite"}``), a JSON list of objects, or JSONL
  objects, each with a turn id field. ``map`` says which of the file's fields
  holds which of apcir's (``{"rewrite": "rar_rw", "response": "rar_rs"}``);
  unmapped fields are read under apcir's own names (``rewrite``,
  ``response``, ``third_rewrite``, ``third_response``, ``level``,
  ``ptkb_used``, ``reasoning``; the turn id under ``turn_id``, ``qid`` or ``id``).

Turn ids are normalised (``9-1-3`` and ``9-1_3`` alike). What a file lacks is
filled in and said, per turn, in the record's ``notes``:

* a turn missing from the file, or without a rewrite, is a **failed** record
  (reported by id; the pipeline searches it with its utterance at level a);
* no ``response``: empty; no ``third_rewrite``/``third_response``: the rewrite
  and response again (so the third list repeats the second);
* no ``level``: the fallback's (``a``, or the ``heuristic`` reformulator's level
  and statements);
* ``ptkb_used`` ids that are not in the profile are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from apcir.console import shown, warn
from apcir.contract.records import Turn
from apcir.contract.reformulations import LEVELS, ReformulationOutput, ReformulationRecord
from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id
from apcir.io import iter_lines, parse_json_line, read_json
from apcir.options import Options
from apcir.reformulation.offline import heuristic_output
from apcir.reformulation.registry import REFORMULATORS

_ID_FIELDS = ("turn_id", "qid", "id")
# The fields of a reformulation a file may provide, in the record's own names.
FILE_FIELDS: tuple[str, ...] = (
    "rewrite",
    "response",
    "third_rewrite",
    "third_response",
    "level",
    "ptkb_used",
    "reasoning",
)
LevelFallback = Literal["a", "heuristic"]
HEURISTIC_FALLBACK: LevelFallback = "heuristic"
"""``level_fallback``: a turn the file gives no level takes the heuristic reformulator's."""


class FileOptions(Options):
    """``file:PATH``'s own ``[reformulator]`` keys."""

    map: dict[str, str] = Field(
        default_factory=dict,
        description="apcir field -> the file's field, e.g. {rewrite = 'rar_rw', response = 'rar_rs'}",
    )
    level_fallback: LevelFallback = Field(
        "a", description="the level of a turn the file gives none for: 'a' or the 'heuristic' one"
    )

    @field_validator("map")
    @classmethod
    def _known_fields(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value) - set(FILE_FIELDS) - {"turn_id"})
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}: map keys are {', '.join(('turn_id', *FILE_FIELDS))}")
        return value


def parse_map(items: list[str] | None) -> dict[str, str]:
    """``["rewrite=rar_rw,response=rar_rs", ...]`` (the ``--map`` option) as a dict."""
    mapping: dict[str, str] = {}
    for item in items or []:
        for pair in item.split(","):
            if not pair.strip():
                continue
            key, sep, value = pair.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise ApcirError(f"--map {pair!r}: expected apcir_field=file_field, e.g. rewrite=rar_rw")
            mapping[key.strip()] = value.strip()
    return mapping



NO_LEVEL = "no level in the file"
"""How a record's note starts when its level came from ``level_fallback``, not from the file."""


def level_from_fallback(record: ReformulationRecord) -> bool:
    """True when the file gave the turn no level and ``level_fallback`` did."""
    return any(note.startswith(NO_LEVEL) for note in record.notes)

def file_path(method: str) -> Path:
    """The path of a ``file:PATH`` reformulator name."""
    text = REFORMULATORS.resolve(method)[1].strip()
    if not text:
        raise ApcirError("file: needs a path, e.g. --llm file:runs/rewrites.tsv")
    path = Path(text).expanduser()
    if not path.is_file():
        raise ApcirError("reformulations file not found (from --llm file:PATH)", path=path)
    return path


def read_fields(path: Path, mapping: Mapping[str, str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``{turn_id: {apcir field: value}}`` from any of the three layouts, and warnings about the file."""
    layout = _layout(path)
    if layout == "tsv":
        if mapping:
            raise ApcirError(f"map / --map ({', '.join(f'{k}={v}' for k, v in mapping.items())}) does not apply to a "
                             "TSV, whose columns are turn_id, rewrite and response; drop it", path=path)
        return _from_tsv(path), []
    rows = _json_rows(path) if layout == "json" else [(n, r) for n, r in _jsonl_rows(path)]
    if rows and _is_apcir_record(rows[0][1]):
        return _remapped(_from_apcir_records(path, rows), mapping, path), []
    return _from_mapped_rows(path, rows, mapping)


def _remapped(fields: dict[str, dict[str, Any]], mapping: Mapping[str, str],
              path: Path) -> dict[str, dict[str, Any]]:
    """apcir records with ``map`` honoured: ``rewrite=third_rewrite`` reads each record's third rewrite as its
    rewrite. A source that is not a field of apcir's records is an error."""
    if not mapping:
        return fields
    if "turn_id" in mapping:
        raise ApcirError("map turn_id=... does not apply to apcir's records (their turn_id is fixed)", path=path)
    unknown = sorted(v for v in mapping.values() if v not in FILE_FIELDS)
    if unknown:
        raise ApcirError(f"map names {unknown}, which apcir's records do not have (their fields: "
                         f"{', '.join(FILE_FIELDS)})", path=path)
    return {turn: {**values, **{name: values[source] for name, source in mapping.items() if source in values}}
            for turn, values in fields.items()}


def file_records(
    turns: Sequence[Turn], llm: str, mapping: Mapping[str, str], fallback: LevelFallback
) -> tuple[list[ReformulationRecord], list[str]]:
    """One record per turn, in topic order (see the module docstring), and warnings about the file."""
    path = file_path(llm)
    fields, warnings = read_fields(path, mapping)
    known = {t.turn_id for t in turns}
    extra = sorted(t for t in fields if t not in known)
    if extra:
        listed = shown(extra)
        warnings.append(f"{len(extra)} turn(s) of {path} are not among the turns asked for, ignored: {listed}")
    return [_record(turn, fields.get(turn.turn_id), llm, fallback) for turn in turns], warnings


# ---- one turn ----------------------------------------------------------------------------------
def _record(turn: Turn, given: dict[str, Any] | None, llm: str, fallback: LevelFallback) -> ReformulationRecord:
    if given is None:
        return ReformulationRecord(turn_id=turn.turn_id, model=llm, status="failed",
                                   error="turn not in the reformulations file")
    rewrite = _text(given.get("rewrite"))
    if not rewrite:
        return ReformulationRecord(turn_id=turn.turn_id, model=llm, status="failed",
                                   error="the reformulations file gives no rewrite for this turn",
                                   raw=json.dumps(given, ensure_ascii=False, default=str))
    notes: list[str] = []
    response = _text(given.get("response"))
    if "response" not in given:
        notes.append("no response in the file: empty")
    third_rewrite = _text(given.get("third_rewrite"))
    if not third_rewrite:
        third_rewrite = rewrite
        notes.append("no third_rewrite in the file: the rewrite")
    third_response = _text(given.get("third_response"))
    if "third_response" not in given:
        third_response = response
        notes.append("no third_response in the file: the response")
    heuristic = heuristic_output(turn) if fallback == HEURISTIC_FALLBACK else None
    raw_level = given.get("level")
    level: str
    if raw_level is None or not str(raw_level).strip():
        level = heuristic.level if heuristic else "a"
        notes.append(f"{NO_LEVEL}: {level} from the fallback ({fallback})")
    else:
        level = str(raw_level).strip().strip("()").lower()
        if level not in LEVELS:
            return ReformulationRecord(turn_id=turn.turn_id, model=llm, status="failed",
                                       error=f"level {raw_level!r} is not a, b or c",
                                       raw=json.dumps(given, ensure_ascii=False, default=str))
    if "ptkb_used" in given:
        used = _ids(given["ptkb_used"])
    else:
        used = list(heuristic.ptkb_used) if heuristic and heuristic.level == level else []
    unknown = [sid for sid in used if sid not in turn.ptkb]
    if unknown:
        notes.append(f"ptkb_used {unknown} not in the profile: dropped")
        used = [sid for sid in used if sid in turn.ptkb]
    output = ReformulationOutput(
        reasoning=_text(given.get("reasoning")) or f"read from {llm}",
        level=level,  # type: ignore[arg-type]
        rewrite=rewrite,
        response=response,
        third_rewrite=third_rewrite,
        third_response=third_response,
        ptkb_used=used,
    )
    return ReformulationRecord(turn_id=turn.turn_id, model=llm, status="ok", output=output, notes=notes)


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _ids(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    if isinstance(value, (int, str)) and str(value).strip():
        return [s.strip() for s in str(value).replace(";", ",").split(",") if s.strip()]
    return []


# ---- layouts -----------------------------------------------------------------------------------
def _layout(path: Path) -> str:
    for _, line in iter_lines(path, "reformulations file"):
        text = line.strip()
        if not text:
            continue
        if text.startswith("[") or (path.suffix == ".json" and text.startswith("{")):
            return "json"
        return "jsonl" if text.startswith("{") else "tsv"
    raise ApcirError("reformulations file is empty", path=path)


def _turn_id(raw: Any, path: Path, line: int | None) -> str:
    try:
        return canonical_turn_id(str(raw))
    except ApcirError as exc:
        raise ApcirError(str(exc), path=path, line=line) from None


def _from_tsv(path: Path) -> dict[str, dict[str, Any]]:
    fields: dict[str, dict[str, Any]] = {}
    for number, line in iter_lines(path, "reformulations file"):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) not in (2, 3):
            raise ApcirError(f"expected 'turn_id<TAB>rewrite[<TAB>response]', found {len(parts)} field(s)",
                             path=path, line=number)
        turn = _turn_id(parts[0].strip(), path, number)
        if turn in fields:
            raise ApcirError(f"turn {turn} appears twice", path=path, line=number)
        fields[turn] = {"rewrite": parts[1]} | ({"response": parts[2]} if len(parts) == 3 else {})
    return fields


def _jsonl_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    return [(n, parse_json_line(line, path, n)) for n, line in iter_lines(path, "reformulations file") if line.strip()]


def _json_rows(path: Path) -> list[tuple[int | None, dict[str, Any]]]:
    data = read_json(path, "reformulations file")
    if isinstance(data, list):
        rows: list[tuple[int | None, dict[str, Any]]] = []
        for index, item in enumerate(data):
            if not isinstance(item, dict):
                raise ApcirError(f"item {index + 1} of the list is not an object", path=path)
            rows.append((None, item))
        return rows
    if isinstance(data, dict):
        return [(None, {"turn_id": key, **(value if isinstance(value, dict) else {"rewrite": value})})
                for key, value in data.items()]
    raise ApcirError("expected a JSON object {turn_id: fields} or a list of objects", path=path)


def _is_apcir_record(row: dict[str, Any]) -> bool:
    return "turn_id" in row and "output" in row and "model" in row


def _from_apcir_records(path: Path, rows: Sequence[tuple[int | None, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    fields: dict[str, dict[str, Any]] = {}
    for number, row in rows:
        turn = _turn_id(row.get("turn_id"), path, number)
        output = row.get("output")
        if row.get("status", "ok") == "ok" and isinstance(output, dict):
            fields[turn] = {k: output[k] for k in FILE_FIELDS if k in output}
        else:
            fields.pop(turn, None)  # a failed record: as if the turn were missing
    return fields


def _from_mapped_rows(
    path: Path, rows: Sequence[tuple[int | None, dict[str, Any]]], mapping: Mapping[str, str]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    source = {name: mapping.get(name, name) for name in FILE_FIELDS}
    fields: dict[str, dict[str, Any]] = {}
    for index, (number, row) in enumerate(rows):
        id_key = mapping.get("turn_id") or next((k for k in _ID_FIELDS if k in row), None)
        if id_key is None or id_key not in row:
            where = "" if number is not None else f"item {index + 1}: "
            raise ApcirError(f"{where}no turn id field ({', '.join(_ID_FIELDS)}, or map turn_id=...)",
                             path=path, line=number)
        turn = _turn_id(row[id_key], path, number)
        if turn in fields:
            raise ApcirError(f"turn {turn} appears twice", path=path, line=number)
        fields[turn] = {name: row[key] for name, key in source.items() if key in row}
    mapped = [key for name, key in mapping.items() if name != "turn_id"]
    absent = [key for key in mapped if not any(key in row for _, row in rows)]
    if absent:
        present = sorted({k for _, row in rows for k in row})
        raise ApcirError(f"map names field(s) {absent} that no row of the file has (its fields: "
                         f"{', '.join(present[:20])})", path=path)
    warnings: list[str] = []
    return fields, warnings


def produce(turns: Sequence[Turn], options: Any, emit: Callable[[ReformulationRecord], None], **_: Any) -> None:
    """``file:PATH``'s records, with what the file lacks said in warnings."""
    own = options.own(FileOptions)
    records, warnings = file_records(turns, options.method, own.map, own.level_fallback)
    for message in warnings:
        warn(message)
    missing = [r.turn_id for r in records if r.status == "failed"]
    if missing:
        warn(f"{len(missing)} turn(s) have no usable reformulation in {options.argument}: "
             f"{shown(missing)}")
    filled = [r for r in records if level_from_fallback(r)]
    if filled:
        warn(f"{len(filled)} turn(s) have no level in the file; levels from the fallback '{own.level_fallback}'")
    for record in records:
        emit(record)


def identity(turns: Sequence[Turn], options: Any) -> dict[str, Any]:
    """The file's content, its field map and the level fallback (with the heuristic's code when it is used)."""
    import hashlib

    from apcir.reformulation.offline import source_identity

    own = options.own(FileOptions)
    digest = hashlib.sha256(file_path(options.method).read_bytes()).hexdigest()[:16]
    found: dict[str, Any] = {"file": digest, "map": dict(sorted(own.map.items())), "level_fallback": own.level_fallback}
    if own.level_fallback == HEURISTIC_FALLBACK:
        found[_FALLBACK_CODE] = source_identity()
    return found


_FALLBACK_CODE = "heuristic"
"""The identity's key for the fallback reformulator's code (not part of what shapes every record)."""


def shaping(options: Any) -> dict[str, Any]:
    return {k: v for k, v in identity([], options).items() if k != _FALLBACK_CODE}


def inputs(options: Any) -> list[str]:
    """The file it reads (whether or not it exists: :func:`file_path` says so when it is read)."""
    return [options.argument.strip()]


def covered(options: Any) -> set[str]:
    """The turns the file has reformulations for."""
    fields, _ = read_fields(file_path(options.method), options.own(FileOptions).map)
    return set(fields)
