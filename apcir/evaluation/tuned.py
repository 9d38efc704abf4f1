"""Whether a run is scored on turns its fusion weights were tuned on ("tuned on test"), wherever it is scored.

A run knows nothing of the weights it was fused with; its run directory does. :func:`weights_of` finds them
for a run of an ``apcir run`` directory: ``fused.run`` (and ``fused+<re-ranker>.run``) is fused with
``weights.json`` whatever the protocol (under cross-validation, the weights tuned on every judged turn), and a
tuned system of ``systems/`` is fused with them (or its own ``systems/<name>.weights.json``) unless the weights
were cross-validated, which makes its run out-of-fold. :func:`tuned_turns` then counts the judged turns, with the
same judgements, that the weights were tuned on: ``apcir evaluate``, the Python API and the PyTerrier ``Fuse``
transformer label such a run "tuned on test".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from apcir.contract.layout import RunLayout
from apcir.contract.records import Qrels
from apcir.contract.runs import run_stem
from apcir.contract.weights import WeightsFile, load_weights
from apcir.errors import ApcirError

TUNED_ON_TEST = "tuned on test"


@dataclass(frozen=True)
class TunedOnTest:
    """A run scored on ``turns`` of its judged turns that its weights were tuned on (of ``judged`` judged turns)."""

    turns: int
    judged: int
    weights: str
    """Where the weights are (a file, or how they were given)."""

    def note(self, label: str) -> str:
        return (f"{label}: {TUNED_ON_TEST}: fused with weights tuned on {self.turns} of the {self.judged} judged "
                f"turns it is scored on ({self.weights}); a held-out number needs weights tuned on other turns")


def weights_of(path: str | Path) -> Path | None:
    """The weights file a run of an ``apcir run`` directory was fused with, when it may include the turns the run
    holds (see the module doc); None for any other run (a list, a fixed baseline, an out-of-fold system, a run
    outside a run directory)."""
    path = Path(path)
    name = run_stem(path)
    folder = path.parent
    if folder.name == "systems" and (folder.parent / "config.json").exists():
        layout = RunLayout(folder.parent)
        system = name.split("+", 1)[0]  # a re-ranked system keeps its base's weights
        from apcir.fusion.systems import SYSTEMS

        if system not in SYSTEMS or SYSTEMS.get(system).kind != "tuned" or _cross_validated(layout):
            return None
        own = layout.system_weights(system)
        return own if own.exists() else (layout.weights if layout.weights.exists() else None)
    layout = RunLayout(folder)
    if (name == "fused" or name.startswith("fused+")) and layout.config.exists() and layout.weights.exists():
        return layout.weights
    return None


def _cross_validated(layout: RunLayout) -> bool:
    from apcir.io import read_json

    try:
        config = read_json(layout.config, "run config")
    except ApcirError:
        return False
    weights = ((config.get("fusion") or {}).get("weights") or {}) if isinstance(config, dict) else {}
    return isinstance(weights, dict) and weights.get("source", "cv") == "cv"


def tuned_turns(weights: WeightsFile, run: Mapping[str, object], qrels: Qrels, where: str) -> TunedOnTest | None:
    """How many judged turns of ``run`` (same id, same judgements) ``weights`` were tuned on; None when none
    were, or the weights do not list their tuning turns."""
    from apcir.fusion.tuning import tuned_on_overlap

    judged = {t: qrels[t] for t in run if t in qrels}
    overlap = tuned_on_overlap(weights, judged)
    return TunedOnTest(overlap, len(judged), where) if overlap else None


def run_tuned_on_test(path: str | Path, run: Mapping[str, object], qrels: Qrels) -> TunedOnTest | None:
    """:func:`tuned_turns` for the run at ``path``, with the weights its run directory says it was fused with."""
    found = weights_of(path)
    if found is None:
        return None
    return tuned_turns(load_weights(found), run, qrels, str(found))
