"""Response evaluation: ROUGE-L against the canonical responses, citation quality from the passage qrels, and an
optional LLM judge; each overall and per personalisation level.

- **ROUGE-L** (F-measure, Porter stemming; Google's ``rouge-score`` package) of each response, its inline
  citations removed, against the turn's canonical response in the topics. Turns without a canonical response are
  skipped and counted; topics with none at all skip ROUGE-L and say so.
- **Citation precision**: the share of a response's cited passages judged relevant (grade >= ``rel_threshold``;
  an unjudged passage counts as not relevant, as trec_eval counts it), averaged over the judged turns; a response
  citing nothing scores 0. **Relevant citation**: the share of judged turns with at least one relevant citation.
- **Judge** (:mod:`apcir.evaluation.judge`): the normalised rubric score, over the turns the judge scored;
  unjudged turns are counted and listed, never scored 0.

Failed response records are not scored; they are counted (``failed``). Nor are empty ones (``ok`` records with no
text once their citations are removed): they are counted (``empty``), and a warning names them.

**Several runs** (:func:`compare_response_runs`): each run's measures as above, and with a baseline run, a paired
test of every other run against it per measure, over the turns both runs have that measure for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from statistics import fmean

from pydantic import BaseModel, Field

from apcir.console import shown, warn
from apcir.contract.records import Qrels, Turn
from apcir.contract.responses import ResponseRecord, cited_numbers, strip_citations
from apcir.errors import ApcirError
from apcir.evaluation.judge import judge_all
from apcir.evaluation.nuggets.gold import NuggetSet
from apcir.evaluation.nuggets.settings import MatcherSettings
from apcir.ids import natural_key
from apcir.llm.settings import LLMSettings
from apcir.metrics import Comparison, SignificanceSettings, check_judged, compare_with

ROUGE, PRECISION, HIT, JUDGE, NUGGETS = ("ROUGE-L", "citation precision", "relevant citation", "judge",
                                        "nugget recall")
MEASURES = (ROUGE, PRECISION, HIT, JUDGE, NUGGETS)


class JudgeInfo(BaseModel):
    model: str
    judged: int
    unjudged: dict[str, str] = Field(default_factory=dict, description="turn -> why the judge's answer was unusable")
    requests: int = 0
    cache_hits: int = 0
    repairs: int = 0
    cost_usd: float | None = None
    aspects: dict[str, list[tuple[str, int]]] = Field(default_factory=dict, description="turn -> (aspect, 0-2)")


class NuggetInfo(BaseModel):
    """Which nuggets each response covered (``[evaluation] nuggets``): for the report and the inspector."""

    nuggets: str
    matcher: str
    tau: float
    covered: dict[str, list[str]] = Field(default_factory=dict, description="turn -> ids of the covered nuggets")
    total: dict[str, int] = Field(default_factory=dict, description="turn -> its number of nuggets")


class ResponseMetrics(BaseModel):
    """Every response measure of one responses file, overall, per level and per turn."""

    responder: str
    topics: str
    qrels: str | None
    rel_threshold: int
    measures: dict[str, float] = Field(description="means over the turns each measure could score")
    turns: dict[str, int] = Field(description="how many turns each mean is over, and the bookkeeping counts")
    per_level: dict[str, dict[str, float]] = Field(default_factory=dict)
    level_turns: dict[str, dict[str, int]] = Field(default_factory=dict)
    per_turn: dict[str, dict[str, float]] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    judge: JudgeInfo | None = None
    nuggets: NuggetInfo | None = None


def rouge_l(pairs: Sequence[tuple[str, str]]) -> list[float]:
    """ROUGE-L F-measure of each (response, reference), with Porter stemming."""
    try:
        from rouge_score import rouge_scorer
    except ImportError:  # pragma: no cover - a core dependency
        raise ApcirError("ROUGE-L needs the rouge-score package: pip install rouge-score") from None
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return [scorer.score(reference, response)["rougeL"].fmeasure for response, reference in pairs]


def evaluate_responses(
    responses: Mapping[str, ResponseRecord],
    turns: Sequence[Turn],
    *,
    topics: str,
    qrels: Qrels | None = None,
    qrels_name: str | None = None,
    rel_threshold: int = 1,
    levels: Mapping[str, str] | None = None,
    judge_model: str | None = None,
    judge_settings: LLMSettings | None = None,
    references: Mapping[str, str] | None = None,
    nuggets: NuggetSet | None = None,
    matcher: str = "embedding",
    matcher_settings: MatcherSettings | None = None,
    aspects: Mapping[str, Sequence[str]] | None = None,
    run_name: str | None = None,
) -> ResponseMetrics:
    """The response measures of ``responses`` for the topic turns ``turns`` (see the module docstring).

    ``references``: each turn's canonical response, when not the topics' own (``datasets.reference_responses``
    gives the NIST gold responses of ``ikat25-test``). ``nuggets``: score each response's nugget recall with
    ``matcher`` (:mod:`apcir.evaluation.nuggets.scores`), over the turns that have nuggets. ``run_name``: the run's
    name, for the warnings, when several runs are evaluated."""
    if references is not None:
        turns = [t.model_copy(update={"response": references.get(t.turn_id, t.response)}) for t in turns]
    in_topics = [t for t in turns if t.turn_id in responses]
    if not in_topics:
        raise ApcirError(f"no response is for a turn of {topics} ({len(responses)} responses): are these the topics "
                         "the responses were made for?")
    ok = [t for t in in_topics if responses[t.turn_id].status == "ok" and strip_citations(responses[t.turn_id].text)]
    empty = [t.turn_id for t in in_topics
             if responses[t.turn_id].status == "ok" and not strip_citations(responses[t.turn_id].text)]
    per_turn: dict[str, dict[str, float]] = {t.turn_id: {} for t in ok}
    notes: list[str] = []
    counts = {"responses": len(in_topics), "ok": len(ok), "failed": len(in_topics) - len(ok) - len(empty),
              "empty": len(empty), "not in the topics": len(set(responses) - {t.turn_id for t in turns})}
    if counts["failed"]:
        notes.append(f"{counts['failed']} failed response(s) are not scored")
    if empty:
        of_run = f" of run {run_name}" if run_name else ""
        warn(f"{len(empty)} empty response(s){of_run} (turns {shown(empty, 5)}): not scored, as failed ones are not")
        notes.append(f"{len(empty)} empty response(s) are not scored")
    _check_records(responses, ok, {t.turn_id for t in turns}, topics, run_name)
    # ROUGE-L
    with_reference = [t for t in ok if t.response.strip()]
    if not any(t.response.strip() for t in turns):
        notes.append(f"ROUGE-L skipped: the topics ({topics}) have no canonical responses")
        with_reference = []
    else:
        if len(with_reference) < len(ok):
            notes.append(f"ROUGE-L: {len(ok) - len(with_reference)} turn(s) without a canonical response skipped")
        scores = rouge_l([(strip_citations(responses[t.turn_id].text), t.response) for t in with_reference])
        for turn, score in zip(with_reference, scores):
            per_turn[turn.turn_id][ROUGE] = score
    # citations
    if qrels is None:
        notes.append("citation precision skipped: no passage qrels given")
    else:
        judged = [t for t in ok if t.turn_id in qrels]
        if not judged:
            notes.append(f"citation precision skipped: no response is for a turn judged in {qrels_name}")
        check_judged({t.turn_id: dict.fromkeys(responses[t.turn_id].citations, 0.0) for t in judged}, qrels,
                     qrels_name or "the qrels", "the responses'", "cited passages")
        for turn in judged:
            cited = responses[turn.turn_id].citations
            relevant = [p for p in cited if qrels[turn.turn_id].get(p, 0) >= rel_threshold]
            per_turn[turn.turn_id][PRECISION] = len(relevant) / len(cited) if cited else 0.0
            per_turn[turn.turn_id][HIT] = 1.0 if relevant else 0.0
        uncited = sum(1 for t in judged if not responses[t.turn_id].citations)
        if uncited:
            notes.append(f"{uncited} judged turn(s) cite no passage (citation precision 0)")
    # judge
    info = None
    if judge_model is not None:
        given = aspects or {}
        pairs = [(t, responses[t.turn_id]) for t in ok if t.response.strip() or t.turn_id in given]
        if not pairs:
            notes.append("judge skipped: no response has a canonical response or given aspects to judge by")
        elif given:
            notes.append(f"judge: {sum(1 for t, _ in pairs if t.turn_id in given)} turn(s) scored on the "
                         "aspects the dataset gives (0-2 each, normalised by 2, averaged)")
        run = judge_all(pairs, judge_model, judge_settings or LLMSettings(), given or None)
        for turn_id, judgement in run.judgements.items():
            per_turn[turn_id][JUDGE] = judgement.score
        usage = run.accounting.summary()
        costs = [u.cost_usd for u in usage if u.cost_usd is not None]
        info = JudgeInfo(model=judge_model, judged=len(run.judgements), unjudged=run.unjudged,
                         requests=sum(u.requests for u in usage), cache_hits=sum(u.cache_hits for u in usage),
                         repairs=sum(u.repairs for u in usage), cost_usd=sum(costs) if costs else None,
                         aspects={t: j.aspects for t, j in sorted(run.judgements.items())})
        if run.unjudged:
            first = sorted(run.unjudged)[0]
            notes.append(f"judge: {len(run.unjudged)} turn(s) unjudged (not scored; the request failed, or the answer "
                         f"was unusable after one repair): {', '.join(sorted(run.unjudged)[:10])}; "
                         f"{first}: {run.unjudged[first][:200]}")
    nugget_info = None
    if nuggets is not None:
        from apcir.evaluation.nuggets.scores import match, run_scores

        texts = {t.turn_id: strip_citations(responses[t.turn_id].text) for t in ok if t.turn_id in nuggets.by_turn}
        if not texts:
            notes.append(f"nugget recall skipped: no response is for a turn of the nuggets ({nuggets.name})")
        else:
            subset = nuggets.model_copy(update={"by_turn": {t: nuggets.by_turn[t] for t in texts}})
            matched, used = match(subset, {"run": texts}, matcher, matcher_settings or MatcherSettings(matcher=matcher))
            scored = run_scores("run", subset, matched["run"], used.tau)
            for turn_id, values in scored.per_turn.items():
                per_turn[turn_id][NUGGETS] = values.recall
            nugget_info = NuggetInfo(nuggets=nuggets.name, matcher=matcher, tau=used.tau,
                                     covered={t: v.covered for t, v in scored.per_turn.items()},
                                     total={t: v.total for t, v in scored.per_turn.items()})
            lacking = len(nuggets.by_turn) - len(texts)
            if lacking:
                notes.append(f"nugget recall over the {len(texts)} turn(s) with a response; {lacking} turn(s) of "
                             f"the nuggets have none here")
    measures, turn_counts = _means(per_turn.values())
    per_level: dict[str, dict[str, float]] = {}
    level_turns: dict[str, dict[str, int]] = {}
    by_level = dict(levels or {})
    if levels is not None:
        covered = sum(1 for t in per_turn if t in by_level)
        if not covered:
            raise ApcirError(f"--levels: none of the {len(per_turn)} scored turn(s) has a level there ({len(by_level)} "
                             "levels read); are they the levels of these turns (of this topic set)?")
        if covered < len(per_turn):
            warn(f"--levels: levels cover {covered} of the {len(per_turn)} scored turn(s)"
                 f"{f' of run {run_name}' if run_name else ''}; the per-level rows are over those {covered} only")
            notes.append(f"per-level rows over the {covered} of {len(per_turn)} scored turns that have a level")
    for level in sorted({by_level[t] for t in per_turn if t in by_level}):
        per_level[level], level_turns[level] = _means(v for t, v in per_turn.items() if by_level.get(t) == level)
    return ResponseMetrics(
        responder=next(iter(responses.values())).responder, topics=topics, qrels=qrels_name,
        rel_threshold=rel_threshold, measures=measures, turns={**counts, **turn_counts}, per_level=per_level,
        level_turns=level_turns, per_turn=dict(sorted(per_turn.items())), notes=notes, judge=info,
        nuggets=nugget_info,
    )


class ResponseRuns(BaseModel):
    """Several runs' response measures side by side, with each run's paired tests against a baseline run."""

    runs: dict[str, ResponseMetrics]
    baseline: str | None = None
    significance: SignificanceSettings = Field(default_factory=SignificanceSettings)
    tests: list[Comparison] = Field(default_factory=list, description="each other run against the baseline, per "
                                                                      "measure, over the turns both scored")


def compare_response_runs(runs: Mapping[str, ResponseMetrics], baseline: str | None,
                          significance: SignificanceSettings | None = None) -> ResponseRuns:
    """``runs`` with, given a ``baseline`` (one of them), a paired test of every other run against it on each
    measure, over the turns both runs have that measure for (a turn without a canonical response has no ROUGE-L,
    an unjudged turn no judge score); one correction family per measure, over the runs
    (:func:`apcir.metrics.significance.compare_with`)."""
    significance = significance or SignificanceSettings()
    if baseline is not None and baseline not in runs:
        raise ApcirError(f"--baseline {baseline!r} is not one of the runs: {', '.join(runs)}")
    tests: list[Comparison] = []
    if baseline is not None and len(runs) > 1:
        for measure in MEASURES:
            per_turn = {run: {t: {measure: v[measure]} for t, v in metrics.per_turn.items() if measure in v}
                        for run, metrics in runs.items()}
            if per_turn[baseline] and any(per_turn[r] for r in runs if r != baseline):
                tests += compare_with(per_turn, baseline, [measure], significance)
    order = {run: i for i, run in enumerate(runs)}
    tests.sort(key=lambda c: (order[c.system], MEASURES.index(c.measure)))
    return ResponseRuns(runs=dict(runs), baseline=baseline, significance=significance, tests=tests)


def _check_records(responses: Mapping[str, ResponseRecord], ok: Sequence[Turn], topic_ids: set[str],
                   topics: str, run: str | None = None) -> None:
    """Warn, with counts and an example, about what a response record should not hold: citations that are not
    among its passages, markers [n] past its passages, and records of turns outside the topics."""
    of_run = f" of run {run}" if run else ""
    outside = [t for t in ok if set(responses[t.turn_id].citations) - set(responses[t.turn_id].passages)]
    if outside:
        first = responses[outside[0].turn_id]
        example = sorted(set(first.citations) - set(first.passages))[0]
        warn(f"{len(outside)} response(s){of_run} cite passages that are not among their passages (e.g. turn "
             f"{first.turn_id}: {example}); their citation precision counts them as given")
    past = [t for t in ok if any(n < 1 or n > len(responses[t.turn_id].passages)
                                 for n in cited_numbers(responses[t.turn_id].text))]
    if past:
        first = responses[past[0].turn_id]
        bad = next(n for n in cited_numbers(first.text) if n < 1 or n > len(first.passages))
        warn(f"{len(past)} response text(s){of_run} cite a number that is no passage of theirs (e.g. turn "
             f"{first.turn_id}: [{bad}] with {len(first.passages)} passage(s))")
    warn_outside_topics({run or "": list(responses)}, topic_ids, topics)


def warn_outside_topics(runs: Mapping[str, Sequence[str]], topic_ids: set[str], topics: str) -> int:
    """One warning, with the counts and a few examples, when some responses (the turn ids of each run) are for
    turns outside the topics: they are left out of every mean (a file that mixes topic sets). A run with no
    response for the topics at all is left to the callers, whose error says so. Returns how many responses are
    named."""
    outside = {run: sorted((t for t in ids if t not in topic_ids), key=natural_key) for run, ids in runs.items()}
    outside = {run: ids for run, ids in outside.items() if 0 < len(ids) < len(runs[run])}
    if not outside:
        return 0
    counts = [f"{len(ids)} of {len(runs[run])} response(s){f' of run {run}' if run else ''}"
              for run, ids in outside.items()]
    examples = [t for ids in outside.values() for t in ids][:3]
    warn(f"{'; '.join(counts)} are for turns outside {topics} (e.g. {', '.join(dict.fromkeys(examples))}); they are "
         "left out of every mean")
    return sum(len(ids) for ids in outside.values())


def _means(values: Iterable[dict[str, float]]) -> tuple[dict[str, float], dict[str, int]]:
    rows = list(values)
    means, counts = {}, {}
    for measure in MEASURES:
        scored = [row[measure] for row in rows if measure in row]
        if scored:
            means[measure], counts[measure] = fmean(scored), len(scored)
    return means, counts
