"""Experiments as ``apcir run`` runs them (:class:`Experiment`), and the run directories they leave
(:class:`RunDirectory`, one turn of it: :class:`TurnView`)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from apcir import datasets
from apcir.api.data import PathLike, turn_list
from apcir.api.runs import Run, load_run
from apcir.api.tables import Table
from apcir.contract.layout import RunLayout
from apcir.contract.records import Turn
from apcir.contract.reformulations import ReformulationRecord
from apcir.contract.responses import ResponseRecord
from apcir.contract.weights import WeightsFile
from apcir.errors import ApcirError

if TYPE_CHECKING:
    from apcir.experiment.turns import TurnAnswer, TurnPipeline


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

        chosen = [turns] if isinstance(turns, Turn) else turn_list(turns)
        if out is None:
            if self._scratch is None:
                self._scratch = tempfile.TemporaryDirectory(prefix="apcir-answers-")
            out = self._scratch.name
        where = Path(out)
        if where not in self._pipelines:
            where.mkdir(parents=True, exist_ok=True)
            self._pipelines[where] = open_turn_pipeline(self.config, where, progress=progress, redo_stale=True)
        return self._pipelines[where].answer(chosen)


def experiment_names() -> list[str]:
    """The bundled configs ``Experiment.from_config`` takes by name."""
    from apcir.experiment.config import CONFIGS

    return sorted(p.stem for p in CONFIGS.glob("*.toml"))
