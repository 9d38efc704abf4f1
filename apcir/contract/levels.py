"""Per-turn personalisation levels, from a TSV or from the reformulations JSONL."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from apcir.console import shown
from apcir.contract.records import Turn
from apcir.contract.reformulations import LEVELS, load_reformulations
from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id
from apcir.io import iter_lines, write_text


def load_levels(path: str | Path) -> dict[str, str]:
    """``turn_id -> level`` from ``turn_id<TAB>level`` lines or a reformulations ``.jsonl``.

    A JSONL file is read with :func:`apcir.contract.reformulations.load_reformulations`;
    a failed record has no level: its turn is left out, and the fusion then names it among the turns without a
    level (``--missing-level a`` fuses it at level a, as ``apcir run`` fuses a turn whose reformulation failed).
    A file of failed records only is an error. In a TSV, blank lines and lines starting
    with ``#`` are skipped, and a header line ``turn_id<TAB>level`` is allowed.
    """
    path = Path(path)
    if not path.exists():
        raise ApcirError("levels file not found", path=path)
    if path.suffix in {".jsonl", ".json"}:
        return _from_reformulations(path)
    return _from_tsv(path)


def _from_reformulations(path: Path) -> dict[str, str]:
    records = load_reformulations(path)
    if not records:
        raise ApcirError("no reformulation records", path=path)
    levels: dict[str, str] = {t: r.output.level for t, r in records.items() if r.output is not None}
    if not levels:
        raise ApcirError(f"every one of the {len(records)} reformulations failed: no turn has a level, e.g. "
                         f"{shown(sorted(records))}", path=path)
    return levels


def _from_tsv(path: Path) -> dict[str, str]:
    levels: dict[str, str] = {}
    for number, line in iter_lines(path, "levels file"):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        fields = text.split("\t") if "\t" in text else text.split()
        if len(fields) != 2:
            raise ApcirError(
                f"expected 'turn_id<TAB>level', found {len(fields)} field(s)",
                path=path,
                line=number,
            )
        turn, level = fields[0].strip(), fields[1].strip().lower()
        if number == 1 and turn.lower() in {"turn_id", "turn", "qid"}:
            continue
        if level not in LEVELS:
            raise ApcirError(
                f"level {fields[1]!r} is not one of {', '.join(LEVELS)}", path=path, line=number
            )
        try:
            turn_id = canonical_turn_id(turn)
        except ApcirError as exc:
            raise ApcirError(str(exc), path=path, line=number) from None
        if turn_id in levels and levels[turn_id] != level:
            raise ApcirError(
                f"turn {turn_id} has two levels ({levels[turn_id]} and {level})",
                path=path,
                line=number,
            )
        levels[turn_id] = level
    if not levels:
        raise ApcirError("levels file has no 'turn_id<TAB>level' lines", path=path)
    return levels


ANNOTATORS = "annotators"
"""The oracle level policy: levels from the topics' PTKB provenance (uses annotations; for analysis only)."""
ANNOTATOR_MAPPING = ("no statement in the turn's PTKB provenance: a; any statement: c. The iKAT topics mark a "
                     "statement relevant or not, never 'helps without being necessary', so level b never occurs")


def annotator_levels(turns: Sequence[Turn]) -> dict[str, str]:
    """Each turn's level from the annotators' PTKB provenance (see :data:`ANNOTATOR_MAPPING`)."""
    return {t.turn_id: "c" if t.ptkb_provenance else "a" for t in turns}


def write_levels(levels: dict[str, str], path: str | Path) -> None:
    """Write ``turn_id<TAB>level`` lines, turns sorted."""
    write_text(Path(path), "".join(f"{t}\t{levels[t]}\n" for t in sorted(levels)))


def check_levels(levels: dict[str, str], turns: list[str], *, what: str = "the runs") -> None:
    """Every turn of ``turns`` must have a level; the error names the missing ones."""
    missing = sorted(t for t in turns if t not in levels)
    if missing:
        listed = shown(missing)
        raise ApcirError(
            f"{len(missing)} turn(s) of {what} have no level in the levels file: {listed} "
            "(add them, or pass --missing-level a|b|c to give them one)"
        )
