"""The systems table of a run directory, as every front door shows it: ``apcir run``'s terminal table, the Python
``RunDirectory.table()`` (and so the notebook), in the report's scale and with its marks.

One scale (x100), one set of marks (``†`` / ``↓`` from the report's correction family: every system against the
baseline, per measure, so a pair is marked the same in every table), the judged turns each mean is over (``n``),
and "tuned on test" where the weights were tuned on the qrels the numbers use.
"""

from __future__ import annotations

from dataclasses import dataclass

from apcir.evaluation.results import RunMetrics

TUNED_LABEL = " [tuned on test]"


@dataclass(frozen=True)
class SystemRow:
    """One system as the tables show it."""

    system: str
    label: str
    """The registry's label, with ``[tuned on test]`` when it is, and ``(baseline)`` for the baseline."""
    means: dict[str, float]
    """Fractions, as trec_eval gives them."""
    marks: dict[str, str]
    """Per measure: ``†``, ``↓`` or ``""``."""
    n: int
    """Judged turns averaged."""

    def cell(self, measure: str) -> str:
        """The mean x100 with its mark, as every table shows it (one decimal)."""
        return f"{100 * self.means[measure]:.1f}{self.marks.get(measure, '')}"


@dataclass(frozen=True)
class SystemsTable:
    rows: list[SystemRow]
    caption: str
    """What the numbers are: scale, marks (with the test and correction) and n."""


def systems_table(metrics: RunMetrics) -> SystemsTable:
    """Every system of ``metrics``: the registry's order, each re-ranked system right after the one it re-ranks."""
    from apcir.evaluation.tables import family_size, family_tests
    from apcir.fusion.systems import SYSTEMS

    order: list[str] = []
    for name in [s for s in SYSTEMS.names() if s in metrics.systems] + [s for s in metrics.systems if s not in SYSTEMS]:
        if metrics.systems[name].base is None:
            order += [name] + [s for s, r in metrics.systems.items() if r.base == name]
    order += [s for s in metrics.systems if s not in order]
    markers = family_tests([metrics], metrics.baseline, metrics.significance)
    rows = []
    for name in order:
        result = metrics.systems[name]
        label = (result.label + (TUNED_LABEL if result.tuned_on_test else "")
                 + (" (baseline)" if name == metrics.baseline else ""))
        marks = {m: markers[(name, m)].marker for m in metrics.measures if (name, m) in markers}
        rows.append(SystemRow(name, label, dict(result.means), marks, len(result.per_turn)))
    marked = (f"; †/↓: significantly better/worse than {metrics.baseline} "
              f"({metrics.significance.caption(family_size(markers))})") if markers else ""
    return SystemsTable(rows, f"x100{marked}; n: judged turns averaged")
