"""Where everything lives in a run directory of ``apcir run``: one record owns every path.

Vocabulary: a *list* is one of the three per-reformulation retrievals
(``lists/rewrite.run``, ...); a *system* is a run that is evaluated (APCIR and its
baselines, ``systems/<system>.run``); the *fused run* is the run a submission holds.
All three are TREC run files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run directory (``runs/<name>/`` by default)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    # ---- what the experiment was ----------------------------------------------------------
    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def environment(self) -> Path:
        return self.root / "environment.json"

    @property
    def stages(self) -> Path:
        return self.root / "stages.json"

    @property
    def timings(self) -> Path:
        return self.root / "timings.json"

    @property
    def lock(self) -> Path:
        return self.root / ".apcir.lock"

    # ---- reformulation and retrieval --------------------------------------------------------
    @property
    def reformulations(self) -> Path:
        return self.root / "reformulations.jsonl"

    @property
    def manual_reformulations(self) -> Path:
        return self.root / "reformulations-manual.jsonl"

    @property
    def levels(self) -> Path:
        return self.root / "levels.tsv"

    @property
    def annotator_levels(self) -> Path:
        """The oracle levels of ``[fusion] levels = "annotators"`` (the topics' PTKB provenance)."""
        return self.root / "levels-annotators.tsv"

    @property
    def lists_dir(self) -> Path:
        return self.root / "lists"

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

    @property
    def tune_dir(self) -> Path:
        """The tuning leg (weights source ``tune``): its reformulations, lists and weights."""
        return self.root / "tune"

    def tuned_weights(self, variant: str | None) -> Path:
        """The tuning leg's weights of the primary system (``variant`` None) or of another tuned system."""
        return self.tune_dir / ("weights.json" if variant is None else f"weights-{variant}.json")

    # ---- fusion and re-ranking ----------------------------------------------------------------
    @property
    def weights(self) -> Path:
        return self.root / "weights.json"

    @property
    def weights_folds(self) -> Path:
        return self.root / "weights-folds.json"

    @property
    def systems_dir(self) -> Path:
        return self.root / "systems"

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

    @property
    def fused(self) -> Path:
        return self.root / "fused.run"

    def reranked_fused(self, key: str) -> Path:
        return self.root / f"fused+{key}.run"

    # ---- responses, submission, evaluation ----------------------------------------------------
    @property
    def ptkb_run(self) -> Path:
        return self.root / "ptkb.run"

    def ptkb_baseline(self, name: str) -> Path:
        return self.root / "ptkb" / f"{name}.run"

    @property
    def responses(self) -> Path:
        return self.root / "responses.jsonl"

    def submission(self, suffix: str) -> Path:
        return self.root / f"submission{suffix}"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.json"

    @property
    def report_dir(self) -> Path:
        return self.root / "report"

    @property
    def inspector(self) -> Path:
        return self.root / "inspect.html"
