"""Seconds each test file took in a ``make test`` run, which orders the files (tests/conftest.py).

``make test`` hands whole files to its two workers (``--dist loadfile``), in the order tests/conftest.py gives
them: the files that do not read the demo run first (the demo is built in the background meanwhile), each kind
longest first, so the long files do not start last and leave one worker idle at the end. The seconds come from
``tests/durations.json``; a file missing from it counts as short. Stale figures only make a run slower, never
change what runs. To refresh them after a ``make test`` run with ``PYTEST_ADDOPTS=--durations=0``::

    python tests/file_order.py make-test.log > tests/durations.json
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
TABLE = HERE / "durations.json"


def read() -> dict[str, float]:
    """``{test file (relative to the repository): seconds}``; empty when there is no table."""
    if not TABLE.exists():
        return {}
    return {str(k): float(v) for k, v in json.loads(TABLE.read_text(encoding="utf-8")).items()}


def from_log(text: str) -> dict[str, float]:
    """Seconds per file from pytest's ``--durations`` lines (``12.34s call tests/x/test_y.py::test_z``)."""
    seconds: Counter[str] = Counter()
    for match in re.finditer(r"^([\d.]+)s (?:setup|call|teardown)\s+(tests/\S+?\.py)::", text, re.M):
        seconds[match.group(2)] += float(match.group(1))
    return {name: round(value, 1) for name, value in sorted(seconds.items())}


if __name__ == "__main__":
    table = from_log(Path(sys.argv[1]).read_text(encoding="utf-8", errors="replace"))
    if not table:
        sys.exit("no --durations lines in the log (run make test with PYTEST_ADDOPTS=--durations=0)")
    print(json.dumps(table, indent=1, sort_keys=True))
