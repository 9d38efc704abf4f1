"""apcir's public Python API: what ``import apcir`` offers, kept stable.

Data::

    turns = apcir.topics("ikat23-test")            # or "trec-ikat/2023/test", or a topic file
    judgements = apcir.qrels("ikat23-test")
    passages = apcir.collection("ikat23-provenance")   # an iterator of Passage records

Runs (TREC run files; a run is ``{turn_id: {passage_id: score}}``, a dict)::

    run = apcir.load_run("runs/demo/fused.run")
    apcir.save_run(run, "copy.run")
    run.to_ranx(), run.to_pandas()

Evaluation (trec_eval's numbers; names as ir-measures or trec_eval write them)::

    apcir.evaluate({"apcir": run, "other": "other.run"}, "ikat23-test", ["nDCG@3", "RR", "Judged@10"])
    apcir.compare(runs, "ikat23-test", "paper", baseline="other", test="t-test", correction="holm")

Experiments (the same stages as ``apcir run``, resumable, in a run directory)::

    result = apcir.Experiment.from_config("demo").run()
    result.systems["apcir"], result.metrics, result.weights, result.turn("9-1_3")

The stage functions (:func:`reformulate`, :func:`retrieve`, :func:`tune`, :func:`fuse`,
:func:`rerank`, :func:`respond`, :func:`export`, :func:`validate`) take records and runs
in memory and call what the stage commands call.

Nothing here prints except through :mod:`apcir.console`; ``apcir.quiet()`` silences it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from apcir import datasets
from apcir._public import PUBLIC
from apcir.console import set_quiet
from apcir.contract.layout import RunLayout
from apcir.contract.records import Passage, Qrels, Turn
from apcir.contract.reformulations import ReformulationRecord
from apcir.contract.responses import ResponseRecord
from apcir.contract.runs import run_stem
from apcir.contract.weights import WeightsFile
from apcir.errors import ApcirError
from apcir.settings import check_environment

if TYPE_CHECKING:
    from apcir.experiment.turns import TurnAnswer, TurnPipeline

# The environment variables apcir reads are checked when the API is first used (``apcir.evaluate``, ...), as the
# CLI checks them before a command: a malformed SOURCE_DATE_EPOCH is one ApcirError naming it here, instead of a
# bare ValueError from inside numpy the first time a function imports scipy.
check_environment()

PathLike = str | Path


# ---- data -----------------------------------------------------------------------------------------
def topics(name_or_path: PathLike) -> list[Turn]:
    """The turns of a bundled topic set (``ikat23-test``), an ir_datasets id (``trec-ikat/2023/test``) or a topic
    file (any iKAT year's schema), each with its history and the user's PTKB."""
    return datasets.topics(name_or_path)


def qrels(name_or_path: PathLike) -> Qrels:
    """Judgements ``{turn_id: {passage_id: grade}}`` of bundled qrels (``ikat23-test``), an ir_datasets id or a
    TREC qrels file."""
    return datasets.qrels(name_or_path)


def collection(name_or_path: PathLike) -> Iterator[Passage]:
    """The passages of a bundled collection (``ikat23-provenance``) or a JSONL/TSV collection file, one at a time."""
    return datasets.iter_collection(datasets.collection_path(name_or_path))


def quiet(on: bool = True) -> None:
    """Silence (``on=True``) or restore everything apcir says: warnings, notes and progress bars."""
    set_quiet(on)


# ---- runs -------------------------------------------------------------------------------------------
class Run(dict[str, dict[str, float]]):
    """A run: ``{turn_id: {passage_id: score}}`` (a dict, as pytrec_eval, ranx and ir-measures take it).

    ``weights``: the fusion weights it was fused with, when known (:func:`fuse`, or a run directory's fused run
    and tuned systems), so that :func:`evaluate` can say when it is scored on turns they were tuned on."""

    def __init__(self, data: Mapping[str, Mapping[str, float]] | None = None, name: str = "run", *,
                 weights: WeightsFile | None = None, weights_source: str = ""):
        super().__init__({t: dict(hits) for t, hits in (data or {}).items()})
        self.name = name
        self.weights = weights
        self.weights_source = weights_source

    def to_ranx(self) -> Any:
        """A ``ranx.Run`` of the same scores (``pip install ranx``), for ranx's fusion and comparison."""
        try:
            from ranx import Run as RanxRun
        except ImportError:  # pragma: no cover - depends on the environment
            raise ApcirError("to_ranx needs ranx: pip install ranx") from None
        return RanxRun({t: dict(hits) for t, hits in self.items() if hits}, name=self.name)

    def to_pandas(self) -> Any:
        """A DataFrame with PyTerrier's columns: qid, docno, score, rank (0-based), in trec_eval's order."""
        from apcir.contract.runs import ranking

        pd = _pandas()
        rows = [(turn, doc, score, rank) for turn in sorted(self) for rank, (doc, score) in
                enumerate(ranking(self[turn]))]
        return pd.DataFrame(rows, columns=["qid", "docno", "score", "rank"])

    def save(self, path: PathLike, tag: str | None = None, depth: int | None = None) -> Path:
        """Write as a TREC run file (see :func:`save_run`)."""
        return save_run(self, path, tag=tag, depth=depth)


def load_run(path: PathLike) -> Run:
    """A TREC run file (``turn Q0 passage rank score tag``) as a :class:`Run` named after the file."""
    from apcir.contract.runs import load_run as _load
    from apcir.contract.weights import load_weights
    from apcir.evaluation.tuned import weights_of

    weights = weights_of(path)
    return Run(_load(Path(path)), name=run_stem(Path(path)),
               weights=load_weights(weights) if weights is not None else None,
               weights_source=str(weights) if weights is not None else "")


def save_run(run: Mapping[str, Mapping[str, float]], path: PathLike, tag: str | None = None,
             depth: int | None = None) -> Path:
    """Write ``run`` as a TREC run file (trec_eval's order, cut at ``depth``); returns the path."""
    from apcir.contract.runs import write_run

    name = getattr(run, "name", None)
    write_run({t: dict(h) for t, h in run.items()}, Path(path), tag=tag or name or "apcir", depth=depth)
    return Path(path)


def _is_run(value: Any) -> bool:
    """``{turn: {passage: score}}`` (rather than ``{name: run or path}``)."""
    return isinstance(value, Mapping) and all(
        isinstance(hits, Mapping) and all(isinstance(s, (int, float)) for s in hits.values())
        for hits in value.values())


def _one(value: Any, name: str) -> Run:
    if isinstance(value, (str, Path)):
        return load_run(value)
    if isinstance(value, Run):
        return value
    if _is_run(value):
        return Run(value, name=name)
    raise ApcirError(f"{name}: not a run (a run file, or {{turn_id: {{passage_id: score}}}})")


def _runs(runs: Any) -> dict[str, Run]:
    """Named runs from a run (file, dict or Run), a sequence of them, a mapping name -> run, or a RunDirectory."""
    if isinstance(runs, RunDirectory):
        return dict(runs.systems)
    if isinstance(runs, (str, Path, Run)) or _is_run(runs):
        one = _one(runs, "run")
        return {one.name: one}
    if isinstance(runs, Mapping):
        return {str(name): _one(value, str(name)) for name, value in runs.items()}
    out: dict[str, Run] = {}
    for item in runs:
        loaded = _one(item, f"run{len(out) + 1}")
        out[loaded.name if loaded.name not in out else f"{loaded.name}-{len(out) + 1}"] = loaded
    return out


def _qrels(value: PathLike | Mapping[str, Mapping[str, int]]) -> tuple[Qrels, str]:
    if isinstance(value, Mapping):
        return {t: dict(g) for t, g in value.items()}, "the qrels"
    return datasets.qrels(value), str(value)


# ---- tables -----------------------------------------------------------------------------------------
@dataclass
class Table:
    """A result table: ``columns`` and ``rows`` (dicts); ``.to_pandas()`` gives a DataFrame.

    The rows hold the values as computed (measures as fractions, as trec_eval gives them); the display (``print``,
    a notebook) shows the ``scaled`` columns x100 with their ``marks`` (``†`` / ``↓``), as every apcir table does."""

    columns: list[str]
    rows: list[dict[str, Any]]
    caption: str = ""
    scaled: tuple[str, ...] = ()
    """Columns of fractions that the display shows x100 (one decimal)."""
    marks: dict[tuple[int, str], str] = field(default_factory=dict)
    """(row index, column) -> the mark shown after the value."""

    def shown(self, index: int, column: str) -> str:
        """A cell as the display shows it."""
        value = self.rows[index].get(column)
        if column in self.scaled and isinstance(value, (int, float)) and not isinstance(value, bool):
            return f"{100 * value:.1f}{self.marks.get((index, column), '')}"
        return _cell(value) + self.marks.get((index, column), "")

    def to_pandas(self) -> Any:
        return _pandas().DataFrame(self.rows, columns=self.columns)

    def column(self, name: str) -> list[Any]:
        return [row.get(name) for row in self.rows]

    def value(self, run: str, measure: str) -> Any:
        """The cell of ``run`` (the table's first column) and ``measure``."""
        key = self.columns[0]
        for row in self.rows:
            if row[key] == run:
                return row[measure]
        raise KeyError(run)

    def __len__(self) -> int:
        return len(self.rows)

    def __str__(self) -> str:
        cells = [[self.shown(i, c) for c in self.columns] for i in range(len(self.rows))]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(self.columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(self.columns, widths))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
        return "\n".join(([self.caption] if self.caption else []) + lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        from html import escape

        head = "".join(f"<th>{escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{escape(self.shown(i, c))}</td>" for c in self.columns) + "</tr>"
                       for i in range(len(self.rows)))
        caption = f"<caption>{escape(self.caption)}</caption>" if self.caption else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else ("" if value is None else str(value))


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:  # pragma: no cover - depends on the environment
        raise ApcirError("this needs pandas: pip install pandas") from None
    return pandas


# ---- evaluation -------------------------------------------------------------------------------------
def evaluate(runs: Any, qrels: PathLike | Mapping[str, Mapping[str, int]], measures: str | Sequence[str] = "paper",
             *, rel_threshold: int = 1, complete: bool = False, per_turn: bool = False) -> Table:
    """trec_eval's numbers (ir-measures' for measures trec_eval lacks) of one or more runs, a row per run (or per
    run and turn with ``per_turn=True``), with ``turns``, the judged turns each mean is over. Values are fractions,
    as trec_eval gives them (the display shows them x100). A run scored on turns its fusion weights were tuned on is
    said so (a warning, and the ``tuned on test`` column: how many), and so are runs averaged over different
    judged turns."""
    from apcir.console import warn
    from apcir.evaluation.stage import coverage_warning
    from apcir.metrics.measures import parse_measures
    from apcir.metrics.trec_eval import evaluate as _evaluate

    named = _runs(runs)
    judgements, qrels_name = _qrels(qrels)
    chosen = parse_measures(list(measures) if not isinstance(measures, str) else measures)
    names = [m.name for m in chosen]
    rows: list[dict[str, Any]] = []
    results = {}
    tuned = _tuned_on_test(named, judgements)
    for label, run in named.items():
        result = results[label] = _evaluate(run, judgements, chosen, rel_threshold=rel_threshold, complete=complete,
                                            qrels_name=qrels_name, run_name=label if len(named) > 1 else None)
        if per_turn:
            rows += [{"run": label, "turn": turn, **values} for turn, values in result.per_turn.items()]
        else:
            rows.append({"run": label, **result.measures, "turns": result.evaluated_turns}
                        | ({"tuned on test": tuned[label].turns if label in tuned else 0} if tuned else {}))
    columns = ["run", "turn", *names] if per_turn else ["run", *names, "turns", *(["tuned on test"] if tuned else [])]
    for label, found in tuned.items():
        warn(found.note(label))
    coverage = coverage_warning(results)
    if coverage is not None and not per_turn:
        warn(coverage)
    return Table(columns, rows, caption=f"on {qrels_name}, relevance threshold {rel_threshold}; x100; turns: judged "
                 "turns averaged", scaled=tuple(names))


def _tuned_on_test(runs: Mapping[str, Run], judgements: Qrels) -> dict[str, Any]:
    """The runs whose fusion weights were tuned on some of the judged turns they are scored on."""
    from apcir.evaluation.tuned import tuned_turns

    found = {}
    for label, run in runs.items():
        weights = getattr(run, "weights", None)
        if weights is not None and (hit := tuned_turns(weights, run, judgements, run.weights_source)) is not None:
            found[label] = hit
    return found


def compare(runs: Any, qrels: PathLike | Mapping[str, Mapping[str, int]], measures: str | Sequence[str] = "paper",
            *, baseline: str | None = None, test: str = "t-test", correction: str = "bonferroni",
            alpha: float = 0.05, rel_threshold: int = 1, complete: bool = False) -> Table:
    """Each run against ``baseline`` (default: the first) on every measure: means, difference, p-value, corrected
    p-value and whether it is significant (``test``: t-test, randomisation or bootstrap; ``correction``: none,
    bonferroni or holm, one family per measure), as ``apcir evaluate --baseline`` reports it."""
    from apcir.evaluation.stage import compare_runs
    from apcir.metrics.significance import SignificanceSettings

    named = _runs(runs)
    judgements, qrels_name = _qrels(qrels)
    settings = SignificanceSettings.model_validate({"test": test, "correction": correction, "alpha": alpha})
    result = compare_runs(named, judgements, list(measures) if not isinstance(measures, str) else measures,
                          baseline=baseline, rel_threshold=rel_threshold, complete=complete, qrels_name=qrels_name,
                          significance=settings)
    from apcir.console import warn

    tuned = _tuned_on_test(named, judgements)
    rows = [{"run": t.system, "baseline": t.baseline, "measure": t.measure, "mean": t.mean_system,
             "baseline mean": t.mean_baseline, "difference": t.mean_system - t.mean_baseline, "p": t.p_value,
             "p corrected": t.p_corrected, "significant": t.significant, "effect size": t.effect_size,
             "turns": t.n_turns} | ({"tuned on test": t.system in tuned} if tuned else {}) for t in result.tests]
    columns = ["run", "baseline", "measure", "mean", "baseline mean", "difference", "p", "p corrected", "significant",
               "effect size", "turns", *(["tuned on test"] if tuned else [])]
    for label, found in tuned.items():
        warn(found.note(label))
    marks = {(i, "mean"): t.marker for i, t in enumerate(result.tests) if t.marker}
    return Table(columns, rows, caption=f"{test}, {correction} correction, alpha {alpha}, on {qrels_name}; means "
                 "x100; turns: the turns both runs are scored on", scaled=("mean", "baseline mean", "difference"),
                 marks=marks)


# ---- experiments ------------------------------------------------------------------------------------
@dataclass
class TurnView:
    """Everything a run directory holds about one turn."""

    turn: Turn
    level: str | None
    reformulation: ReformulationRecord | None
    lists: dict[str, list[tuple[str, float]]]
    """Each fused list's ranking for the turn (passage, score), best first."""
    systems: dict[str, list[tuple[str, float]]]
    response: ResponseRecord | None
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per system, the turn's values of the evaluated measures (empty without qrels)."""
    grades: dict[str, int] = field(default_factory=dict)

    def __repr__(self) -> str:
        """A few lines: the turn, its level and rewrite, what each list and system ranked first, the response."""
        output = self.reformulation.output if self.reformulation is not None else None
        lines = [f"TurnView {self.turn!r}", f"  level {self.level or '-'}"
                 + (f"; rewrite {output.rewrite[:100]!r}" if output is not None else "")]
        for kind, rankings in (("list", self.lists), ("system", self.systems)):
            for name, ranking in rankings.items():
                top = ", ".join(f"{p}{'*' if self.grades.get(p, 0) > 0 else ''}" for p, _ in ranking[:3])
                values = self.metrics.get(name, {}) if kind == "system" else {}
                shown = "; " + ", ".join(f"{m} {100 * v:.1f}" for m, v in values.items()) if values else ""
                lines.append(f"  {kind} {name}: {len(ranking)} passages, top {top or '-'}{shown}")
        if self.response is not None:
            lines.append(f"  response: {self.response.text[:100]!r}")
        lines.append("  (* judged relevant; measures x100; the fields hold everything)")
        return "\n".join(lines)


class RunDirectory:
    """A run directory of ``apcir run``, read lazily: systems, metrics, weights, reformulations, responses."""

    def __init__(self, path: PathLike):
        self.layout = RunLayout(Path(path))
        if not self.layout.config.exists():
            raise ApcirError("not a run directory of `apcir run` (no config.json)", path=self.layout.root)
        self._cache: dict[str, Any] = {}

    @property
    def path(self) -> Path:
        return self.layout.root

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"

    def _once(self, key: str, load: Any) -> Any:
        if key not in self._cache:
            self._cache[key] = load()
        return self._cache[key]

    @property
    def config(self) -> dict[str, Any]:
        """The config as the run resolved it (``config.json``)."""
        from apcir.io import read_json

        return self._once("config", lambda: read_json(self.layout.config, "run config"))

    @property
    def systems(self) -> dict[str, Run]:
        """Every evaluated system's run (``systems/*.run.gz``, and the lists a system is; re-ranked ones are
        ``<system>+<re-ranker>``)."""
        from apcir.contract.fusion import load_fusion_record

        record = load_fusion_record(self.layout.fusion_record) if self.layout.fusion_record.exists() else None
        return self._once("systems", lambda: {name: load_run(path)
                                              for name, path in self.layout.system_runs(record).items()})

    @property
    def lists(self) -> dict[str, Run]:
        """The three fused lists (rewrite, rewrite_response, third) and manual.run when built."""
        return self._once("lists", lambda: {name: load_run(path) for name, path in self.layout.list_runs().items()})

    @property
    def fused(self) -> Run:
        """The run the submission holds (``fused.run``)."""
        return self._once("fused", lambda: load_run(self.layout.fused))

    @property
    def metrics(self) -> Any:
        """``metrics.json`` as a :class:`apcir.evaluation.results.RunMetrics` (None without qrels)."""
        from apcir.evaluation.results import read_metrics

        return self._once("metrics", lambda: read_metrics(self.path) if self.layout.metrics.exists() else None)

    def table(self) -> Table:
        """The systems' means (fractions, shown x100 with the report's marks, as ``apcir run`` shows them) and the
        judged turns each is over (``n``), a row per system, as ``metrics.json`` holds them."""
        metrics = self.metrics
        if metrics is None:
            raise ApcirError("this run has no metrics (no evaluation qrels configured)", path=self.path)
        from apcir.evaluation.display import systems_table

        shown = systems_table(metrics)
        rows = [{"system": r.system, "label": r.label, **r.means, "n": r.n} for r in shown.rows]
        marks = {(i, m): mark for i, r in enumerate(shown.rows) for m, mark in r.marks.items() if mark}
        return Table(["system", "label", *metrics.measures, "n"], rows,
                     caption=f"{metrics.name} on {metrics.qrels} ({shown.caption})", scaled=tuple(metrics.measures),
                     marks=marks)

    @property
    def weights(self) -> WeightsFile:
        """The per-level weights APCIR used (``weights.json``)."""
        from apcir.contract.weights import load_weights

        return self._once("weights", lambda: load_weights(self.layout.weights))

    @property
    def levels(self) -> dict[str, str]:
        from apcir.contract.levels import load_levels

        return self._once("levels", lambda: load_levels(self.layout.levels))

    @property
    def reformulations(self) -> dict[str, ReformulationRecord]:
        from apcir.contract.reformulations import load_reformulations

        return self._once("reformulations", lambda: load_reformulations(self.layout.reformulations))

    @property
    def responses(self) -> dict[str, ResponseRecord]:
        from apcir.contract.responses import load_responses

        return self._once("responses", lambda: load_responses(self.layout.responses)
                          if self.layout.responses.exists() else {})

    @property
    def turns(self) -> list[Turn]:
        config = self.config
        return self._once("turns", lambda: datasets.select_turns(str(config.get("topics")), config.get("turns")))

    def turn(self, turn_id: str, top: int = 10) -> TurnView:
        """Everything about one turn: the utterance and PTKB, level, rewrites, each list's and system's top
        ``top`` passages, the response and the per-turn measures."""
        from apcir.contract.runs import ranking
        from apcir.ids import canonical_turn_id

        turn_id = canonical_turn_id(turn_id)
        found = [t for t in self.turns if t.turn_id == turn_id]
        if not found:
            raise ApcirError(f"turn {turn_id!r} is not in this run ({len(self.turns)} turns)", path=self.path)
        metrics = self.metrics
        per_turn = {name: result.per_turn[turn_id] for name, result in metrics.systems.items()
                    if turn_id in result.per_turn} if metrics is not None else {}
        grades = datasets.qrels(metrics.qrels).get(turn_id, {}) if metrics is not None else {}
        return TurnView(
            turn=found[0], level=self.levels.get(turn_id), reformulation=self.reformulations.get(turn_id),
            lists={n: ranking(r.get(turn_id, {}), top) for n, r in self.lists.items()},
            systems={n: ranking(r.get(turn_id, {}), top) for n, r in self.systems.items()},
            response=self.responses.get(turn_id), metrics=per_turn, grades=dict(grades),
        )


class Experiment:
    """An experiment as ``apcir run`` runs it: ``Experiment.from_config("demo").run()``."""

    def __init__(self, config: Any):
        self.config = config
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self._pipelines: dict[Path, TurnPipeline] = {}

    @classmethod
    def from_config(cls, config: PathLike | Mapping[str, Any], *, output_dir: PathLike | None = None,
                    reformulator: str | None = None, responder: str | None = None, base_url: str | None = None,
                    max_prompt_tokens: int | None = None, judged_only: bool = False) -> Experiment:
        """A config file, a bundled config's name (``demo``) or a dict of the same keys; the keyword arguments are
        ``apcir run``'s overrides (``--output-dir``, ``--llm``, ``--responder``, ...)."""
        from apcir.experiment.config import load_config, resolve_config_path, validate_config, with_overrides

        if isinstance(config, Mapping):
            data, path = dict(config), None
        else:
            path = resolve_config_path(str(config))
            data = load_config(path).model_dump(exclude_unset=True)
        data = with_overrides(data, llm=reformulator, responder=responder, base_url=base_url,
                              max_prompt_tokens=max_prompt_tokens, judged_only=judged_only,
                              output_dir=str(output_dir) if output_dir is not None else None)
        return cls(validate_config(data, path))

    @property
    def run_dir(self) -> Path:
        return Path(self.config.run_dir)

    def run(self, *, progress: bool = False, quiet: bool = True) -> RunDirectory:
        """Run (or resume, or confirm) every stage; returns the run directory. ``quiet`` keeps the stage log out of
        a notebook (warnings still show unless :func:`apcir.quiet` was called)."""
        from rich.console import Console

        from apcir.experiment.pipeline import run_experiment

        log = Console(quiet=True) if quiet else None
        run_experiment(self.config, log, progress=progress)
        return RunDirectory(self.run_dir)

    def answer(self, turns: PathLike | Sequence[Turn] | Turn, *, out: PathLike | None = None,
               progress: bool = False) -> dict[str, TurnAnswer]:
        """Turns answered by the per-turn pipeline (:mod:`apcir.experiment.turns`), as ``apcir converse`` answers
        one: reformulated, their three lists fused with their level's weights (``[fusion.weights]`` a file, or tuned
        on other topics), re-ranked by the submitted ``[[rerank]]`` entries, answered. Returns ``{turn_id:
        TurnAnswer}`` (``.ranking``, ``.text``, ``.response``, ``.record``, ``.lists``). ``out``: where the
        reformulations and responses are kept (a second call asks no model again); by default a scratch folder
        that lasts as long as this object."""
        from apcir.experiment.turns import open_turn_pipeline

        chosen = [turns] if isinstance(turns, Turn) else _turns(turns)
        if out is None:
            if self._scratch is None:
                self._scratch = tempfile.TemporaryDirectory(prefix="apcir-answers-")
            out = self._scratch.name
        where = Path(out)
        if where not in self._pipelines:
            where.mkdir(parents=True, exist_ok=True)
            self._pipelines[where] = open_turn_pipeline(self.config, where, progress=progress, redo_stale=True)
        return self._pipelines[where].answer(chosen)


# ---- the stages, as functions -------------------------------------------------------------------
def _records_file(out: PathLike | None, scratch: list[tempfile.TemporaryDirectory[str]], name: str) -> Path:
    if out is not None:
        return Path(out)
    scratch.append(tempfile.TemporaryDirectory(prefix="apcir-"))
    return Path(scratch[-1].name) / name


def _texts(passages: PathLike | Mapping[str, str], ids: set[str]) -> dict[str, str]:
    """The texts of ``ids`` from ``{passage_id: text}`` or a collection (only these are read)."""
    if isinstance(passages, Mapping):
        return {p: passages[p] for p in ids if p in passages}
    return datasets.passage_texts(datasets.collection_path(passages), ids)


def _turns(value: PathLike | Sequence[Turn]) -> list[Turn]:
    return topics(value) if isinstance(value, (str, Path)) else list(value)


def reformulate(turns: PathLike | Sequence[Turn], method: str = "heuristic", *, out: PathLike | None = None,
                progress: bool = False, **settings: Any) -> dict[str, ReformulationRecord]:
    """One record per turn (level and three rewrites) by ``method`` (``heuristic``, ``manual``, ``file:PATH`` or an
    LLM such as ``gpt-4o``; ``settings`` are ``[reformulator]``'s keys, e.g. ``base_url``). With ``out`` the
    records are kept there and a second call resumes; failed turns fall back to their utterance at level a."""
    from apcir.contract.reformulations import load_reformulations, with_fallbacks
    from apcir.reformulation.settings import ReformulatorOptions
    from apcir.reformulation.stage import reformulate as _reformulate

    chosen = _turns(turns)
    options = ReformulatorOptions.model_validate({**settings, "method": method})
    scratch: list[Any] = []
    path = _records_file(out, scratch, "reformulations.jsonl")
    _reformulate(chosen, options, path, progress=progress, redo_stale=True)
    return with_fallbacks(load_reformulations(path), chosen)


def retrieve(queries: Mapping[str, Any], index: PathLike, *, k: int = 1000, field: str = "rewrite",
             encoder: str | None = None, device: str | None = None, backend: str | None = None,
             progress: bool = False, dtype: str = "auto", **options: Any) -> Run:
    """Search an index (``apcir index build``, or a Lucene index) as ``apcir retrieve`` does: ``queries`` are
    reformulation records (``field`` picks rewrite, rewrite_response or third) or ``{turn_id: text}``;
    ``dtype``: the query encoder's precision (auto, float32, bfloat16, float16); ``options``: the backend's own
    (``query_algorithm="wand"`` for pisa, ``retriever="module:function"`` with ``backend="pyterrier"``, ...)."""
    from apcir.experiment.turns import ListRetrieval
    from apcir.retrieval.backends import open_index
    from apcir.retrieval.stage import list_queries

    if queries and all(isinstance(v, ReformulationRecord) for v in queries.values()):
        asked: Mapping[str, Any] = list_queries(queries, field)
    else:
        asked = {t: str(v) for t, v in queries.items()}
    searcher = open_index(index, encoder, device=device, threads=2, backend=backend, dtype=dtype,
                          options=options or None)
    runs = ListRetrieval(searcher, k, progress).search({field: asked})
    return Run(runs[field], name=field)


def tune(lists: Sequence[Any], levels: Mapping[str, str] | PathLike, qrels: PathLike | Mapping[str, Any], *,
         objective: str = "paper", step: float | str = 0.01, norm: str = "minmax", depth: int = 1000,
         rel_threshold: int = 1, min_turns: int = 1, missing_level: str | None = None,
         progress: bool = False, **rule: Any) -> WeightsFile:
    """Per-level weights by the exact grid search of ``apcir tune`` over the fused lists (runs or paths, in weight
    order); ``levels`` is ``{turn_id: level}``, a levels file or ``annotators:TOPICS``. ``rule``: how the points
    are chosen, as ``[fusion.weights]`` says it (``shrinkage=0 | "cv"``, ``select="argmax" | "plateau"``,
    ``epsilon``, ``bootstrap``, ``seed``)."""
    from apcir import datasets
    from apcir.fusion.protocol import FusionInputs, search_for, tune_variants
    from apcir.fusion.settings import FusionParams, TuningSettings

    params = FusionParams.of(norm=norm, depth=depth, rel_threshold=rel_threshold, missing_level=missing_level)
    runs = [load_run(r) if isinstance(r, (str, Path)) else r for r in lists]
    level_map = datasets.levels(levels) if isinstance(levels, (str, Path)) else dict(levels)
    judgements, qrels_name = _qrels(qrels)
    tuning = TuningSettings.model_validate({"step": str(step), "objective": objective, "min_turns": min_turns, **rule})
    inputs = FusionInputs(lists=runs, levels=level_map, qrels=judgements, qrels_name=qrels_name,
                          run_names=[getattr(r, "name", f"list{i + 1}") for i, r in enumerate(runs)],
                          levels_name="levels")
    search, _ = search_for(inputs, tuning, params, progress=progress)
    return tune_variants(inputs, tuning, ["apcir"], params, search=search)["apcir"]


def fuse(lists: Sequence[Any], levels: Mapping[str, str] | PathLike, weights: WeightsFile | PathLike, *,
         norm: str | None = None, depth: int | None = None, missing_level: str | None = "a") -> Run:
    """The fused run: each turn's lists min-max normalised (or ``norm``) and summed with its level's weights."""
    from apcir.contract.levels import load_levels
    from apcir.contract.weights import load_weights
    from apcir.fusion.linear import fuse_linear
    from apcir.fusion.normalise import check_norm

    tuned = load_weights(weights) if isinstance(weights, (str, Path)) else weights
    runs = [load_run(r) if isinstance(r, (str, Path)) else r for r in lists]
    level_map = load_levels(levels) if isinstance(levels, (str, Path)) else dict(levels)
    chosen_norm = norm or tuned.norm
    check_norm(chosen_norm)
    return Run(fuse_linear(runs, level_map, tuned, chosen_norm, depth or tuned.depth, missing_level=missing_level),
               name="fused", weights=tuned, weights_source=str(weights) if isinstance(weights, (str, Path)) else
               f"weights tuned on {tuned.tuned_on.qrels or 'unnamed qrels'}")


def rerank(run: Mapping[str, Mapping[str, float]], queries: Mapping[str, Any], passages: PathLike | Mapping[str, str],
           reranker: str = "cross-encoder", *, field: str = "rewrite", progress: bool = False,
           **settings: Any) -> Run:
    """``run`` re-ranked (its top ``depth`` passages; the rest keep their place below): ``queries`` are
    reformulation records or ``{turn_id: text}``, ``passages`` a collection or ``{passage_id: text}``;
    ``settings`` are ``[rerank]``'s keys (model, depth, ...)."""
    from apcir.experiment.turns import Reranking
    from apcir.reranking.settings import RerankSettings

    config = RerankSettings.model_validate({**settings, "reranker": reranker, "field": field})
    if all(isinstance(v, ReformulationRecord) for v in queries.values()):
        from apcir.reranking.stage import record_queries

        texts_of = record_queries(queries, field)
    else:
        texts_of = {t: str(v) for t, v in queries.items()}
    result = Reranking(config, lambda ids: _texts(passages, ids), progress)({t: dict(h) for t, h in run.items()},
                                                                             texts_of)
    return Run(result, name=f"{getattr(run, 'name', 'run')}+{config.label}")


def respond(turns: PathLike | Sequence[Turn], reformulations: Mapping[str, ReformulationRecord],
            run: Mapping[str, Mapping[str, float]], passages: PathLike | Mapping[str, str],
            responder: str = "extractive", *, out: PathLike | None = None, progress: bool = False,
            **settings: Any) -> dict[str, ResponseRecord]:
    """One grounded response per turn from ``run``'s top passages, citing them, with the PTKB statements it relied
    on (``responder``: extractive or an LLM; ``settings`` are ``[respond]``'s keys). Resumable with ``out``."""
    from apcir.experiment.turns import Responding
    from apcir.responses.ptkb import similarity_for
    from apcir.responses.settings import RespondSettings

    config = RespondSettings.model_validate({**settings, "responder": responder})
    scratch: list[Any] = []
    path = _records_file(out, scratch, "responses.jsonl")
    responding = Responding(config, similarity_for("bm25", None), path, lambda ids: _texts(passages, ids),
                            redo_stale=True, progress=progress)
    return responding(_turns(turns), reformulations, {t: dict(h) for t, h in run.items()})


def nugget_recall(responses: PathLike | Sequence[PathLike], nuggets: PathLike, topics: PathLike,
                  matcher: str = "lexical", *, baseline: str | None = None, compare_matcher: str | None = None,
                  **settings: Any) -> Any:
    """Nugget recall of one or many runs' responses, as ``apcir evaluate-responses --nuggets`` computes it:
    ``responses`` are files (apcir's JSONL, iKAT 2024 or 2025 forms) or ``ikat25-runs``; ``nuggets`` a set name
    (``ikat25-test``) or file; ``settings`` the matcher's (``tau``, ``encoder``, ``model``, ``batched``,
    ``learned_model``). The default matcher is apcir's (``DEFAULT_MATCHER``: the one that agreed best with people)."""
    from apcir import datasets
    from apcir.evaluation.nuggets.gold import load_nuggets, load_response_runs
    from apcir.evaluation.nuggets.matchers import MatcherSettings
    from apcir.evaluation.nuggets.scores import score_runs

    sources = [responses] if isinstance(responses, (str, Path)) else list(responses)
    gold = load_nuggets(nuggets, {t.turn_id for t in datasets.topics(topics)})
    return score_runs(gold, load_response_runs(sources), matcher, MatcherSettings.model_validate(settings),
                      baseline=baseline, compare_matcher=compare_matcher)


def export(run: Mapping[str, Mapping[str, float]], turns: PathLike | Sequence[Turn], out: PathLike, *,
           run_name: str = "apcir", team_id: str = "apcir", responses: Mapping[str, ResponseRecord] | None = None,
           reformulations: Mapping[str, ReformulationRecord] | None = None,
           passages: PathLike | Mapping[str, str] | None = None, format: str | None = None,
           year: int | None = None, **settings: Any) -> Path:
    """An iKAT submission of ``run`` (with responses and PTKB provenance) in the topics' year's format, or
    ``format`` (``apcir formats`` lists them); ``settings`` are ``[export]``'s keys. Returns the file written."""
    from apcir.responses.ptkb import rank_statements, similarity_for
    from apcir.submission.common import USED_TOP, SubmissionInputs
    from apcir.submission.settings import ExportSettings
    from apcir.submission.stage import text_ids, write_submission

    chosen = _turns(turns)
    the_year = year or (datasets.topics_year(turns) if isinstance(turns, (str, Path)) else 2023)
    config = ExportSettings.model_validate({**settings, **({"format": format} if format else {}),
                                            "team_id": team_id}).resolved(the_year)
    fmt = config.format
    assert fmt is not None
    plain = {t: dict(h) for t, h in run.items()}
    records = dict(reformulations or {})
    used_top = USED_TOP
    wanted = text_ids(plain, responses, used_top)
    texts = _texts(passages, wanted) if passages is not None else {}
    inputs = SubmissionInputs(run=plain, turns=chosen, run_name=run_name, run_type=config.run_type, team_id=team_id,
                              reformulations=records, passages=texts, mode=config.text, used_top=used_top,
                              responses=dict(responses) if responses is not None else None,
                              ptkb=rank_statements(chosen, records,
                                                                                    similarity_for("bm25", None)),
                              ptkb_mode=config.ptkb, eval_response=config.eval_response, year=the_year)
    return write_submission(inputs, fmt, Path(out), allow_missing_text=config.allow_missing_text or passages is None)


def validate(path: PathLike, turns: PathLike | Sequence[Turn], format: str | None = None,
             year: int | None = None) -> list[str]:
    """The problems the offline iKAT checks find in a submission file (empty: it passes)."""
    from apcir.submission.stage import validate_submission

    chosen = _turns(turns)
    the_year = year or (datasets.topics_year(turns) if isinstance(turns, (str, Path)) else None)
    return validate_submission(Path(path), chosen, format, the_year)


def experiment_names() -> list[str]:
    """The bundled configs ``Experiment.from_config`` takes by name."""
    from apcir.experiment.config import CONFIGS

    return sorted(p.stem for p in CONFIGS.glob("*.toml"))


__all__ = list(PUBLIC)
