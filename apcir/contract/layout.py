"""Where everything lives in a run directory of ``apcir run``: one record owns every path.

Vocabulary: a *list* is one of the three per-reformulation retrievals
(``lists/rewrite.run``, ...); a *system* is a run that is evaluated (APCIR and its
baselines, ``systems/<system>.run``); the *fused run* is the run a submission holds.
All three are TREC run files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import overload

from apcir.contract.fusion import FusionRecord
from apcir.contract.reformulations import LIST_NAMES
from apcir.contract.runs import is_run_file, run_stem

RUN_SUFFIX = ".run.gz"
"""Lists and systems are written gzipped (read transparently everywhere runs are read); ``fused.run``, the run a
user submits and reads, is plain text."""

VOLATILE_FILES: dict[str, str] = {
    "timings.json": "the seconds each stage took in this invocation (a reused stage: 0)",
    "stages.json": "each stage's input fingerprint (the same for the same inputs) and the seconds it took",
    "environment.json": "the machine, Python, library versions and git commit that made the run, and the index's "
                        "manifest (its path, when it was built, how long that took)",
    "*.summary.json": "what a reformulation or response stage did in its last invocation: seconds, LLM requests, "
                      "cache hits, cost, when it ran and the paths it was given",
    ".*.lock": "the lock of an output (``.apcir.lock``: the run directory's): which process held it last, on which "
               "host, until when",
    "error.log": "the traceback of an internal error, where one happened",
}
"""The files of a run directory that exist to record times, machines or paths: they may differ between two runs
of the same experiment (a killed-then-resumed one too), matched by file name anywhere under the run directory.
Every other file of ``apcir run``, ``apcir report`` and ``apcir inspect`` is the same bytes for the same inputs and
settings: figures carry no creation date (``SOURCE_DATE_EPOCH``'s where it is set), gzip and ``.npz`` archives no
time of writing, no output an absolute path it was not given. One more exception, inside records: a turn an LLM
answered keeps the ``seconds`` its request took, whether the answer was ``cached`` and the requests it cost
(``usage.requests``, 0 from the cache); the answer itself is the cache's on a re-run. An offline run, such as the
demo, has none of those to differ."""


def is_volatile(path: Path) -> bool:
    """Whether ``path`` (in a run directory) is one of :data:`VOLATILE_FILES`."""
    from fnmatch import fnmatchcase

    return any(fnmatchcase(Path(path).name, pattern) for pattern in VOLATILE_FILES)


class InRun:
    """A file or folder of a run directory by its fixed name, read like a property: with ``weights =
    InRun("weights.json")`` in :class:`RunLayout`, ``layout.weights`` is ``layout.root / "weights.json"``."""

    def __init__(self, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, layout: None, owner: type | None = None) -> InRun: ...

    @overload
    def __get__(self, layout: RunLayout, owner: type | None = None) -> Path: ...

    def __get__(self, layout: RunLayout | None, owner: type | None = None) -> Path | InRun:
        return self if layout is None else layout.root / self.name

    def __set__(self, layout: RunLayout, value: Path) -> None:
        raise AttributeError(f"{self.name}: a run directory's paths follow from its root")


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run directory (``runs/<name>/`` by default)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    # ---- what the experiment was ----------------------------------------------------------
    config = InRun("config.json")
    environment = InRun("environment.json")
    stages = InRun("stages.json")
    timings = InRun("timings.json")
    lock = InRun(".apcir.lock")

    # ---- reformulation and retrieval --------------------------------------------------------
    reformulations = InRun("reformulations.jsonl")
    manual_reformulations = InRun("reformulations-manual.jsonl")
    levels = InRun("levels.tsv")
    annotator_levels = InRun("levels-annotators.tsv")
    """The oracle levels of ``[fusion] levels = "annotators"`` (the topics' PTKB provenance)."""

    lists_dir = InRun("lists")

    def list_run(self, name: str) -> Path:
        """``lists/<name>.run.gz``: rewrite, rewrite_response, third (the fused lists) or manual."""
        return self.lists_dir / f"{name}{RUN_SUFFIX}"

    def list_runs(self) -> dict[str, Path]:
        """Every list on disk (the three and ``manual`` when built), by name."""
        return {run_stem(p): p for p in sorted(self.lists_dir.glob("*.run*")) if is_run_file(p)}

    def lists(self) -> dict[str, Path]:
        """The three lists APCIR fuses, in weight order."""
        return {name: self.list_run(name) for name in LIST_NAMES}

    @staticmethod
    def query_vectors(run_path: Path) -> Path:
        """Where the query vectors of a list's run are kept (``lists/third.run.gz`` -> ``lists/third.qvec.npz``)."""
        return run_path.with_name(f"{run_stem(run_path)}.qvec.npz")

    tune_dir = InRun("tune")
    """The tuning leg (weights source ``tune``): its reformulations, lists and weights."""

    def tuned_weights(self, variant: str | None) -> Path:
        """The tuning leg's weights of the primary system (``variant`` None) or of another tuned system."""
        return self.tune_dir / ("weights.json" if variant is None else f"weights-{variant}.json")

    # ---- fusion and re-ranking ----------------------------------------------------------------
    weights = InRun("weights.json")
    weights_folds = InRun("weights-folds.json")
    systems_dir = InRun("systems")

    def system(self, name: str) -> Path:
        """``systems/<name>.run.gz`` (a re-ranked one is ``<system>+<re-ranker>``): where fusion writes a system."""
        return self.systems_dir / f"{name}{RUN_SUFFIX}"

    def system_run(self, name: str, record: FusionRecord | None = None) -> Path:
        """Where a system's run is: the list it is (``record.refers``, e.g. ``list-rewrite`` is
        ``lists/rewrite.run.gz``: stored once), else :meth:`system`."""
        if record is not None and name in record.refers:
            return self.root / record.refers[name]
        return self.system(name)

    def system_runs(self, record: FusionRecord | None = None) -> dict[str, Path]:
        """Every system's run on disk, by name: the files of ``systems/`` and the lists the record refers to."""
        found = {run_stem(p): p for p in sorted(self.systems_dir.glob("*.run*")) if is_run_file(p)}
        if record is not None:
            found.update({name: self.root / path for name, path in record.refers.items()
                          if (self.root / path).exists()})
        return found

    def system_weights(self, name: str) -> Path:
        """The weights of a tuned system other than APCIR (APCIR's are ``weights.json``), tuned on all judged turns."""
        return self.systems_dir / f"{name}.weights.json"

    @property
    def fusion_record(self) -> Path:
        """What fusion built and how the weights were obtained (:class:`apcir.contract.fusion.FusionRecord`)."""
        return self.systems_dir / "fusion.json"

    fused = InRun("fused.run")

    def reranked_fused(self, key: str) -> Path:
        return self.root / f"fused+{key}.run"

    # ---- responses, submission, evaluation ----------------------------------------------------
    ptkb_run = InRun("ptkb.run")

    def ptkb_baseline(self, name: str) -> Path:
        return self.root / "ptkb" / f"{name}.run"

    responses = InRun("responses.jsonl")

    def submission(self, suffix: str) -> Path:
        return self.root / f"submission{suffix}"

    metrics = InRun("metrics.json")
    report_dir = InRun("report")
    inspector = InRun("inspect.html")
