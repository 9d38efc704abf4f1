"""The weights APCIR's fusion applies, resolved in one place: :func:`resolve_weights`.

``[fusion.weights] source`` says where they come from: ``file`` (a weights.json), ``tune`` (tuned on other
topics first: the tuning leg, :func:`tune_on_other_topics`, reformulates and retrieves the tuning topics and
runs the grid search, each a ledger stage in ``<run dir>/tune/``) or ``cv`` (cross-validated over the
experiment's own judged turns, by the fusion stage). ``apcir run`` and the per-turn pipeline
(:mod:`apcir.experiment.turns`: ``apcir converse``, :meth:`apcir.Experiment.answer`, PyTerrier) both call
:func:`resolve_weights`; answering turns one at a time cannot cross-validate, and says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from apcir import datasets
from apcir.contract.weights import WeightsFile, load_weights
from apcir.errors import ApcirError
from apcir.experiment import plan
from apcir.experiment.runner import StageRunner
from apcir.fusion.systems import PRIMARY


@dataclass
class ResolvedWeights:
    """The weights of every tuned system, by name (None: the fusion stage cross-validates them), and the files they
    come from (the fusion stage's declared inputs)."""

    given: dict[str, WeightsFile] | None
    files: list[Path] = field(default_factory=list)

    @property
    def primary(self) -> WeightsFile:
        """APCIR's weights."""
        assert self.given is not None
        return self.given[PRIMARY]


def tune_on_other_topics(runner: StageRunner, index: Path, names: list[str]) -> dict[str, WeightsFile]:
    """The tuning leg: reformulate and retrieve the tuning topics, then tune every tuned system on them."""
    config, weights = runner.config, runner.config.fusion.weights
    if not weights.tune_topics or not weights.tune_qrels:
        raise ApcirError("fusion.weights.source = 'tune' needs tune_topics and tune_qrels")
    layout = runner.layout
    turns = datasets.topics(weights.tune_topics)
    refs = layout.tune_dir / "reformulations.jsonl"
    tuner = config.reformulator if not weights.tune_method else config.reformulator.with_method(weights.tune_method)
    records = runner.reformulate("reformulate:tune", turns, tuner, refs)
    failed = [t.turn_id for t in turns if t.turn_id not in records or records[t.turn_id].status == "failed"]
    if turns and len(failed) == len(turns):
        raise ApcirError(f"every one of the {len(turns)} tuning turns ({weights.tune_topics}) failed to "
                         "reformulate, so there is nothing to tune on: give the tuning leg a reformulator that "
                         "covers them (fusion.weights.tune_method), or other tune_topics; first error: "
                         f"{records[failed[0]].error if failed[0] in records else 'no record'}")
    lists = {name: layout.tune_dir / "lists" / path.name for name, path in layout.lists().items()}
    runner.run(plan.retrieve(config, "retrieve:tune", index, refs, records, {n: n for n in lists}, lists))
    stage = plan.tune(config, layout, config.fusion.baseline_names(), turns, records, lists)
    runner.run(stage)
    return {name: load_weights(path) for name, path in stage.outs.items()}


def resolve_weights(runner: StageRunner, index: Callable[[], Path], *, one_turn_at_a_time: bool = False
                    ) -> ResolvedWeights:
    """The weights ``runner``'s config says (see the module docstring). ``index``: the index, asked for only when
    the weights are tuned. ``one_turn_at_a_time``: the turns are answered as they come, without their judgements,
    so cross-validation is refused."""
    weights = runner.config.fusion.weights
    if weights.source == "file":
        if not weights.file:
            raise ApcirError("fusion.weights.source = 'file' needs fusion.weights.file (a weights.json)")
        return ResolvedWeights({PRIMARY: load_weights(weights.file)}, [Path(weights.file)])
    if weights.source == "tune":
        given = tune_on_other_topics(runner, index(), runner.config.fusion.baseline_names())
        return ResolvedWeights(given, sorted(runner.layout.tune_dir.glob("weights*.json")))
    if one_turn_at_a_time:
        raise ApcirError("answering turns one at a time cannot cross-validate its weights: set [fusion.weights] "
                         "source = \"file\" (a weights.json) or \"tune\" (tuned on other topics first)")
    return ResolvedWeights(None)
