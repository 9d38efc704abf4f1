"""The submission formats: the single source of the names ``export.format`` / ``--format`` accept.

A format is a module with a ``build(SubmissionInputs) -> data``, a
``check(path, turns) -> problems`` and a ``sniff(Sample) -> float`` function,
plus one entry here (or in a plugin's ``apcir.formats`` entry point). ``build``
returns a dict (written as JSON), a list of dicts (written as JSONL) or a
string (written as it is, e.g. a TREC run). Everything that differs between
iKAT years is the year's format: its entry (year, run types, what its
validator reads) and its module (its fields and rules). A format of no iKAT year
(``year = None``) is accepted whatever the topics' year.

``apcir validate`` without ``--format`` asks every format how sure it is that a
file is one of its own (:meth:`FormatSpec.detect`) and takes the surest
(:func:`detect_format`): no format, year or file suffix is assumed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from apcir.errors import ApcirError
from apcir.registry import Registry, call_ref


@dataclass(frozen=True)
class FormatSpec:
    name: str
    description: str
    suffix: str
    year: int | None
    build: str
    check: str
    run_types: tuple[str, ...]
    """The run types the organisers' validator accepts."""
    passage_text: bool
    """Whether the responses' provenance carries passage texts (so a missing text is an incomplete submission)."""
    sniff: str | None = None
    """``module:function(Sample) -> float``: how sure the format is that a file is its own (:meth:`detect`);
    None: never recognised (give ``--format``)."""
    reader: str = "its validator cannot read them"
    """What the organisers' validator of this year reads, said when the topics are of another year."""

    def call(self, which: Literal["build", "check", "sniff"], *args: Any) -> Any:
        return call_ref(getattr(self, which), *args)

    def detect(self, sample: Sample) -> float:
        """How sure this format is that ``sample`` is one of its files: 0 (not its file) to 1 (its own marker).

        A sure sign of the format (a field only it has) is 1; a shape it shares with another format is less
        (:data:`SHARED`, :data:`FALLBACK`), so that the format whose sign is there wins."""
        if self.sniff is None:
            return 0.0
        return float(self.call("sniff", sample))

    def year_problem(self, topics_year: int | None) -> str | None:
        """Why this format's validator cannot read submissions for topics of ``topics_year``; None if it fits (a
        format of no iKAT year, such as a TREC run, fits any topics)."""
        if topics_year is None or self.year is None or topics_year == self.year:
            return None
        fitting = format_of_year(topics_year)
        use = (f"use {fitting}, the format of these topics" if fitting is not None else
               f"no registered format is of iKAT {topics_year} ({', '.join(FORMATS.names())})")
        return f"{self.name} is the iKAT {self.year} format but the topics are iKAT {topics_year} topics: " \
               f"{self.reader}; {use}"


SURE, SHARED, FALLBACK = 1.0, 0.75, 0.5
"""What a ``sniff`` returns: its format's own marker; a shape that marks it unless another format's marker is
there; the format a file of that shape is when nothing else tells."""


@dataclass
class Sample:
    """A file as the formats' ``sniff`` functions look at it: read once, parsed at most once."""

    path: Path
    text: str
    """The whole text, decoded (a UTF-8 byte-order mark dropped), leading white space removed."""
    _errors: dict[str, ApcirError] = field(default_factory=dict, repr=False)

    @cached_property
    def document(self) -> Any:
        """The text as one JSON value, or None when it is not one (:attr:`json_error` says why)."""
        from apcir.io import json_loads

        try:
            return json_loads(self.text, self.path)
        except ApcirError as exc:
            self._errors["document"] = exc
            return None

    @property
    def json_error(self) -> ApcirError | None:
        """Why the text is not one JSON value (after :attr:`document` was asked for)."""
        return self._errors.get("document")

    @cached_property
    def first_line(self) -> str:
        return self.text.split("\n", 1)[0].strip()

    @cached_property
    def first_record(self) -> Any:
        """The first line as a JSON value, or None when it is not one."""
        try:
            return json.loads(self.first_line)
        except (ValueError, RecursionError):
            return None

    @property
    def json_lines(self) -> bool:
        """Two or more lines that start as JSON objects (JSONL), whatever they hold."""
        return self.text.startswith("{") and "\n{" in self.text.strip()


