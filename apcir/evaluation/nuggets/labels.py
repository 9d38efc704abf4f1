"""Human nugget labels: one person's decision, per (turn, run, nugget), whether a response covers a nugget.

Two layouts, detected from the file (or named: ``apcir`` / ``cone-rag``):

- **apcir's**: JSONL ``{"turn_id", "run", "nugget_id", "label"}`` or TSV ``turn_id<TAB>run<TAB>nugget_id<TAB>label``
  (an optional header line); ``label`` 1/0, yes/no or true/false.
- **Conversational Gold's human study** (irlabamsterdam/CONE-RAG, ``human-study-matching-labels.txt``), as
  published: ``HIT_TOPIC_TURN_NUGGET_ALIAS<TAB>LABEL``, e.g. ``48_1_6_6_uva-3<TAB>1``. ``HIT`` is the crowd-work
  page the item was on (not part of the key); ``TOPIC_TURN`` is the turn id of the nugget files (``1_6``);
  ``NUGGET`` is ``n`` of the key ``"[n]"`` in ``gold_nuggets_human.json`` (not the deduplicated file, which
  drops some of the labelled nuggets); ``LABEL`` 1 = covered (inferable from the response), 0 = not; ``ALIAS``
  names the run whose response the worker read, by a short name that :data:`CONE_RAG_ALIASES` maps to the runs
  of ``automatic_responses.json``.

One decision per (turn, run, nugget): a row that repeats an earlier one exactly is counted once (a warning
says how many), and a key labelled both 1 and 0 stops the read, naming both lines.

The alias table was derived from the labels themselves (the resource does not publish it): for each alias,
the run whose responses best explain its labels, by the likelihood of its labels under a label-vs-signal
curve fitted on the *other* aliases' labels, with lexical overlap and, independently, embedding similarity
(``benchmarks/nugget_agreement.py --aliases`` prints the evidence; docs/guide/responses.md the figures).
Where the evidence does not single one run out, the alias has two candidates: the first is used, and
``apcir nuggets agreement`` reports the figures under each. ``--alias ALIAS=RUN`` overrides an entry
(repeat it for the same alias to give several candidates, the first one used); an alias that no row of the file
has is refused with the aliases it does have (a misspelt alias would otherwise change nothing, silently).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from apcir.console import warn
from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id
from apcir.io import iter_lines, json_loads

Label = tuple[str, str, str, int]
"""(turn_id, run, nugget_id, 0 or 1)."""

OWN, PUBLISHED = "apcir", "cone-rag"
"""apcir's label layout (turn, run, nugget, label) and the CONE-RAG human study's, as published."""
LAYOUTS = ("auto", OWN, PUBLISHED)

CONE_RAG_ALIASES: dict[str, tuple[str, ...]] = {
    "iires-1": ("uot-yahoo_run",),
    "infos-2": ("infosense_llama_short_long_qrs_2_run",),
    "ksu-1": ("ksu",),
    "nii-1": ("NII_USI_UCL",),
    "rali-3": ("RALI_gpt4o_fusion_rerank", "RALI_gpt4o_nonp_fusion_rerank"),
    "uva-3": ("gpt4-QD1-rr", "convgqr-qr-bm25-rr-baseline"),
}
"""The human study's run aliases -> the ``automatic_responses.json`` runs they name, best-supported first."""

_TRUE, _FALSE = {"1", "yes", "true", "y"}, {"0", "no", "false", "n"}
_CONE_RAG_KEY = re.compile(r"^(?P<hit>\d+)_(?P<topic>\d+)_(?P<turn>\d+)_(?P<nugget>\d+)_(?P<alias>\S+)$")


@dataclass(frozen=True)
class LabelRow:
    """One line of a labels file: ``source`` is the run (apcir's layout) or the alias (the published one)."""

    turn_id: str
    source: str
    nugget_id: str
    label: int


