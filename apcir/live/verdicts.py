"""What the simulated user thought of each answer: the rubric it pursued and its 0-5 score (``apcir live-report``).

iKAT's interactive users are planning users (the organisers' ``PlanningBasedUserSimulator``): the user of a topic
works through the topic's rubric questions in order, opening with the first; an LLM scores each answer 0-5 against
the question the user pursued; above the threshold (3, the organisers' ``rubric_threshold``) the user moves to the
next question, else asks again, up to 3 tries (``num_retries``); grading that fails gives no score (null), which
counts as a try; when no question is left the user closes the topic (the closing words, answered by nothing).

Where the scores are, read as they are:

- **a published 2025 run** (``interactive/runs/trec-ikat25-runs/*.jsonl`` of ``irlabamsterdam/ikat2025``): each
  record carries ``user_rubrik`` (the question this record's utterance pursued) and ``user_rubrik_score`` (the
  score of *this record's* answer); the topic's closing record has ``user_rubrik`` and ``text`` null (its score
  repeats the last answer's: it is not an answer);
- **the server's own store** (``run/dump``, ``dump.jsonl`` of ``apcir converse``): each request record carries the
  ``user_meta`` of the *next* utterance (the organisers' ``run_router.continue_conversation`` stores
  ``session.user_meta[-2]``): ``rubric_score``, the score of this record's answer, and ``rubric``, the question
  the next utterance pursues; the record answered last before the closing words, and the closing record (null
  ``assistant_text``), carry ``rubric_score`` only. The first utterance's question is in no record: it is the
  topic's first rubric (the rubrics file);
- **a reply's** ``user_meta`` (a server that sends it, e.g. ``apcir simulate-user --send-verdicts``, as journaled
  by ``apcir converse``): the current utterance's ``rubric``, and ``rubric_score`` of the answer before it. Read
  for a live run directory whose dump carries no scores (a debug run has no dump).

Definitions (per topic): a rubric is **reached** when the user pursued it at least once (an answer was given to an
utterance pursuing it) and **covered** when an answer to it scored above the threshold; **tries** are the answers
given while the user pursued it; the **mean score** is over the answers that got a score (a null score is a try,
not in the mean, and counted apart). A total over all the topics' rubrics that counts an unreached rubric as 0
(the 2026 results' total) favours a system whose conversations ran longer: it is reported only labelled as such,
beside the coverage.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from apcir.errors import ApcirError
from apcir.io import iter_jsonl, read_json
from apcir.live.users import PASS_SCORE, RUBRICS
from apcir.metrics.significance import Comparison, SignificanceSettings, compare_with

THRESHOLD = PASS_SCORE
"""An answer scored above this covers the rubric (the organisers' ``rubric_threshold``)."""
JOURNAL = "conversation.jsonl"
DUMP = "dump.jsonl"
"""A live run directory's journal and the server's record (the names :mod:`apcir.live.converse` writes)."""
Kind = Literal["published", "dump", "live"]
KIND_LABELS = {"published": "a published interactive run", "dump": "a run/dump record",
               "live": "a live run directory"}


class Verdict(BaseModel):
    """One answer as the simulated user judged it."""

    model_config = ConfigDict(frozen=True)

    topic: str
    number: int = Field(description="the answer's place in its topic, 1-based (the turn number of its utterance)")
    utterance: str
    rubric: str | None = Field(description="the rubric question the answered utterance pursued (None: not known)")
    score: int | None = Field(description="the user's 0-5 score of the answer (None: grading failed, or none given)")
    text: str = ""


class TopicVerdicts(BaseModel):
    model_config = ConfigDict(frozen=True)

    topic: str
    answers: list[Verdict]
    closed: bool = Field(description="the user's closing words are recorded (the user ended the topic)")


class RunVerdicts(BaseModel):
    """A run's verdicts, read from one of the three sources (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    name: str
    path: str
    kind: Kind
    scored: bool = Field(description="the records carry the user's scores (rubric_score / user_rubrik_score)")
    source: str = Field("", description="where the scores were read from")
    topics: list[TopicVerdicts]

    def by_turn(self) -> dict[str, Verdict]:
        """Each answer by the turn id ``{topic}_{number}`` (``apcir converse``'s ids)."""
        return {f"{v.topic}_{v.number}": v for t in self.topics for v in t.answers}


class TopicReport(BaseModel):
    topic: str
    rubrics_total: int | None = Field(description="the topic's rubrics in the rubrics file, and any rubric pursued "
                                                  "that the file does not list (None: the file lists no such topic)")
    rubrics_reached: int = Field(description="rubrics the user pursued at least once")
    rubrics_covered: int = Field(description="rubrics whose answer scored above the threshold at least once")
    tries: dict[str, int] = Field(description="rubric -> answers given while the user pursued it, in order")
    best: dict[str, int | None] = Field(description="rubric -> its best score (None: no try was scored)")
    answers: int
    scored: int = Field(description="answers with a score")
    nulls: int = Field(description="answers without a score (grading failed): tries, not in the mean")
    mean_score: float | None
    above: int = Field(description="answers scored above the threshold")
    share_above: float | None = Field(description="above / scored")
    turns: int = Field(description="the user's utterances: the answers plus the closing words when recorded")
    closed: bool
    unlisted: list[str] = Field(default_factory=list, description="rubrics pursued that the file does not list")


class RunTotals(BaseModel):
    topics: int
    answers: int
    scored: int
    nulls: int
    mean_score: float | None = Field(description="over every scored answer of the run")
    above: int
    share_above: float | None
    rubrics_total: int = Field(description="the rubrics of the topics played that the rubrics file lists")
    unlisted_topics: list[str] = Field(default_factory=list, description="topics the rubrics file does not list: "
                                       "out of the coverage totals")
    rubrics_reached: int
    rubrics_covered: int
    mean_best_reached: float | None = Field(description="the best score per reached rubric with a score, averaged")
    mean_best_unreached_as_0: float | None = Field(
        description="the best score per rubric over rubrics_total, an unreached (or never scored) rubric counted "
                    "as 0: the 2026 results' total, which favours longer conversations")


class RunReport(BaseModel):
    name: str
    path: str
    kind: Kind
    scored: bool
    source: str
    threshold: int
    topics: dict[str, TopicReport]
    totals: RunTotals


# ---- the rubrics ----------------------------------------------------------------------------------------
def load_rubrics(path: Path | None = None) -> dict[str, list[str]]:
    """``{topic: [rubric questions, in the order the user pursues them]}`` (default: the bundled 2025 file)."""
    where = path or RUBRICS
    data = read_json(where, "rubrics file")
    if not isinstance(data, dict) or not all(isinstance(v, list) and all(isinstance(q, str) for q in v)
                                             for v in data.values()):
        raise ApcirError("a rubrics file is a JSON object {topic_id: [rubric questions]}", path=where)
    return {str(k): list(v) for k, v in data.items()}


def rubric_key(text: str) -> str:
    """A rubric's identity: its words, whatever the spacing and case (the published records keep the file's
    double spaces; another writer may not)."""
    return " ".join(text.split()).casefold()


# ---- reading --------------------------------------------------------------------------------------------
def _score(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and (
            math.isnan(value) or value != int(value))):
        raise ApcirError(f"{where}: a score is a whole number 0-5 or null, not {json.dumps(value)}")
    return int(value)


def _rubric(value: Any) -> str | None:
    return None if value is None else str(value)


def _topic_and_number(topic_id: Any, where: str) -> tuple[str, int]:
    topic, sep, number = str(topic_id or "").rpartition("_")
    if not sep or not topic or not number.isdigit():
        raise ApcirError(f"{where}: metadata.topic_id {json.dumps(topic_id)} is not {{topic}}_{{n}}")
    return topic, int(number)


def _grouped(rows: Iterable[tuple[str, Any]]) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = {}
    for topic, row in rows:
        grouped.setdefault(topic, []).append(row)
    return grouped


def read_published(path: Path, name: str | None = None) -> RunVerdicts:
    """A published 2025 interactive run: ``user_rubrik`` and ``user_rubrik_score`` rate each record's own answer."""
    rows = []
    scored = False
    for line, record in iter_jsonl(path, "interactive run"):
        response = _first_response(record, path, line)
        topic, number = _topic_and_number((record.get("metadata") or {}).get("topic_id"), f"{path}:{line}")
        scored = scored or "user_rubrik_score" in response
        rows.append((topic, (number, line, response)))
    topics = []
    for topic, entries in _grouped(rows).items():
        answers, closed = [], False
        for number, line, response in sorted(entries, key=lambda e: e[0]):
            if response.get("text") is None:  # the user's closing words: no answer
                closed = True
                continue
            answers.append(Verdict(topic=topic, number=number, utterance=str(response.get("user_utterance") or ""),
                                   rubric=_rubric(response.get("user_rubrik")) if scored else None,
                                   score=_score(response.get("user_rubrik_score"), f"{path}:{line}"),
                                   text=str(response.get("text"))))
        topics.append(TopicVerdicts(topic=topic, answers=answers, closed=closed))
    return RunVerdicts(name=name or path.stem, path=str(path), kind="published", scored=scored,
                       source="user_rubrik and user_rubrik_score of each record" if scored else "", topics=topics)


def _first_response(record: dict[str, Any], path: Path, line: int) -> dict[str, Any]:
    responses = record.get("responses")
    if not isinstance(responses, list) or not responses or not isinstance(responses[0], dict):
        raise ApcirError("expected a record with a non-empty list of responses", path=path, line=line)
    return responses[0]


def _meta(response: dict[str, Any]) -> dict[str, Any]:
    meta = response.get("user_meta")
    return meta if isinstance(meta, dict) else {}


def verdicts_of_dump(records: list[dict[str, Any]], rubrics: dict[str, list[str]], *, name: str, path: str,
                     kind: Kind = "dump") -> RunVerdicts:
    """The server's record (``run/dump``): a record's ``user_meta.rubric_score`` rates its own answer, its
    ``rubric`` is the next utterance's; the first utterance pursues the topic's first rubric."""
    scored = any("rubric_score" in _meta(r) or "rubric" in _meta(r)
                 for record in records for r in (record.get("responses") or [])[:1] if isinstance(r, dict))
    rows = []
    for index, record in enumerate(records, 1):
        response = _first_response(record, Path(path), index)
        topic, number = _topic_and_number((record.get("metadata") or {}).get("topic_id"), f"{path}:{index}")
        rows.append((topic, (number, index, response)))
    topics = []
    for topic, entries in _grouped(rows).items():
        ordered = sorted(entries, key=lambda e: e[0])
        answered = [e for e in ordered if e[2].get("assistant_text") is not None]
        listed = rubrics.get(topic) or []
        first = listed[0] if scored and listed else None
        answers = []
        for i, (number, index, response) in enumerate(answered):
            rubric = first if i == 0 or not scored else _rubric(_meta(answered[i - 1][2]).get("rubric"))
            answers.append(Verdict(topic=topic, number=number, utterance=str(response.get("user_utterance") or ""),
                                   rubric=rubric, score=_score(_meta(response).get("rubric_score"),
                                                               f"{path}:{index}"),
                                   text=str(response.get("assistant_text"))))
        topics.append(TopicVerdicts(topic=topic, answers=answers, closed=len(answered) < len(ordered)))
    source = "user_meta of the server's record (run/dump): each record's rubric_score, the next one's rubric"
    return RunVerdicts(name=name, path=path, kind=kind, scored=scored, source=source if scored else "",
                       topics=topics)


def read_dump(path: Path, rubrics: dict[str, list[str]], name: str | None = None) -> RunVerdicts:
    records = [record for _, record in iter_jsonl(path, "run/dump record")]
    return verdicts_of_dump(records, rubrics, name=name or path.stem, path=str(path))


def _replies(journal: Path) -> list[dict[str, Any]]:
    """The journal's utterances (the server's replies), each once, in order (a resumed run journals a reply
    again; a killed run may have torn the last line)."""
    seen, replies = set(), []
    for _, entry in iter_jsonl(journal, "journal", skip_malformed=True):
        reply = entry.get("reply") if entry.get("event") == "utterance" else None
        if not isinstance(reply, dict):
            continue
        key = (reply.get("topic_id"), reply.get("user_id"), len(reply.get("history") or []))
        if key not in seen:
            seen.add(key)
            replies.append(reply)
    return replies


def verdicts_of_replies(replies: list[dict[str, Any]], *, name: str, path: str) -> RunVerdicts:
    """A reply's ``user_meta``: its utterance's ``rubric``, and ``rubric_score`` of the answer before it."""
    scored = any("rubric_score" in _meta(r) or "rubric" in _meta(r) for r in replies)
    topics = []
    for topic, entries in _grouped((str(r.get("topic_id")), r) for r in replies).items():
        answers: list[Verdict] = []
        closed = False
        for i, reply in enumerate(entries):
            if reply.get("last_response_of_session"):
                closed = True
                continue
            following = entries[i + 1] if i + 1 < len(entries) else None
            if following is None:  # not answered yet, or its answer not recorded
                continue
            history = following.get("history") or []
            text = next((str(m.get("content")) for m in reversed(history[:-1]) if isinstance(m, dict)
                         and m.get("role") == "assistant"), "")
            answers.append(Verdict(topic=topic, number=len(answers) + 1, utterance=str(reply.get("utterance") or ""),
                                   rubric=_rubric(_meta(reply).get("rubric")) if scored else None,
                                   score=_score(_meta(following).get("rubric_score"), f"{path}: {topic}"),
                                   text=text))
        topics.append(TopicVerdicts(topic=topic, answers=answers, closed=closed))
    source = "user_meta of the server's replies (the journal): each utterance's rubric, the next one's rubric_score"
    return RunVerdicts(name=name, path=path, kind="live", scored=scored, source=source if scored else "",
                       topics=topics)


def read_live(folder: Path, rubrics: dict[str, list[str]], name: str | None = None) -> RunVerdicts:
    """A live run directory of ``apcir converse``: the server's record (``dump.jsonl``) where it carries scores,
    else the journal's replies where they do; else the record there is, without scores."""
    dump, journal = folder / DUMP, folder / JOURNAL
    if not dump.exists() and not journal.exists():
        raise ApcirError(f"not a live run directory of apcir converse (no {JOURNAL} or {DUMP})", path=folder)
    label = name or folder.name
    from_dump = None
    if dump.exists():
        from_dump = verdicts_of_dump([r for _, r in iter_jsonl(dump, "run/dump record")], rubrics, name=label,
                                     path=str(folder), kind="live")
        if from_dump.scored:
            return from_dump
    if journal.exists():
        from_replies = verdicts_of_replies(_replies(journal), name=label, path=str(folder))
        if from_replies.scored or from_dump is None:
            return from_replies
    assert from_dump is not None
    return from_dump


def read_verdicts(path: Path, rubrics: dict[str, list[str]], name: str | None = None) -> RunVerdicts:
    """A live run directory, a ``run/dump`` NDJSON file or a published 2025 interactive run, told by its content."""
    if path.is_dir():
        return read_live(path, rubrics, name)
    if not path.exists():
        raise ApcirError("not found: expected a live run directory, a run/dump file or a published interactive run",
                         path=path)
    first = next((record for _, record in iter_jsonl(path, "run record")), None)
    if first is None:
        raise ApcirError("empty: no record to report on", path=path)
    responses = first.get("responses")
    response = responses[0] if isinstance(responses, list) and responses and isinstance(responses[0], dict) else {}
    if "assistant_text" in response:
        return read_dump(path, rubrics, name)
    if "text" in response and ("user_rubrik" in response or (first.get("metadata") or {}).get("type")
                               == "interactive"):
        return read_published(path, name)
    raise ApcirError("neither a run/dump record (responses[0].assistant_text) nor a published interactive run "
                     "(responses[0].text with user_rubrik)", path=path, line=1)


# ---- the report -----------------------------------------------------------------------------------------
def _mean(values: list[int] | list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def report_topic(topic: TopicVerdicts, rubrics: list[str] | None, threshold: int = THRESHOLD) -> TopicReport:
    """One topic's coverage and scores (the definitions: the module docstring)."""
    listed = {rubric_key(q): q for q in rubrics or []}
    tries: dict[str, int] = {}
    best: dict[str, int | None] = {}
    for answer in topic.answers:
        if answer.rubric is None:
            continue
        label = listed.get(rubric_key(answer.rubric), answer.rubric)
        tries[label] = tries.get(label, 0) + 1
        if answer.score is not None:
            best[label] = max(best.get(label) or 0, answer.score)
        else:
            best.setdefault(label, None)
    scores = [a.score for a in topic.answers if a.score is not None]
    above = sum(s > threshold for s in scores)
    unlisted = [r for r in tries if rubrics is not None and rubric_key(r) not in listed]
    return TopicReport(
        topic=topic.topic, rubrics_total=len(rubrics) + len(unlisted) if rubrics is not None else None,
        rubrics_reached=len(tries), rubrics_covered=sum((b or 0) > threshold for b in best.values()),
        tries=tries, best=best, answers=len(topic.answers), scored=len(scores),
        nulls=len(topic.answers) - len(scores), mean_score=_mean(scores), above=above,
        share_above=above / len(scores) if scores else None, turns=len(topic.answers) + topic.closed,
        closed=topic.closed, unlisted=unlisted)


def report(run: RunVerdicts, rubrics: dict[str, list[str]], threshold: int = THRESHOLD) -> RunReport:
    """The run's report: per topic, and the totals (coverage over the topics the rubrics file lists)."""
    topics = {t.topic: report_topic(t, rubrics.get(t.topic), threshold) for t in run.topics}
    scores = [a.score for t in run.topics for a in t.answers if a.score is not None]
    above = sum(s > threshold for s in scores)
    listed = [t for t in topics.values() if t.rubrics_total is not None]
    total = sum(t.rubrics_total or 0 for t in listed)
    totals = RunTotals(
        topics=len(topics), answers=sum(t.answers for t in topics.values()), scored=len(scores),
        nulls=sum(t.nulls for t in topics.values()), mean_score=_mean(scores), above=above,
        share_above=above / len(scores) if scores else None, rubrics_total=total,
        rubrics_reached=sum(t.rubrics_reached for t in listed),
        rubrics_covered=sum(t.rubrics_covered for t in listed),
        unlisted_topics=[t.topic for t in topics.values() if t.rubrics_total is None],
        mean_best_reached=_mean([b for t in topics.values() for b in t.best.values() if b is not None]),
        mean_best_unreached_as_0=(sum(b or 0 for t in listed for b in t.best.values()) / total
                                  if total and run.scored else None))
    return RunReport(name=run.name, path=run.path, kind=run.kind, scored=run.scored, source=run.source,
                     threshold=threshold, topics=topics, totals=totals)


# ---- comparing runs -------------------------------------------------------------------------------------
BEST = "best score (unreached 0)"
COVERED = "covered (0/1)"
MEASURES = [BEST, COVERED]


class RubricComparison(BaseModel):
    """Each run against the first, paired over rubrics: the rubrics either run reached on the topics both
    played, a rubric one run did not reach counted as 0 (its best score) and not covered."""

    baseline: str
    topics: list[str]
    rubrics: int
    tests: list[Comparison]
    caption: str


def rubric_values(run: RunReport, topics: Iterable[str], threshold: int) -> dict[str, dict[str, float]]:
    """``{topic/rubric: {measure: value}}`` over the rubrics ``run`` reached in ``topics``."""
    values = {}
    for topic in topics:
        for rubric, best in run.topics[topic].best.items():
            values[f"{topic}/{rubric_key(rubric)}"] = {BEST: float(best or 0), COVERED: float((best or 0) > threshold)}
    return values


def compare(reports: list[RunReport], settings: SignificanceSettings | None = None) -> RubricComparison | None:
    """The paired test of each run against the first (``apcir.metrics``' tests and corrections), over the union of
    the rubrics reached on the topics every run played; None for one run, or for runs without scores."""
    scored = [r for r in reports if r.scored]
    if len(scored) < 2:
        return None
    settings = settings or SignificanceSettings()
    topics = [t for t in scored[0].topics if all(t in r.topics for r in scored[1:])]
    per_run = {r.name: rubric_values(r, topics, r.threshold) for r in scored}
    union = sorted({key for values in per_run.values() for key in values})
    zero = {BEST: 0.0, COVERED: 0.0}
    paired = {name: {key: values.get(key, zero) for key in union} for name, values in per_run.items()}
    tests = compare_with(paired, scored[0].name, MEASURES, settings)
    return RubricComparison(baseline=scored[0].name, topics=topics, rubrics=len(union), tests=tests,
                            caption=settings.caption(len(scored) - 1))