FORMATS: Registry[FormatSpec] = Registry("submission format", "apcir.formats")
# run_types: 2023 main.py:233-235; 2024 main.py:27; 2025 validate_trec_ikat25.py:11
FORMATS.add(FormatSpec("ikat23", "iKAT 2023 JSON: PTKB provenance as ranked {id, text, score}", ".json", 2023,
                       build="apcir.submission.ikat_json:build_2023", check="apcir.submission.ikat_json:check_2023",
                       run_types=("automatic", "manual"), passage_text=True,
                       sniff="apcir.submission.ikat_json:sniff_2023",
                       reader="the organisers' 2023 validator reads only 2023_test_topics.json (25 conversations, 332 "
                              "turns; main.py:22,25,285) and PTKB provenance as {id, text, score} (run.proto:24,37-41)"))
FORMATS.add(FormatSpec("ikat24", "iKAT 2024 JSON: PTKB provenance as ids, eval_response",
                       ".json", 2024, build="apcir.submission.ikat_json:build_2024",
                       check="apcir.submission.ikat_json:check_2024",
                       run_types=("automatic", "manual", "only_response"), passage_text=True,
                       sniff="apcir.submission.ikat_json:sniff_2024",
                       reader="the organisers' 2024 validator reads only 2024_test_topics.json (17 conversations, 218 "
                              "turns, turn ids <int>_<int>; main.py:22,25,200-207,310)"))
FORMATS.add(FormatSpec("ikat25", "iKAT 2025 JSONL: references, responses with citations", ".jsonl", 2025,
                       build="apcir.submission.ikat2025:build", check="apcir.submission.ikat2025:check",
                       run_types=("automatic", "manual", "generation-only"), passage_text=False,
                       sniff="apcir.submission.ikat2025:sniff",
                       reader="the organisers' 2025 validator takes only topics of the 2025 schema, with 'responses' "
                              "(validate_trec_ikat25.py:24-30)"))
FORMATS.add(FormatSpec("trec", "a TREC run file: the fused run alone (turn Q0 passage rank score tag)", ".run", None,
                       build="apcir.submission.trec_run:build", check="apcir.submission.trec_run:check",
                       run_types=("automatic", "manual"), passage_text=False,
                       sniff="apcir.submission.trec_run:sniff"))


def format_of_year(year: int) -> str | None:
    """The format of the iKAT ``year`` (the one its organisers' validator reads), or None when none is registered."""
    return next((spec.name for spec in FORMATS if spec.year == year), None)


def format_for_year(year: int) -> str:
    """The format of the iKAT ``year``; a year no format is of is an error naming the registered ones."""
    name = format_of_year(year)
    if name is None:
        raise ValueError(f"no submission format for iKAT {year}")
    return name


def detect_format(path: Path) -> str:
    """The format whose ``sniff`` is surest that ``path`` is its file (a tie: the one registered first)."""
    from apcir.console import warn
    from apcir.io import read_text

    text = read_text(path, "submission").lstrip() if path.exists() else ""
    if not text:
        raise ApcirError("submission file is missing or empty", path=path)
    sample = Sample(path, text)
    best, best_score = None, 0.0
    for spec in FORMATS:
        try:
            score = spec.detect(sample)
        except Exception as exc:  # a plugin's sniff must not stop the others: say which and why
            warn(f"the {spec.name} format could not look at the file: {type(exc).__name__}: {exc}")
            continue
        if score > best_score:
            best, best_score = spec.name, score
    if best is not None:
        return best
    if sample.json_error is not None and text[:1] in "{[":
        raise sample.json_error  # it means to be JSON: where it breaks is what to fix
    raise ApcirError(f"not a submission of a known format ({', '.join(FORMATS.names())}); give --format",
                     path=path)