@dataclass(frozen=True)
class HumanLabels:
    """A labels file as read, and the alias table that maps its sources to runs (empty: sources are runs)."""

    path: str
    layout: str
    rows: tuple[LabelRow, ...]
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def ambiguous(self) -> dict[str, tuple[str, ...]]:
        """Aliases with more than one candidate run (and used in the file)."""
        used = {r.source for r in self.rows}
        return {a: runs for a, runs in self.aliases.items() if len(runs) > 1 and a in used}

    def resolved(self, choice: Mapping[str, str] | None = None) -> tuple[list[Label], dict[str, int]]:
        """The labels with each alias mapped to its first candidate (or ``choice[alias]``), and the rows that
        could not be mapped, counted by reason."""
        choice = choice or {}
        labels: list[Label] = []
        unmapped: dict[str, int] = {}
        for row in self.rows:
            run = row.source
            if self.layout == PUBLISHED:
                candidates = self.aliases.get(row.source)
                if not candidates:
                    reason = f"alias {row.source} not in the alias table (give --alias {row.source}=RUN)"
                    unmapped[reason] = unmapped.get(reason, 0) + 1
                    continue
                run = choice.get(row.source, candidates[0])
            labels.append((row.turn_id, run, row.nugget_id, row.label))
        return labels, unmapped

    def mapping(self) -> dict[str, tuple[str, ...]]:
        """The alias table entries the file uses (empty for apcir's layout)."""
        used = sorted({r.source for r in self.rows})
        return {a: self.aliases[a] for a in used if a in self.aliases} if self.layout == PUBLISHED else {}


