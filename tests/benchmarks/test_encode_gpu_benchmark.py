"""The smoke run of benchmarks/encode_gpu.py: every table at toy sizes, as a user runs the script (no time is
asserted; the figures are whatever this machine gives)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "encode_gpu.py"


def test_encode_gpu_prints_its_tables_at_toy_sizes():
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--device", "cpu"], capture_output=True,
                          text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for title in ("splade-tiny: apcir on the device against today's encoder on the CPU",
                  "bfloat16 against float32, splade-tiny on the demo (cpu)",
                  "projected hours for ClueWeb22-B (116,800,000 passages)",
                  "padding share of token positions", "tokenising"):
        assert title in out
    equality = next(line for line in out.splitlines() if line.startswith("| apcir sliced head on cpu"))
    assert "| yes |" in equality  # the sliced head gives today's nonzeros
    for row in ("| apcir before (sentence-transformers), float32 |", "| apcir, float32 |", "| apcir, bfloat16 |",
                "| plain PyTorch loop, bfloat16 |", "| apcir index build --shard 0/2, float32 (auto), end to end |"):
        line = next(line for line in out.splitlines() if line.startswith(row))
        cells = [c.strip() for c in line.strip("|").split("|")]
        rate, per_cpu_second, hours, node = (float(c.replace(",", "")) for c in cells[4:8])
        assert rate > 0 and per_cpu_second > 0 and hours > 0 and abs(node * 8 - hours) <= 0.01 * hours + 0.1
