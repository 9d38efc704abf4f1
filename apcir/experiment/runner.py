"""What runs an experiment's stages through the stage ledger: :class:`StageRunner`.

``apcir run`` (:class:`apcir.experiment.pipeline.Experiment`, every stage over every turn) and the per-turn
pipeline's tuning leg (:func:`apcir.experiment.weights.resolve_weights`, from :mod:`apcir.experiment.turns`) run
their ledger stages through it: a stage is skipped when its declared inputs did not change, resumed when it was
interrupted, redone when they did.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from apcir.contract.layout import RunLayout
from apcir.contract.records import Run, Turn
from apcir.contract.reformulations import ReformulationRecord
from apcir.contract.runs import load_run, write_run
from apcir.contract.stage import Stage, StageContext
from apcir.evaluation.results import RunMetrics
from apcir.experiment import plan
from apcir.experiment.config import ExperimentConfig
from apcir.experiment.ledger import StageLedger, StageOutcome


@dataclass
class RunReport:
    """What one invocation of ``apcir run`` did."""

    run_dir: Path
    outcomes: list[StageOutcome] = field(default_factory=list)
    llm_requests: int = 0
    retrieval_calls: int = 0
    failed_turns: list[str] = field(default_factory=list)
    failed_windows: list[str] = field(default_factory=list)
    """Re-ranking requests whose answer could not be used (``turn#window``); asked again by the next run."""
    unjudged_turns: list[str] = field(default_factory=list)
    """Turns the response judge could not score (request failed, or answer unusable); asked again by the next run."""
    metrics: RunMetrics | None = None
    submission_problems: list[str] = field(default_factory=list)


class StageRunner:
    """A config's run directory, stage ledger and the context its stages share (the index and its backend opened
    once, runs written once and handed on without reading them back)."""

    def __init__(self, config: ExperimentConfig, console: Console, progress: bool = True):
        self.config = config
        self.console = console
        self.layout = RunLayout(config.run_dir)
        self.ledger = StageLedger(self.layout.root)
        self.report = RunReport(self.layout.root)
        self._backend: Any = None
        self._index: Path | None = None
        self._written: dict[Path, Run] = {}
        self.context = StageContext(self.layout, config.name, progress, self._write_run, self._read_run,
                                    self._open_backend, self._passage_texts)

    # ---- what the stages share ------------------------------------------------------------------
    def _write_run(self, run: Run, path: Path, tag: str, depth: int | None = None) -> None:
        """Written once; handed on to later stages of this process without reading it back."""
        self._written[path] = write_run(run, path, tag=tag, depth=depth)

    def _read_run(self, path: Path) -> Run:
        return self._written[path] if path in self._written else load_run(path)

    def _open_backend(self) -> Any:
        if self._backend is None:
            from apcir.retrieval.stage import open_backend

            assert self._index is not None
            self._backend = open_backend(self.config.retrieval, self._index)
        return self._backend

    def _passage_texts(self) -> Any:
        from apcir.retrieval.stage import passage_texts_for

        assert self._index is not None
        return passage_texts_for(self.config.retrieval, self._index)

    def say(self, message: str) -> None:
        self.console.print(message, highlight=False, soft_wrap=True)

    # ---- running stages ---------------------------------------------------------------------------
    def run(self, stage: Stage) -> bool:
        """Run one stage through the ledger (True: it ran; False: reused); an unfinished one resumes next time."""
        self.say(f"[bold]{stage.name}[/] ...")
        result: list[Any] = []

        def work() -> str:
            result.append(stage.run(self.context))
            return str(result[0].detail)

        outcome = self.ledger.run(stage.name, stage.declared_inputs(), stage.outputs(), work)
        self.report.outcomes.append(outcome)
        if result and result[0].unfinished:
            self.ledger.mark_unfinished(stage.name)
        state = f"done in {outcome.seconds:.1f}s" if outcome.ran else "reused (inputs unchanged)"
        detail = f": {outcome.detail}" if outcome.detail and outcome.ran else ""
        self.say(f"  {stage.name}: {state}{detail}")
        return outcome.ran

    def reformulate(self, label: str, turns: list[Turn], options: Any, out: Path) -> dict[str, ReformulationRecord]:
        stage = plan.reformulate(self.config, label, turns, options, out)
        self.run(stage)
        return stage.records()

    def index(self) -> Path:
        """The index (built when missing or out of date; not a ledger stage: the index keeps its own manifest)."""
        if self._index is not None:
            return self._index
        from apcir.retrieval.stage import ensure_index

        self.say("[bold]index[/] ...")
        started = time.perf_counter()
        index_dir, message = ensure_index(self.config.retrieval, progress=self.context.progress)
        seconds = time.perf_counter() - started
        reused = "up to date" in message or "used as it is" in message
        self.report.outcomes.append(StageOutcome("index", not reused, seconds, message))
        self.say(f"  index: {'reused (up to date)' if reused else f'done in {seconds:.1f}s'}: {message}")
        self._index = index_dir
        return index_dir

    def backend(self) -> Any:
        """The index opened with the configured backend (once)."""
        self.index()
        return self._open_backend()

    def passage_texts(self) -> Any:
        """The configured passage texts (``.texts(ids)``), or None."""
        self.index()
        return self._passage_texts()
