"""The result table every evaluation function returns: values as computed, shown x100 with their marks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from apcir.api.runs import pandas_module


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
        return pandas_module().DataFrame(self.rows, columns=self.columns)

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

