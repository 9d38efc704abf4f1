"""Gold nuggets: short pieces of information a good response to a turn should contain (iKAT 2024 on).

A nugget set is read from any of three formats, detected from the content:

- **Conversational Gold** (iKAT 2024, irlabamsterdam/CONE-RAG ``gold_nuggets_*.json``), as that resource
  describes it: ``{turn_id: {"[5]": {"text": ..., "relevance": ...}, ...}}``. The nugget id is the key
  without its brackets; ``relevance`` is the weight and must be a number (or a numeric string).
  apcir does not bundle this file (its licence is the resource's): pass its path.
- **iKAT 2025** (irlabamsterdam/ikat2025 ``nuggets-nist.json``, bundled as ``ikat25-test``):
  ``{turn_id: [{"text": ..., "docid": ...}, ...]}``. The nugget id is the 1-based position in the list,
  the weight 1, the source the passage or PTKB statement it was extracted from.
- **JSONL**, one nugget per line: ``{"turn_id", "nugget_id", "text", "weight"}`` (weight optional, 1).

Reading validates: an empty text, a duplicate nugget id within a turn, a weight that is not a number, and
(when the topics are given) a turn id the topics do not have each stop the read with one line naming it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from apcir.console import shown
from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id
from apcir.io import iter_jsonl, read_json

if TYPE_CHECKING:
    from apcir.contract.responses import ResponseRecord


class Nugget(BaseModel):
    """One gold nugget of a turn."""

    model_config = ConfigDict(frozen=True)

    turn_id: str
    nugget_id: str
    text: str
    weight: float = 1.0
    source: str = ""
    """Where it was extracted from (a passage id or a PTKB statement id), when the file says."""


class NuggetSet(BaseModel):
    """Every nugget of a file, by turn, in the file's order."""

    name: str
    by_turn: dict[str, list[Nugget]]

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.by_turn.values())


def load_nuggets(name_or_path: str | Path, topic_turns: Iterable[str] | None = None) -> NuggetSet:
    """A bundled nugget set by name (``ikat25-test``) or a file in one of the three formats (module doc)."""
    from apcir.datasets import NUGGETS, nuggets_file

    name = str(name_or_path)
    path = nuggets_file(name) if name in NUGGETS else Path(name).expanduser()
    if not path.exists():
        raise ApcirError(f"nugget file not found (bundled sets: {', '.join(NUGGETS)})", path=path)
    if path.suffix == ".jsonl":
        nuggets = list(_from_jsonl(path))
    else:
        nuggets = list(_from_json(read_json(path, "nugget file"), path))
    by_turn = _group(nuggets, path)
    if not by_turn:
        raise ApcirError("no nuggets in the file", path=path)
    if topic_turns is not None:
        unknown = sorted(set(by_turn) - set(topic_turns))
        if unknown:
            raise ApcirError(f"{len(unknown)} turn id(s) of the nuggets are not in the topics: {shown(unknown)}",
                             path=path)
    return NuggetSet(name=name, by_turn=by_turn)


def _from_json(data: Any, path: Path) -> Iterable[Nugget]:
    if not isinstance(data, dict):
        raise ApcirError("expected a JSON object turn id -> nuggets (or a .jsonl file, one nugget a line)", path=path)
    for turn, items in data.items():
        turn_id = _turn(turn, path)
        if isinstance(items, dict):  # Conversational Gold: {"[5]": {"text", "relevance"}}
            for key, item in items.items():
                nugget_id = str(key).strip().removeprefix("[").removesuffix("]").strip()
                if not isinstance(item, dict):
                    raise ApcirError(f"turn {turn_id}, nugget {key}: expected {{\"text\", \"relevance\"}}", path=path)
                yield _nugget(turn_id, nugget_id, item.get("text"), item.get("relevance", 1), "", path)
        elif isinstance(items, list):  # iKAT 2025: [{"text", "docid"}]
            for position, item in enumerate(items, start=1):
                if not isinstance(item, dict):
                    raise ApcirError(f"turn {turn_id}, nugget #{position}: expected {{\"text\", \"docid\"}}",
                                     path=path)
                yield _nugget(turn_id, str(position), item.get("text"), 1, str(item.get("docid") or ""), path)
        else:
            raise ApcirError(f"turn {turn_id}: expected an object of nuggets or a list of them", path=path)


