"""The smoke run of benchmarks/scale_curve.py: the growth curve at toy sizes (10,000 and 20,000 passages), as a user
runs it, so that it cannot rot (no time is asserted; the figures are whatever this machine gives)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_curve.py"


def load_script():
    spec = importlib.util.spec_from_file_location("scale_curve", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_curve"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_ids_are_clueweb22_shaped_and_in_number_order():
    curve = load_script()
    ids = [curve.passage_id(n) for n in (0, 7, 8, 799_999, 800_000, 123_456_789)]
    assert ids[0] == "clueweb22-en0000-00-00000:0" and all(len(i) == 27 for i in ids)
    assert ids == sorted(ids)
    assert [curve.passage_number(i) for i in ids] == [0, 7, 8, 799_999, 800_000, 123_456_789]


def test_chunks_are_deterministic_and_the_density_knob_sets_terms_a_passage():
    curve = load_script()
    rng = np.random.default_rng(0)
    source = sp.random(50, 2_000, density=0.12, format="csr", dtype=np.float32, random_state=rng)  # 240 terms
    source.sort_indices()
    dense, sparse = curve.Density(230.0), curve.Density(120.0)
    a, b = curve.chunk_matrix(source, 3, 2_000, dense), curve.chunk_matrix(source, 3, 2_000, dense)
    assert (a != b).nnz == 0 and (a != curve.chunk_matrix(source, 4, 2_000, dense)).nnz > 0
    assert abs(a.nnz / 2_000 - 230) < 8  # an added term that is already there is merged
    assert abs(curve.chunk_matrix(source, 3, 2_000, sparse).nnz / 2_000 - 120) < 5
    assert curve.keep_and_added(curve.Density(300.0), 240.0) == (1.0, 60.0)


@pytest.mark.slow
def test_the_curve_at_toy_sizes(demo, tmp_path):
    engines = ["embedded"] + [name for name, module in (("pisa", "pyterrier_pisa"), ("seismic", "seismic"))
                              if importlib.util.find_spec(module) is not None]
    env = {**os.environ, "APCIR_BENCH_CACHE": str(tmp_path), "APCIR_DEMO_INDEX": str(demo.index),
           "APCIR_DEMO_LISTS": str(demo.run_dir / "lists")}
    results = tmp_path / "results.json"
    command = [sys.executable, str(SCRIPT), "--results", str(results), "run", "--nice", "0", "--sizes", "10000",
               "20000", "--queries", "12", "--engines", *engines]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(results.read_text())["t230-q0-s2026"]
    for size in ("10000", "20000"):
        collection = figures[size]["collection"]
        assert collection["passages"] == int(size) and 220 < collection["terms_per_passage"] < 240
        for engine in engines:
            value = figures[size]["engines"][engine]
            assert "error" not in value, value
            assert value["build"]["build_s"] > 0 and value["build"]["disk_bytes"] > 0
            assert value["build"]["build_peak_rss_mib"] > 0
            search = value["search"]
            for kind, terms in (("rewrite", (30, 80)), ("long", (120, 200))):
                per = search["kinds"][kind]
                assert per["queries"] == 12 and terms[0] < per["mean_terms"] < terms[1]
                for k in ("k1000", "k100"):
                    assert per[k]["1t"]["p50_ms"] > 0 and per[k]["batch_2t_ms"] > 0
                    assert (per[k]["recall"] == 1.0) if engine == "embedded" else (0.3 < per[k]["recall"] <= 1.0)
                    assert (per[k]["2t"] is not None) == (engine == "embedded")
        assert not (tmp_path / "scale-curve" / "t230-q0-s2026" / f"n{size}" / "embedded").exists()  # deleted
    out = done.stdout
    assert "**Build and size**" in out and "**Queries: long**" in out
    projected = [line for line in out.splitlines() if line.startswith("| embedded | index on disk | 0.01M, 0.02M |")]
    assert len(projected) == 1 and (" GB |" in projected[0] or " TB |" in projected[0])
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)  # resumed: nothing to do
    assert again.returncode == 0 and again.stderr == "" and json.loads(results.read_text())["t230-q0-s2026"] == figures
