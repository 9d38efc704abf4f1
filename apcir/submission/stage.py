"""The export stage: a fused run as an iKAT submission, and the offline checks of a submission.

``apcir export`` / ``apcir validate`` and ``apcir run`` call these functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from apcir.console import shown, warn
from apcir.contract.records import Run, Turn
from apcir.contract.reformulations import ReformulationRecord
from apcir.contract.responses import ResponseRecord
from apcir.contract.runs import ranking
from apcir.contract.stage import Stage, StageContext, StageResult, an_output, not_an_input
from apcir.errors import ApcirError
from apcir.io import read_bytes, write_json, write_jsonl, write_text
from apcir.submission.common import MAX_WORDS, USED_TOP, SubmissionInputs, plan
from apcir.submission.formats import FORMATS, detect_format
from apcir.submission.settings import ExportSettings

Submission = list[dict[str, Any]] | dict[str, Any] | str


def build_submission(inputs: SubmissionInputs, fmt: str) -> Submission:
    """The submission in format ``fmt`` as JSON-ready data: a dict (JSON) or a list of lines (JSONL)."""
    return FORMATS.get(fmt).call("build", inputs)  # type: ignore[no-any-return]


def save_submission(data: Submission | str, out: Path) -> Path:
    """Write a submission atomically: JSONL for a list, text for a string (a TREC run), JSON otherwise."""
    if isinstance(data, str):
        write_text(out, data)
    elif isinstance(data, list):
        write_jsonl(out, data)
    else:
        write_json(out, data)
    return out


def text_ids(run: Run, responses: Mapping[str, ResponseRecord] | None, used_top: int) -> set[str]:
    """The passages whose texts a submission may carry: each turn's top ``used_top`` and every passage a response
    was made from (read these from the collection, and only these)."""
    ids = {p for hits in run.values() for p, _ in ranking(hits, used_top)}
    for record in (responses or {}).values():
        ids.update(record.passages)
    return ids


def check_inputs(inputs: SubmissionInputs, fmt: str, *, allow_missing_text: bool = False) -> None:
    """Refuse a submission the organisers' validator cannot read or that would be incomplete; warn about what will
    not be in it (see :func:`write_submission`)."""
    spec = FORMATS.get(fmt)
    mismatch = spec.year_problem(inputs.year)
    if mismatch is not None:
        raise ApcirError(f"refusing to write it: {mismatch}")
    if inputs.run_type not in spec.run_types:
        raise ApcirError(f"run type {inputs.run_type!r} is not one the {fmt} validator accepts "
                         f"({', '.join(spec.run_types)})")
    known = {t.turn_id for t in inputs.turns}
    outside = sorted(set(inputs.run) - known)
    if inputs.run and len(outside) == len(inputs.run):
        raise ApcirError(f"none of the run's {len(inputs.run)} turn(s) is a turn of the topics ({len(known)} turns, "
                         f"e.g. run turn {outside[0]}): is this the run of these topics?")
    if outside:
        warn(f"{len(outside)} turn(s) of the run are not in the topics and are not exported: {shown(outside)}")
    absent = [t.turn_id for t in inputs.turns if not inputs.run.get(t.turn_id)]
    if absent:
        warn(f"{len(absent)} of the {len(known)} topic turn(s) have no passage in the run, so their entries cite "
             f"nothing (apcir validate reports them): {shown(absent)}")
    if not inputs.reformulations:
        warn("no reformulations given: no pseudo-response to fall back on, and PTKB provenance is ranked by BM25 "
             "against the utterance")
    else:
        lacking = sorted(t for t in known if t in inputs.run and t not in inputs.reformulations)
        if lacking:
            warn(f"{len(lacking)} turn(s) have no reformulation, so no pseudo-response and no statements used: "
                 f"{shown(lacking)}")
    if inputs.responses is not None and not known & set(inputs.responses):
        example = f", e.g. {next(iter(sorted(inputs.responses)))}" if inputs.responses else ""
        raise ApcirError(f"none of the {len(inputs.responses)} response record(s) is for a turn of the topics "
                         f"({len(known)} turns{example}): are they the responses of this run and these topics?")
    plans = plan(inputs)  # what the warnings read (the text, citations, cuts) is the same in every format
    if inputs.responses is None:
        warn("no responses given (--responses / the respond stage): the response text is the "
             f"{'pseudo-response' if inputs.mode == 'pseudo' else 'top passage'}, which cites nothing and is not "
             "grounded in the passages; the top passages are marked used")
    else:
        fell_back = sorted(t for t, p in plans.items() if p.fallback is not None)
        foreign = sorted(set(inputs.responses) - known)
        if foreign:
            warn(f"{len(foreign)} of the {len(inputs.responses)} response record(s) are for turns not in the topics "
                 f"and are not exported: {shown(foreign)}")
        if fell_back:
            warn(f"{len(fell_back)} turn(s) have no ok response record, so their text is the "
                 f"{'pseudo-response' if inputs.mode == 'pseudo' else 'top passage'} and the top passages are marked "
                 f"used: {shown(fell_back)}")
        dropped = sorted(t for t, p in plans.items() if p.dropped)
        if dropped:
            warn(f"{len(dropped)} turn(s) have responses citing passages that are not in the exported run; those "
                 f"citations were removed (was the response made from another run?): {shown(dropped)}")
    cut = sorted(t for t, p in plans.items() if p.cut)
    if cut:
        warn(f"{len(cut)} response(s) were cut to the organisers' limit of {MAX_WORDS} words: {shown(cut)}")
    if spec.passage_text or inputs.mode == "passage":
        cited = sorted({pid for p in plans.values() for pid in p.used})
        missing = [pid for pid in cited if not inputs.passages.get(pid, "").strip()]
        if missing and not allow_missing_text:
            raise ApcirError(
                f"{len(missing)} of the {len(cited)} cited passages have no text in the given collection (e.g. "
                f"{missing[0]}): the submission would be incomplete; give the collection that holds them "
                "(--collection / retrieval.passages), or pass --allow-missing-text (export.allow_missing_text)"
            )
        if missing:
            warn(f"{len(missing)} cited passage(s) have no text; `apcir validate` will flag them: {shown(missing)}")



def write_submission(inputs: SubmissionInputs, fmt: str, out: Path, *, allow_missing_text: bool = False) -> Path:
    """Build the submission in format ``fmt`` and write it atomically to ``out``.

    Refused when the format is not the topics' year's (its organisers' validator
    cannot read it) and when cited passages have no text (unless
    ``allow_missing_text``); turns of the run outside the topics, turns without
    a reformulation or a response, and responses cut to the word limit are named
    in a warning.
    """
    check_inputs(inputs, fmt, allow_missing_text=allow_missing_text)
    return save_submission(build_submission(inputs, fmt), out)


def validate_submission(path: Path, turns: list[Turn], fmt: str | None = None,
                        topics_year: int | None = None) -> list[str]:
    """Every problem found in the submission at ``path`` against the topics ``turns`` (of iKAT ``topics_year``).

    A format of another year than the topics' is one problem, and the checks against the topics stop there: every
    turn would be "not in the topics" (the organisers' validator stops there too)."""
    spec = FORMATS.get(fmt or detect_format(path))
    mismatch = spec.year_problem(topics_year)
    problems: list[str] = [f"{mismatch} [{spec.year} validator: error]"] if mismatch else []
    if spec.year is not None and read_bytes(path, "submission").startswith(b"\xef\xbb\xbf"):
        # 2023/2024 main.py json.load(f) and 2025 json.loads(line) on text read as UTF-8 raise "Unexpected UTF-8
        # BOM": the organisers' validators stop on the first byte
        problems.append(f"the file starts with a UTF-8 byte-order mark, which the {spec.year} validator's JSON parser "
                        f"refuses; save it as UTF-8 without a BOM [{spec.year} validator: error]")
    if mismatch:
        return problems
    return problems + spec.call("check", path, turns)  # type: ignore[no-any-return]


@dataclass
class ValidateStage(Stage):
    """The offline iKAT checks of an experiment's submission (:func:`validate_submission`). A submission that
    passes is not checked again until it (or the topics, or the checks) change; one with problems is checked
    again by every run, which prints them again."""

    submission: Path
    topics: Path
    turns: list[Turn]
    format: str | None
    year: int | None
    problems: list[str] = not_an_input(default_factory=list)
    """Set by :meth:`run`."""

    @property
    def name(self) -> str:
        return "validate"

    def run(self, context: StageContext) -> StageResult:
        self.problems = validate_submission(self.submission, self.turns, self.format, self.year)
        if self.problems:
            return StageResult(f"{len(self.problems)} problem(s)", unfinished=True)
        return StageResult(f"passes the offline iKAT checks ({len(self.turns)} turns)")


@dataclass
class ExportStage(Stage):
    """``submission.json`` (or ``.jsonl``): the final run, responses and PTKB provenance in the year's format."""

    code: ClassVar[tuple[str, ...]] = ("apcir.submission.common",)
    experiment: str
    fused: Path
    topics: Path
    turns: list[Turn]
    year: int
    reformulations: Path
    responses: Path
    ptkb: Path
    passages: Path | None
    export: ExportSettings
    out: Path = an_output()
    records: dict[str, ReformulationRecord] = not_an_input()

    @property
    def name(self) -> str:
        return "export"

    def run(self, context: StageContext) -> StageResult:
        from apcir.contract.responses import load_responses
        from apcir.responses.ptkb import load_ptkb_run

        fmt = self.export.format
        assert fmt is not None  # resolved by the config from the topics
        run = context.read_run(self.fused)
        answers = load_responses(self.responses)
        store = context.passage_texts()
        passages = store.texts(text_ids(run, answers, USED_TOP)) if store is not None else {}
        inputs = SubmissionInputs(run=run, turns=self.turns, run_name=self.experiment, run_type=self.export.run_type,
                                  team_id=self.export.team_id, reformulations=self.records, passages=passages,
                                  mode=self.export.text, used_top=USED_TOP, responses=answers,
                                  ptkb=load_ptkb_run(self.ptkb, self.turns), ptkb_mode=self.export.ptkb,
                                  eval_response=self.export.eval_response, year=self.year)
        write_submission(inputs, fmt, self.out, allow_missing_text=self.export.allow_missing_text)
        return StageResult(f"{fmt} submission of {len(self.turns)} turns")
