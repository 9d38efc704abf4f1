"""Byte-reproducible outputs: `apcir report` twice on one run directory writes the same bytes, and an
`apcir run demo` killed with SIGKILL at three stages, then resumed, leaves the bytes an uninterrupted one leaves,
apart from the files that exist to record times and machines (:data:`apcir.contract.layout.VOLATILE_FILES`).

Every command runs as a separate process with its own ``PYTHONHASHSEED``, so an output that depends on the order a
set or dict of strings happens to have in one process differs here. The uninterrupted run is the suite's shared
demo run (tests/shared.py: ``apcir run demo`` in a process of its own); the killed and resumed one runs the same
command in a folder whose ``indexes/`` links to the shared run's index (so the two runs' ``config.json`` are alike).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from shared import DEMO_INDEX, DEMO_RUN

import apcir as apcir_package
from apcir.contract.layout import RunLayout, is_volatile

pytestmark = pytest.mark.slow
PATIENCE = 1800.0  # seconds one run may take on a loaded 2-core machine


def apcir(*args: str) -> list[str]:
    return [sys.executable, "-m", "apcir", *args]


def environment(seed: int) -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": str(seed)}


def workdir(root: Path, name: str, index: Path) -> Path:
    """A folder to run the demo in, its ``indexes/`` the shared index folder."""
    folder = root / name
    folder.mkdir()
    (folder / "indexes").symlink_to(index, target_is_directory=True)
    return folder


def run_demo(cwd: Path, seed: int) -> None:
    done = subprocess.run(apcir("run", "demo", "--no-progress"), cwd=cwd,
                          env=environment(seed), capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-3000:]


def contents(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but the volatile ones, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not is_volatile(p)}


def differences(a: Path, b: Path) -> list[str]:
    left, right = contents(a), contents(b)
    return sorted({name for name in left.keys() | right.keys() if left.get(name) != right.get(name)})


def test_two_reports_on_one_run_directory_are_the_same_bytes(demo, tmp_path):
    for n, seed in ((1, 11), (2, 12)):
        done = subprocess.run(apcir("report", str(demo.run_dir), "-o", f"report-{n}"), cwd=tmp_path,
                              env=environment(seed), capture_output=True, text=True, timeout=PATIENCE)
        assert done.returncode == 0, done.stderr
    first, second, by_run = tmp_path / "report-1", tmp_path / "report-2", demo.run_dir / "report"
    written = contents(first)
    assert {"report.md", "demo-levels-ci.pdf", "demo-weight-landscape.pdf", "demo-levels-ci.png",
            "tables/table-overall.csv"} <= set(written)
    assert not any(is_volatile(first / name) for name in written)  # nothing of a report is excused
    assert differences(first, second) == []
    assert differences(first, by_run) == []  # and the report `apcir run` wrote, a third process
    for name, data in written.items():
        if name.endswith(".pdf"):
            assert b"/CreationDate" not in data, name
    text = "".join(data.decode("latin-1") for data in written.values()) + (demo.run_dir / "inspect.html").read_text()
    for folder in (demo.root, tmp_path, Path(apcir_package.__file__).parents[1]):  # no absolute path inside
        assert str(folder) not in text


def kill_during(cwd: Path, seed: int, stage: str, ready: Callable[[Path], bool] = lambda run: True) -> None:
    """Start the demo in ``cwd`` and SIGKILL it once ``stage`` has begun (the stage ledger says it is unfinished)
    and ``ready(run_dir)`` holds."""
    ledger = RunLayout(cwd / DEMO_RUN).stages
    with (cwd / f"killed-at-{stage}.log").open("w") as log:
        process = subprocess.Popen(apcir("run", "demo", "--no-progress"), cwd=cwd,
                                   env=environment(seed), stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        deadline = time.monotonic() + PATIENCE
        try:
            while not (started(ledger, stage) and ready(cwd / DEMO_RUN)):
                assert process.poll() is None, f"the run ended before it was inside {stage}"
                assert time.monotonic() < deadline, f"{stage} did not begin in {PATIENCE:.0f} s"
                time.sleep(0.02)
        finally:
            os.killpg(process.pid, signal.SIGKILL)  # the run and any process it started
            process.wait()
    assert process.returncode == -signal.SIGKILL
    assert started(ledger, stage), f"{stage} finished before the kill"


def started(ledger: Path, stage: str) -> bool:
    """The ledger (written atomically) records ``stage`` as begun and not finished."""
    if not ledger.exists():
        return False
    entry = json.loads(ledger.read_text()).get(stage)
    return entry is not None and not entry["finished"]


def test_a_run_killed_at_three_stages_then_resumed_equals_an_uninterrupted_one(demo, tmp_path):
    resumed = workdir(tmp_path, "resumed", demo.root / DEMO_INDEX.parent)
    # retrieve: once one of its three lists is on disk and the others are not
    kill_during(resumed, 2, "retrieve", lambda run: RunLayout(run).list_run("rewrite").exists())
    kill_during(resumed, 3, "fuse")
    kill_during(resumed, 4, "evaluate")
    run_demo(resumed, seed=5)
    assert differences(demo.run_dir, resumed / DEMO_RUN) == []
    made = set(contents(resumed / DEMO_RUN))
    assert {"fused.run", "responses.jsonl", "submission.json", "metrics.json", "inspect.html", "report/report.md",
            "report/demo-weight-landscape.pdf", "lists/third.qvec.npz", "systems/apcir.run.gz"} <= made
