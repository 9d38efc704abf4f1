"""The submission formats: the single source of the names ``export.format`` / ``--format`` accept.

A format is a module with a ``build(SubmissionInputs) -> data`` and a
``check(path, turns) -> problems`` function, plus one entry here. ``build``
returns a dict (written as JSON), a list of dicts (written as JSONL) or a
string (written as it is, e.g. a TREC run). A format of no iKAT year
(``year = None``) is accepted whatever the topics' year; ``detect`` recognises
its files for ``apcir validate`` without ``--format``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

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
    detect: str | None = None
    """``module:function(path) -> bool``: whether a file is in this format (tried before the iKAT shapes)."""

    def call(self, which: Literal["build", "check", "detect"], *args: Any) -> Any:
        return call_ref(getattr(self, which), *args)


FORMATS: Registry[FormatSpec] = Registry("submission format", "apcir.formats")
# run_types: 2023 main.py:233-235; 2024 main.py:27; 2025 validate_trec_ikat25.py:11
FORMATS.add(FormatSpec("ikat23", "iKAT 2023 JSON: PTKB provenance as ranked {id, text, score}", ".json", 2023,
                       build="apcir.submission.ikat_json:build_2023", check="apcir.submission.ikat_json:check_2023",
                       run_types=("automatic", "manual"), passage_text=True))
FORMATS.add(FormatSpec("ikat24", "iKAT 2024 JSON: PTKB provenance as ids, eval_response",
                       ".json", 2024, build="apcir.submission.ikat_json:build_2024",
                       check="apcir.submission.ikat_json:check_2024",
                       run_types=("automatic", "manual", "only_response"), passage_text=True))
FORMATS.add(FormatSpec("ikat25", "iKAT 2025 JSONL: references, responses with citations", ".jsonl", 2025,
                       build="apcir.submission.ikat2025:build", check="apcir.submission.ikat2025:check",
                       run_types=("automatic", "manual", "generation-only"), passage_text=False))
FORMATS.add(FormatSpec("trec", "a TREC run file: the fused run alone (turn Q0 passage rank score tag)", ".run", None,
                       build="apcir.submission.trec_run:build", check="apcir.submission.trec_run:check",
                       run_types=("automatic", "manual"), passage_text=False,
                       detect="apcir.submission.trec_run:looks_like"))


def format_for_year(year: int) -> str:
    """The format of the iKAT ``year`` (the one its organisers' validator reads)."""
    for spec in FORMATS:
        if spec.year == year:
            return spec.name
    raise ValueError(f"no submission format for iKAT {year}")
