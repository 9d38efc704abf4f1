"""Runs: a TREC run as a dict (:class:`Run`), read and written as files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from apcir.api.data import PathLike
from apcir.contract.runs import run_stem
from apcir.contract.weights import WeightsFile
from apcir.errors import ApcirError


class Run(dict[str, dict[str, float]]):
    """A run: ``{turn_id: {passage_id: score}}`` (a dict, as pytrec_eval, ranx and ir-measures take it).

    ``weights``: the fusion weights it was fused with, when known (:func:`fuse`, or a run directory's fused run
    and tuned systems), so that :func:`evaluate` can say when it is scored on turns they were tuned on."""

    def __init__(self, data: Mapping[str, Mapping[str, float]] | None = None, name: str = "run", *,
                 weights: WeightsFile | None = None, weights_source: str = ""):
        super().__init__({t: dict(hits) for t, hits in (data or {}).items()})
        self.name = name
        self.weights = weights
        self.weights_source = weights_source

    def to_ranx(self) -> Any:
        """A ``ranx.Run`` of the same scores (``pip install ranx``), for ranx's fusion and comparison."""
        try:
            from ranx import Run as RanxRun
        except ImportError:  # pragma: no cover - depends on the environment
            raise ApcirError("to_ranx needs ranx: pip install ranx") from None
        return RanxRun({t: dict(hits) for t, hits in self.items() if hits}, name=self.name)

    def to_pandas(self) -> Any:
        """A DataFrame with PyTerrier's columns: qid, docno, score, rank (0-based), in trec_eval's order."""
        from apcir.contract.runs import ranking

        pd = pandas_module()
        rows = [(turn, doc, score, rank) for turn in sorted(self) for rank, (doc, score) in
                enumerate(ranking(self[turn]))]
        return pd.DataFrame(rows, columns=["qid", "docno", "score", "rank"])

    def save(self, path: PathLike, tag: str | None = None, depth: int | None = None) -> Path:
        """Write as a TREC run file (see :func:`save_run`)."""
        return save_run(self, path, tag=tag, depth=depth)


def load_run(path: PathLike) -> Run:
    """A TREC run file (``turn Q0 passage rank score tag``) as a :class:`Run` named after the file."""
    from apcir.contract.runs import load_run as _load
    from apcir.contract.weights import load_weights
    from apcir.evaluation.tuned import weights_of

    weights = weights_of(path)
    return Run(_load(Path(path)), name=run_stem(Path(path)),
               weights=load_weights(weights) if weights is not None else None,
               weights_source=str(weights) if weights is not None else "")


def save_run(run: Mapping[str, Mapping[str, float]], path: PathLike, tag: str | None = None,
             depth: int | None = None) -> Path:
    """Write ``run`` as a TREC run file (trec_eval's order, cut at ``depth``); returns the path."""
    from apcir.contract.runs import write_run

    name = getattr(run, "name", None)
    write_run({t: dict(h) for t, h in run.items()}, Path(path), tag=tag or name or "apcir", depth=depth)
    return Path(path)


def is_run(value: Any) -> bool:
    """``{turn: {passage: score}}`` (rather than ``{name: run or path}``)."""
    return isinstance(value, Mapping) and all(
        isinstance(hits, Mapping) and all(isinstance(s, (int, float)) for s in hits.values())
        for hits in value.values())


def one_run(value: Any, name: str) -> Run:
    if isinstance(value, (str, Path)):
        return load_run(value)
    if isinstance(value, Run):
        return value
    if is_run(value):
        return Run(value, name=name)
    raise ApcirError(f"{name}: not a run (a run file, or {{turn_id: {{passage_id: score}}}})")


def pandas_module() -> Any:
    try:
        import pandas
    except ImportError:  # pragma: no cover - depends on the environment
        raise ApcirError("this needs pandas: pip install pandas") from None
    return pandas