def _from_jsonl(path: Path) -> Iterable[Nugget]:
    for number, row in iter_jsonl(path, "nugget file"):
        if "turn_id" not in row or "nugget_id" not in row:
            raise ApcirError('expected {"turn_id", "nugget_id", "text", "weight"}', path=path, line=number)
        try:
            yield _nugget(_turn(row["turn_id"], path), str(row["nugget_id"]), row.get("text"), row.get("weight", 1),
                          str(row.get("source") or ""), path)
        except ApcirError as exc:
            raise ApcirError(exc.message, path=path, line=number) from None


def _turn(value: Any, path: Path) -> str:
    try:
        return canonical_turn_id(str(value))
    except ApcirError as exc:
        raise ApcirError(str(exc.message), path=path) from None


def _nugget(turn_id: str, nugget_id: str, text: Any, weight: Any, source: str, path: Path) -> Nugget:
    if not nugget_id:
        raise ApcirError(f"turn {turn_id}: a nugget has an empty id", path=path)
    if not isinstance(text, str) or not text.strip():
        raise ApcirError(f"turn {turn_id}, nugget {nugget_id}: empty text", path=path)
    try:
        value = float(weight) if not isinstance(weight, bool) else None
    except (TypeError, ValueError):
        value = None
    if value is None or value != value or value < 0:
        raise ApcirError(f"turn {turn_id}, nugget {nugget_id}: weight {weight!r} is not a non-negative number",
                         path=path)
    return Nugget(turn_id=turn_id, nugget_id=nugget_id, text=text.strip(), weight=value, source=source)


def _group(nuggets: Iterable[Nugget], path: Path) -> dict[str, list[Nugget]]:
    by_turn: dict[str, list[Nugget]] = {}
    seen: set[tuple[str, str]] = set()
    for nugget in nuggets:
        key = (nugget.turn_id, nugget.nugget_id)
        if key in seen:
            raise ApcirError(f"turn {nugget.turn_id}: nugget id {nugget.nugget_id} appears twice", path=path)
        seen.add(key)
        by_turn.setdefault(nugget.turn_id, []).append(nugget)
    return by_turn


def load_response_runs(sources: Iterable[str | Path]) -> dict[str, dict[str, str]]:
    """``run -> turn -> response text`` from responses files in any of these forms (several files: many runs):

    - ``apcir respond``'s JSONL (the run is named after the file; failed records are left out);
    - iKAT 2024 participants' JSON ``{turn_id: {run: text}}`` (Conversational Gold's ``automatic_responses.json``);
    - iKAT 2025 BERGEN JSON ``[{"q_id", "response", ...}]``, one file per run named after it;
    - the bundled name ``ikat25-runs`` (the three 2025 runs).

    ``NAME=PATH`` names the run of a one-run file; otherwise apcir's ``responses.jsonl`` (the name ``apcir run``
    writes) is named after its directory (``runs/demo/responses.jsonl`` is ``demo``) and other files after
    themselves. Citation markers ``[n]`` are removed from apcir's responses before matching. A turn answered twice
    in one file (``0_10`` and ``0-10`` are one turn) is refused, naming both entries: one text would silently win.
    """
    from apcir.datasets import RESPONSE_RUNS, response_run_files

    runs: dict[str, dict[str, str]] = {}
    for source in sources:
        name, text = run_name_and_path(str(source))
        paths = response_run_files(text) if text in RESPONSE_RUNS else [Path(text).expanduser()]
        for path in paths:
            found = _runs_of(path)
            if name is not None:
                if len(found) != 1:
                    raise ApcirError(f"{name}={text}: the file holds {len(found)} runs; NAME= names a file of one run",
                                     path=path)
                found = {name: next(iter(found.values()))}
            for run, responses in found.items():
                if run in runs:
                    raise ApcirError(f"two responses files hold a run named {run!r}: name them NAME=PATH", path=path)
                runs[run] = responses
    if not runs:
        raise ApcirError("no responses given")
    return runs


