"""The bundled ``ikat25-test-ptkb`` qrels: NIST's iKAT 2025 PTKB-statement qrels with apcir's statement ids.

NIST's file (``offline/ptkb/qrels-ptkb-nist.trec`` of irlabamsterdam/ikat2025, CC BY 4.0) names a statement
``ptkb-<conversation>-<i>``, ``i`` its 0-based position in the conversation's ``ptkb`` list; apcir numbers
2025 statements by their 1-based position (as its PTKB rankings and the 2023 qrels do), so the statement
``ptkb-1-1-16`` is ``17`` here. Nothing else changes (same turns, same grades 0-4, same line order).

Regenerate with ``python -m apcir.datasets.ikat25_ptkb NIST_FILE [OUT]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from apcir.errors import ApcirError
from apcir.io import iter_lines, write_text


def convert_line(line: str) -> str:
    """One NIST line with the statement id as apcir numbers it."""
    turn, zero, statement, grade = line.split()
    conversation = turn.rpartition("_")[0]
    prefix = f"ptkb-{conversation}-"
    if not statement.startswith(prefix) or not statement[len(prefix):].isdigit():
        raise ApcirError(f"statement id {statement!r} is not ptkb-{conversation}-<i> for turn {turn}")
    return f"{turn} {zero} {int(statement[len(prefix):]) + 1} {grade}\n"


def main(args: list[str]) -> None:
    source = Path(args[0])
    out = Path(args[1]) if len(args) > 1 else Path(__file__).resolve().parents[2] / "qrels" / "ikat25-test-ptkb.qrels"
    write_text(out, "".join(convert_line(line) for _, line in iter_lines(source, "PTKB qrels") if line.strip()))
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
