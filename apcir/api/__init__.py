"""apcir's public Python API: what ``import apcir`` offers, kept stable.

Data::

    turns = apcir.topics("ikat23-test")            # or "trec-ikat/2023/test", or a topic file
    judgements = apcir.qrels("ikat23-test")
    passages = apcir.collection("ikat23-provenance")   # an iterator of Passage records

Runs (TREC run files; a run is ``{turn_id: {passage_id: score}}``, a dict)::

    run = apcir.load_run("runs/demo/fused.run")
    apcir.save_run(run, "copy.run")
    run.to_ranx(), run.to_pandas()

Evaluation (trec_eval's numbers; names as ir-measures or trec_eval write them)::

    apcir.evaluate({"apcir": run, "other": "other.run"}, "ikat23-test", ["nDCG@3", "RR", "Judged@10"])
    apcir.compare(runs, "ikat23-test", "paper", baseline="other", test="t-test", correction="holm")

Experiments (the same stages as ``apcir run``, resumable, in a run directory)::

    result = apcir.Experiment.from_config("demo").run()
    result.systems["apcir"], result.metrics, result.weights, result.turn("9-1_3")

The stage functions (:func:`reformulate`, :func:`retrieve`, :func:`tune`, :func:`fuse`,
:func:`rerank`, :func:`respond`, :func:`export`, :func:`validate`) take records and runs
in memory and call what the stage commands call.

Nothing here prints except through :mod:`apcir.console`; ``apcir.quiet()`` silences it.

The names are defined in the modules of this package, one per job: :mod:`apcir.api.data` (topics, qrels,
collections), :mod:`apcir.api.runs` (:class:`Run`), :mod:`apcir.api.tables` (:class:`Table`),
:mod:`apcir.api.evaluation` (:func:`evaluate`, :func:`compare`), :mod:`apcir.api.experiments`
(:class:`Experiment`, :class:`RunDirectory`) and :mod:`apcir.api.stages` (the stage functions); import them from
here (or from ``apcir``).
"""

from __future__ import annotations

from apcir._public import PUBLIC

# The public names (PUBLIC, written once), each from the module of its job.
from apcir.api.data import collection, qrels, quiet, topics  # noqa: F401
from apcir.api.evaluation import compare, evaluate  # noqa: F401
from apcir.api.experiments import Experiment, RunDirectory, TurnView, experiment_names  # noqa: F401
from apcir.api.runs import Run, load_run, save_run  # noqa: F401
from apcir.api.stages import export, fuse, nugget_recall, reformulate, rerank, respond, retrieve, tune, validate  # noqa: F401
from apcir.api.tables import Table  # noqa: F401
from apcir.settings import check_environment

# The environment variables apcir reads are checked when the API is first used (``apcir.evaluate``, ...), as the
# CLI checks them before a command: a malformed SOURCE_DATE_EPOCH is one ApcirError naming it here, instead of a
# bare ValueError from inside numpy the first time a function imports scipy.
check_environment()

__all__ = list(PUBLIC)