def run_name_and_path(text: str) -> tuple[str | None, str]:
    """``NAME=PATH`` as (NAME, PATH); anything else (an existing path with ``=`` too) as (None, text)."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest or "/" in name or "\\" in name or Path(text).expanduser().exists():
        return None, text
    return name, rest


def run_label(path: Path) -> str:
    """A one-run file's run name: apcir's ``responses.jsonl`` is named after its directory, any other file after
    itself."""
    return path.resolve().parent.name if path.stem == "responses" and path.resolve().parent.name else path.stem


def load_response_records(sources: Iterable[str]) -> dict[str, dict[str, ResponseRecord]]:
    """``run -> turn -> record`` of apcir respond's JSONL files, named as :func:`load_response_runs` names them
    (``NAME=PATH``, else :func:`run_label`); a turn answered twice in one file is refused (:func:`load_responses`'s
    ``one_answer``)."""
    from apcir.contract.responses import load_responses

    runs: dict[str, dict[str, ResponseRecord]] = {}
    for source in sources:
        name, text = run_name_and_path(str(source))
        path = Path(text).expanduser()
        if not path.exists():
            raise ApcirError("responses file not found", path=path)
        if path.suffix == ".json":
            raise ApcirError("without --nuggets, the responses are apcir respond's JSONL (one record a line); "
                             "iKAT 2024's and BERGEN's JSON files are scored for nugget recall (--nuggets)", path=path)
        run = name or run_label(path)
        if run in runs:
            raise ApcirError(f"two responses files hold a run named {run!r}: name them NAME=PATH", path=path)
        records = load_responses(path, one_answer=True)
        if not records:
            raise ApcirError("no response records", path=path)
        runs[run] = records
    if not runs:
        raise ApcirError("no responses given")
    return runs


def _runs_of(path: Path) -> dict[str, dict[str, str]]:
    if not path.exists():
        raise ApcirError("responses file not found", path=path)
    if path.suffix == ".jsonl":
        from apcir.contract.responses import load_responses, strip_citations

        records = load_responses(path, one_answer=True)
        return {run_label(path): {t: strip_citations(r.text) for t, r in records.items() if r.status == "ok"}}
    data = read_json(path, "responses file")
    if isinstance(data, list):  # BERGEN: one run
        responses: dict[str, str] = {}
        seen: dict[str, tuple[int, str]] = {}
        for n, row in enumerate(data, start=1):
            if not isinstance(row, dict) or "q_id" not in row or not isinstance(row.get("response"), str):
                raise ApcirError(f'record #{n}: expected {{"q_id", "response", ...}}', path=path)
            turn = _turn(row["q_id"], path)
            _once(seen, turn, n, str(row["q_id"]), "record", path)
            responses[turn] = row["response"]
        return {path.stem: responses}
    if isinstance(data, dict) and all(isinstance(v, dict) for v in data.values()):  # {turn: {run: text}}
        runs: dict[str, dict[str, str]] = {}
        keys: dict[str, tuple[int, str]] = {}
        for position, (turn, by_run) in enumerate(data.items(), start=1):
            _once(keys, _turn(turn, path), position, str(turn), "key", path)
            for run, value in by_run.items():
                if not isinstance(value, str):
                    raise ApcirError(f"turn {turn}, run {run}: the response is not a string", path=path)
                runs.setdefault(str(run), {})[_turn(turn, path)] = value
        return runs
    raise ApcirError("not a responses file: expected apcir's JSONL, {turn_id: {run: text}} or "
                     '[{"q_id", "response"}]', path=path)


def _once(seen: dict[str, tuple[int, str]], turn: str, position: int, written: str, what: str, path: Path) -> None:
    """Refuse a second entry of one turn in a responses file (``0_10`` and ``0-10`` are one turn): one of the two
    texts would silently win."""
    if turn in seen:
        first, before = seen[turn]
        raise ApcirError(f"turn {turn} is answered twice: {what} #{first} ({before!r}) and {what} #{position} "
                         f"({written!r}); one response per turn and run: keep one", path=path)
    seen[turn] = (position, written)


def check_runs_against(runs: Mapping[str, Mapping[str, str]], nuggets: NuggetSet) -> None:
    """Refuse runs that answer none of the nuggets' turns (wrong topics, or wrong ids)."""
    for run, responses in runs.items():
        if not set(responses) & set(nuggets.by_turn):
            raise ApcirError(f"run {run!r}: none of its {len(responses)} responses is for a turn of the nuggets "
                             f"({nuggets.name}, {len(nuggets.by_turn)} turns)")
