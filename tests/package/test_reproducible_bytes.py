"""The writers behind byte-reproducible outputs: archives without the time of writing, figures without a creation
date (SOURCE_DATE_EPOCH's when it is set), records of when dated SOURCE_DATE_EPOCH when it is set, and one list of
the run directory's volatile files."""

from __future__ import annotations

import json
import time
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

from apcir.contract.layout import VOLATILE_FILES, RunLayout, is_volatile
from apcir.errors import ApcirError
from apcir.io import timestamp


@pytest.fixture(autouse=True)
def _no_source_date(monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)


def later(monkeypatch, seconds: float) -> None:
    """The clock (as zipfile and datetime read it) moved ``seconds`` ahead."""
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + seconds)


def test_query_vectors_are_the_same_bytes_whenever_they_are_written(tmp_path, monkeypatch):
    from apcir.retrieval.stage import load_query_vectors, save_query_vectors

    matrix = sp.csr_matrix(np.array([[0, 1.5, 0], [2.0, 0, 0.25]], dtype=np.float32))
    save_query_vectors(tmp_path / "a.qvec.npz", ["9-1_1", "9-1_2"], matrix)
    later(monkeypatch, 3 * 86400)
    save_query_vectors(tmp_path / "b.qvec.npz", ["9-1_1", "9-1_2"], matrix)
    assert (tmp_path / "a.qvec.npz").read_bytes() == (tmp_path / "b.qvec.npz").read_bytes()
    with zipfile.ZipFile(tmp_path / "a.qvec.npz") as archive:  # numpy dates every member 1980-01-01
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    loaded = load_query_vectors(tmp_path / "a.qvec.npz")
    assert (loaded["9-1_2"].toarray() == matrix[1].toarray()).all()


def test_a_record_of_when_is_dated_source_date_epoch_when_it_is_set(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1000000000")  # 2001-09-09 01:46:40 UTC
    assert timestamp() == "2001-09-09T01:46:40+00:00"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ApcirError, match="SOURCE_DATE_EPOCH='yesterday'"):
        timestamp()


def figure():
    from apcir.evaluation.plots import _pyplot

    fig, axis = _pyplot().subplots(figsize=(2, 2))
    axis.plot([0, 1], [1, 0], marker="o", label="x")
    axis.legend()
    return fig


def test_figures_carry_no_creation_date_and_svg_ids_are_salted(tmp_path):
    from apcir.evaluation.plots import write_figure

    fig = figure()
    for suffix in ("pdf", "svg", "png"):
        write_figure(fig, tmp_path / f"a.{suffix}")
        write_figure(fig, tmp_path / f"b.{suffix}")
        assert (tmp_path / f"a.{suffix}").read_bytes() == (tmp_path / f"b.{suffix}").read_bytes(), suffix
    assert b"/CreationDate" not in (tmp_path / "a.pdf").read_bytes()
    assert b"<dc:date>" not in (tmp_path / "a.svg").read_bytes()


def test_a_figure_is_dated_source_date_epoch_when_it_is_set(tmp_path, monkeypatch):
    from apcir.evaluation.plots import write_figure

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1000000000")
    write_figure(figure(), tmp_path / "a.pdf")
    assert b"/CreationDate (D:20010909014640Z)" in (tmp_path / "a.pdf").read_bytes()


def test_the_volatile_files_are_the_records_of_times_and_machines():
    layout = RunLayout("runs/demo")
    for path in (layout.timings, layout.stages, layout.environment, layout.lock, layout.root / "error.log",
                 layout.root / "responses.summary.json", layout.tune_dir / "reformulations.summary.json",
                 layout.root / ".responses.jsonl.lock"):
        assert is_volatile(path), path
    for path in (layout.config, layout.fused, layout.metrics, layout.responses, layout.weights, layout.inspector,
                 layout.report_dir / "report.md", layout.list_run("third"), layout.fusion_record):
        assert not is_volatile(path), path
    assert all(reason for reason in VOLATILE_FILES.values())


def test_torch_runs_on_its_own_openmp_whatever_parallel_kernel_ran_first():
    """A numba kernel run before torch is loaded (a run resumed at the fusion stage) must not hand torch another
    OpenMP runtime: that changed a model's outputs in their last bits, and so the entropy baseline's run."""
    import os
    import subprocess
    import sys

    script = (
        "import json, apcir, numba, numpy as np\n"
        "@numba.njit(parallel=True)\n"
        "def total(x):\n"
        "    s = 0.0\n"
        "    for i in numba.prange(x.shape[0]):\n"
        "        s += x[i]\n"
        "    return s\n"
        "total(np.ones(1000))\n"
        "import torch\n"
        "torch.ones(64, 64) @ torch.ones(64, 64)\n"
        "maps = open('/proc/self/maps').read().split()\n"
        "print(json.dumps([numba.threading_layer(), sorted({p for p in maps if 'libgomp' in p})]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    layer, loaded = json.loads(done.stdout)
    assert layer == "workqueue"
    assert loaded and all("/torch/" in path for path in loaded), loaded
