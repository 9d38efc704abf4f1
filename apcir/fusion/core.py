"""The fusion stage's core object: a turn's three lists and its level in, one fused ranking out.

:class:`LevelFusion` is what every front door fuses APCIR's lists with (each list min-max normalised, unless
``norm`` says otherwise, and summed with the weights of the turn's level): the per-turn pipeline
(:mod:`apcir.experiment.turns`), :func:`apcir.fuse` and PyTerrier's ``LevelFusion``. ``apcir run`` and ``apcir
fuse`` fuse APCIR among the other systems through :mod:`apcir.fusion.systems`, which computes the same
:func:`~apcir.fusion.linear.fuse_per_turn` (a test holds the two equal).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from apcir.contract.records import Run
from apcir.contract.weights import WeightsFile


@dataclass
class LevelFusion:
    """Each turn's lists normalised and summed with its level's weights; ``norm`` and ``depth`` default to the
    weights file's; a turn without a level is fused at ``missing_level`` (None: an error)."""

    weights: WeightsFile
    norm: str | None = None
    depth: int | None = None
    missing_level: str | None = "a"

    def __call__(self, lists: Sequence[Run], levels: Mapping[str, str]) -> Run:
        from apcir.fusion.linear import fuse_linear

        return fuse_linear(list(lists), levels, self.weights, self.norm, self.depth, missing_level=self.missing_level)
