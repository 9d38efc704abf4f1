"""apcir: adaptive personalised conversational search on TREC iKAT.

The public Python API (:mod:`apcir.api`; loaded on first use, so ``import apcir`` stays quick):

Data
    ``topics(name_or_path)``, ``qrels(name_or_path)``, ``collection(name_or_path)``: bundled names
    (``ikat23-test``), ir_datasets ids (``trec-ikat/2023/test``) or files.
Runs
    ``load_run(path)`` -> ``Run`` (a dict with ``.to_ranx()``, ``.to_pandas()``), ``save_run(run, path)``.
Evaluation
    ``evaluate(runs, qrels, measures)`` and ``compare(runs, qrels, measures, baseline=, test=, correction=)``
    return a ``Table`` (``.to_pandas()``); measures as ir-measures or trec_eval name them.
Experiments
    ``Experiment.from_config("demo").run()`` -> ``RunDirectory`` (``.systems``, ``.metrics``, ``.weights``,
    ``.turn(turn_id)``, ``.reformulations``, ``.responses``, ``.table()``).
Stages
    ``reformulate``, ``retrieve``, ``tune``, ``fuse``, ``rerank``, ``respond``, ``export``, ``validate``.
Output
    ``quiet()`` silences warnings and progress bars.

PyTerrier transformers are in :mod:`apcir.pyterrier`; ``import apcir.irds`` registers the iKAT ids with
ir_datasets.
"""

import os as _os
from typing import Any as _Any

from apcir._public import PUBLIC
from apcir._version import __version__ as __version__

# Reproducible numbers: the math libraries must not pick fewer threads when the machine is busy (that changes
# the order of reductions, and so the last bits of a model's scores). Set before any of them is loaded; a
# value the user set is kept.
for _name in ("OMP_DYNAMIC", "MKL_DYNAMIC"):
    _os.environ.setdefault(_name, "FALSE")
# ... and a model must compute the same bits whatever ran before it in the process. Numba's OpenMP layer loads the
# system's libgomp; when one of apcir's parallel kernels (the weight search, the retrieval engine) ran before
# torch was loaded, torch then ran on that libgomp instead of its own, and a model's outputs changed in their last
# bits (a run resumed at the fusion stage gave other entropy weights than an uninterrupted one). Numba's own
# work-queue layer loads no OpenMP at all: as fast here (benchmarks/fusion.py), and torch always has its own.
_os.environ.setdefault("NUMBA_THREADING_LAYER", "workqueue")

__all__ = list(PUBLIC)


def __getattr__(name: str) -> _Any:
    if name in __all__:
        from apcir import api

        return getattr(api, name)
    raise AttributeError(f"module 'apcir' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
