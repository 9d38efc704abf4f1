"""A learned matcher trained twice on the same labels is the same bytes (issue 49): in two processes with other
string hash seeds (a set's order, which the IDF sums followed) and other BLAS and OpenMP thread counts. Before,
weights differed in their last digits from one process to the next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TEXTS = ["apples are red and crisp in autumn", "bananas are yellow tropical fruit",
         "the train leaves at noon from platform nine", "cats sleep a lot during the day",
         "dogs bark loudly at strangers", "water boils at 100 degrees celsius"]


def _env(seed: int, threads: int) -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": str(seed), "OPENBLAS_NUM_THREADS": str(threads),
            "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


@pytest.mark.slow  # two apcir processes
def test_training_twice_writes_the_same_bytes(tmp_path):
    turns = [f"1-{c}_{t}" for c in (1, 2) for t in (1, 2, 3)]
    nuggets, responses, labels = tmp_path / "nuggets.jsonl", tmp_path / "responses.json", tmp_path / "labels.tsv"
    nuggets.write_text("".join(json.dumps({"turn_id": t, "nugget_id": str(i), "text": x}) + "\n"
                               for t in turns for i, x in enumerate(TEXTS, start=1)))
    said = {"A": {0, 2, 4}, "B": {1, 3}, "C": {5, 0}}
    responses.write_text(json.dumps({t: {run: " ".join(" ".join(TEXTS[i].split()[:4]).capitalize() + "."
                                                       for i in sorted(covered)) for run, covered in said.items()}
                                     for t in turns}))
    flips = {("1-1_2", "A", 1), ("1-2_3", "B", 4), ("1-1_1", "C", 3)}  # a few labels against the words
    labels.write_text("".join(f"{t}\t{run}\t{i + 1}\t{int((i in covered) != ((t, run, i) in flips))}\n"
                              for t in turns for run, covered in said.items() for i in range(len(TEXTS))))
    apcir = Path(sys.executable).with_name("apcir")
    written = []
    for seed, threads in ((1, 1), (2, 2)):
        out = tmp_path / f"model-{seed}.json"
        subprocess.run([str(apcir), "nuggets", "train", "--labels", str(labels), "--nuggets", str(nuggets),
                        "--responses", str(responses), "--encoder", "tfidf", "--folds", "3", "-o", str(out)],
                       env=_env(seed, threads), check=True, capture_output=True, text=True)
        written.append(out.read_bytes())
    assert written[0] == written[1]
    model = json.loads(written[0])
    assert model["nested_kappa"] is not None and len(model["weights"]) == 9
