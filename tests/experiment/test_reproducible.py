"""Byte-reproducible outputs: `apcir report` twice on one run directory writes the same bytes, and an
`apcir run demo` killed with SIGKILL at three stages, then resumed, leaves the bytes an uninterrupted one leaves,
apart from the files that exist to record times and machines (:data:`apcir.contract.layout.VOLATILE_FILES`).

Every command runs as a separate process with its own ``PYTHONHASHSEED``, so an output that depends on the order a
set or dict of strings happens to have in one process differs here. The demo runs twice in all: once uninterrupted
(shared by both tests) and once killed and resumed, each in a folder of its own where ``indexes/`` links to one
shared index (the demo config's relative index and ``-o run`` make the two runs' ``config.json`` alike).
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
    done = subprocess.run(apcir("run", "demo", "-o", "run", "--no-progress"), cwd=cwd,
                          env=environment(seed), capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-3000:]


def contents(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but the volatile ones, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not is_volatile(p)}


def differences(a: Path, b: Path) -> list[str]:
    left, right = contents(a), contents(b)
    return sorted({name for name in left.keys() | right.keys() if left.get(name) != right.get(name)})


@pytest.fixture(scope="session")
def demo_reference(tmp_path_factory) -> tuple[Path, Path]:
    """``apcir run demo`` uninterrupted; returns (the folder it ran in, the shared index folder)."""
    root = tmp_path_factory.mktemp("reproducible")
    index = root / "indexes"
    index.mkdir()
    reference = workdir(root, "reference", index)
    run_demo(reference, seed=1)
    return reference, index


def test_two_reports_on_one_run_directory_are_the_same_bytes(demo_reference):
    reference, _ = demo_reference
    for n, seed in ((1, 11), (2, 12)):
        done = subprocess.run(apcir("report", "run", "-o", f"report-{n}"), cwd=reference,
                              env=environment(seed), capture_output=True, text=True, timeout=PATIENCE)
        assert done.returncode == 0, done.stderr
    first, second, by_run = reference / "report-1", reference / "report-2", reference / "run" / "report"
    written = contents(first)
    assert {"report.md", "demo-levels-ci.pdf", "demo-weight-landscape.pdf", "demo-levels-ci.png",
            "tables/table-overall.csv"} <= set(written)
    assert not any(is_volatile(first / name) for name in written)  # nothing of a report is excused
    assert differences(first, second) == []
    assert differences(first, by_run) == []  # and the report `apcir run` wrote, a third process
    for name, data in written.items():
        if name.endswith(".pdf"):
            assert b"/CreationDate" not in data, name
    text = "".join(data.decode("latin-1") for data in written.values()) + (reference / "run" / "inspect.html").read_text()
    for folder in (reference, Path(apcir_package.__file__).parents[1]):  # no absolute path inside
        assert str(folder) not in text


def kill_during(cwd: Path, seed: int, stage: str, ready: Callable[[Path], bool] = lambda run: True) -> None:
    """Start the demo in ``cwd`` and SIGKILL it once ``stage`` has begun (the stage ledger says it is unfinished)
    and ``ready(run_dir)`` holds."""
    ledger = RunLayout(cwd / "run").stages
    with (cwd / f"killed-at-{stage}.log").open("w") as log:
        process = subprocess.Popen(apcir("run", "demo", "-o", "run", "--no-progress"), cwd=cwd,
                                   env=environment(seed), stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        deadline = time.monotonic() + PATIENCE
        try:
            while not (started(ledger, stage) and ready(cwd / "run")):
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


def test_a_run_killed_at_three_stages_then_resumed_equals_an_uninterrupted_one(demo_reference):
    reference, index = demo_reference
    resumed = workdir(reference.parent, "resumed", index)
    # retrieve: once one of its three lists is on disk and the others are not
    kill_during(resumed, 2, "retrieve", lambda run: RunLayout(run).list_run("rewrite").exists())
    kill_during(resumed, 3, "fuse")
    kill_during(resumed, 4, "evaluate")
    run_demo(resumed, seed=5)
    assert differences(reference / "run", resumed / "run") == []
    made = set(contents(resumed / "run"))
    assert {"fused.run", "responses.jsonl", "submission.json", "metrics.json", "inspect.html", "report/report.md",
            "report/demo-weight-landscape.pdf", "lists/third.qvec.npz", "systems/apcir.run.gz"} <= made