def parse_aliases(values: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """``ALIAS=RUN`` options -> {alias: runs} (an alias given twice has two candidates, in the order given)."""
    table: dict[str, tuple[str, ...]] = {}
    for value in values:
        alias, sep, run = value.partition("=")
        if not sep or not alias.strip() or not run.strip():
            raise ApcirError(f"--alias {value!r}: expected ALIAS=RUN, e.g. uva-3=gpt4-QD1-rr")
        table[alias.strip()] = (*table.get(alias.strip(), ()), run.strip())
    return table


def load_labels(path: str | Path, layout: str = "auto",
                aliases: Mapping[str, Sequence[str]] | None = None) -> HumanLabels:
    """Read a labels file in either layout (module doc); ``aliases`` override entries of the published layout's
    table, and each must be an alias of the file's rows. A malformed line stops the read with one line naming it;
    so do two rows giving one (turn, run, nugget) different labels, while a row repeating another exactly is
    counted once, with a warning."""
    path = Path(path).expanduser()
    if layout not in LAYOUTS:
        raise ApcirError(f"labels layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    if not path.exists():
        raise ApcirError("labels file not found", path=path)
    lines = [(n, line.strip()) for n, line in iter_lines(path, "labels file")]
    lines = [(n, text) for n, text in lines if text and not text.startswith("#")]
    if not lines:
        raise ApcirError("no labels in the file", path=path)
    if layout == "auto":
        layout = PUBLISHED if _looks_published(lines[0][1]) and path.suffix != ".jsonl" else OWN
    numbered = [(n, _published_row(text, path, n) if layout == PUBLISHED else _apcir_row(text, path, n, path.suffix))
                for n, text in lines]
    kept = _unique([(n, row) for n, row in numbered if row is not None], layout, path)
    if not kept:
        raise ApcirError("no labels in the file", path=path)
    if layout == OWN and aliases:
        raise ApcirError("--alias maps the published human study's run aliases; these labels name runs already")
    used = sorted({r.source for r in kept})
    for alias in aliases or {}:
        if alias not in used:
            raise ApcirError(f"--alias {alias}=...: no label row has the alias {alias}; the labels' aliases are "
                             f"{', '.join(used)}", path=path)
    table = {**CONE_RAG_ALIASES, **{a: tuple(r) for a, r in (aliases or {}).items()}} if layout == PUBLISHED else {}
    return HumanLabels(path=str(path), layout=layout, rows=kept, aliases=table)


def _unique(rows: Sequence[tuple[int, LabelRow]], layout: str, path: Path) -> tuple[LabelRow, ...]:
    """One label per (turn, run or alias, nugget): a row that repeats an earlier one, label included, is left out
    with one warning (how many, and the first pair of lines); the same key labelled both 1 and 0 is refused,
    naming the key and both lines (which decision holds is the labeller's to say, not apcir's)."""
    first: dict[tuple[str, str, str], tuple[int, LabelRow]] = {}
    repeats: list[tuple[int, int]] = []
    for number, row in rows:
        key = (row.turn_id, row.source, row.nugget_id)
        if key not in first:
            first[key] = (number, row)
            continue
        earlier, before = first[key]
        if before.label != row.label:
            source = "alias" if layout == PUBLISHED else "run"
            raise ApcirError(f"turn {row.turn_id}, {source} {row.source}, nugget {row.nugget_id}: labelled "
                             f"{before.label} on line {earlier} and {row.label} on line {number}; keep one decision "
                             "per (turn, run, nugget)", path=path)
        repeats.append((number, earlier))
    if repeats:
        warn(f"{path}: {len(repeats)} label row(s) repeat an earlier row (the same turn, "
             f"{'alias' if layout == PUBLISHED else 'run'}, nugget and label) and are counted once (e.g. line "
             f"{repeats[0][0]} repeats line {repeats[0][1]})")
    return tuple(row for _, row in first.values())


def _looks_published(text: str) -> bool:
    fields = text.split("\t")
    return len(fields) == 2 and _CONE_RAG_KEY.match(fields[0].strip()) is not None


def _value(raw: str, path: Path, number: int) -> int:
    value = raw.strip().lower()
    if value not in _TRUE | _FALSE:
        raise ApcirError(f"label {raw!r} is not 1/0, yes/no or true/false", path=path, line=number)
    return 1 if value in _TRUE else 0


def _turn(value: str, path: Path, number: int) -> str:
    try:
        return canonical_turn_id(value.strip())
    except ApcirError as exc:
        raise ApcirError(exc.message, path=path, line=number) from None


def _published_row(text: str, path: Path, number: int) -> LabelRow:
    fields = text.split("\t")
    match = _CONE_RAG_KEY.match(fields[0].strip()) if len(fields) == 2 else None
    if match is None:
        raise ApcirError(f"expected HIT_TOPIC_TURN_NUGGET_ALIAS<TAB>LABEL (the published human-study layout), "
                         f"found {text[:60]!r}", path=path, line=number)
    turn = _turn(f"{match['topic']}_{match['turn']}", path, number)
    return LabelRow(turn, match["alias"], match["nugget"], _value(fields[1], path, number))


def _apcir_row(text: str, path: Path, number: int, suffix: str) -> LabelRow | None:
    if suffix == ".jsonl":
        row = json_loads(text, path, number)
        if not isinstance(row, dict) or not {"turn_id", "run", "nugget_id", "label"} <= set(row):
            raise ApcirError('expected {"turn_id", "run", "nugget_id", "label"}', path=path, line=number)
        fields = [str(row["turn_id"]), str(row["run"]), str(row["nugget_id"]), str(row["label"])]
    else:
        fields = text.split("\t")
        if len(fields) != 4:
            raise ApcirError(f"expected turn_id<TAB>run<TAB>nugget_id<TAB>label, found {len(fields)} field(s) "
                             "(or the published human-study layout, HIT_TOPIC_TURN_NUGGET_ALIAS<TAB>LABEL)",
                             path=path, line=number)
        if number == 1 and fields[0].lower() in {"turn_id", "turn", "qid"}:
            return None
    return LabelRow(_turn(fields[0], path, number), fields[1].strip(), fields[2].strip().strip("[]"),
                    _value(fields[3], path, number))
