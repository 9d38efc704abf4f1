"""The contract: the records every stage exchanges, and the files they live in.

Nothing here imports a stage. Stages read and write these records and nothing
else, so any stage can be re-run alone on the artifacts of the one before.

- :mod:`~apcir.contract.records`: :class:`Turn`, :class:`HistoryEntry`, :class:`Passage`, ``Run``, ``Qrels``;
- :mod:`~apcir.contract.reformulations`: levels, the three list names, the reformulation records (JSONL);
- :mod:`~apcir.contract.runs`: the one ranking order and TREC run files;
- :mod:`~apcir.contract.responses`: the response records (JSONL) and their inline citations;
- :mod:`~apcir.contract.levels`: ``turn_id<TAB>level`` files;
- :mod:`~apcir.contract.weights`: ``weights.json``.
"""

from apcir.contract.levels import load_levels, write_levels
from apcir.contract.records import HistoryEntry, Passage, Qrels, Run, Turn
from apcir.contract.reformulations import (
    LEVELS,
    LIST_NAMES,
    Level,
    QueryInput,
    ReformulationOutput,
    ReformulationRecord,
    Usage,
    levels_of,
    load_reformulations,
    with_fallbacks,
)
from apcir.contract.responses import ResponseRecord, cited_numbers, load_responses, strip_citations
from apcir.contract.runs import RunFile, load_run, ranking, read_run_file, trec_order, write_run
from apcir.contract.weights import LevelWeights, TunedOn, WeightsFile, load_weights

__all__ = [
    "LEVELS",
    "LIST_NAMES",
    "HistoryEntry",
    "Level",
    "LevelWeights",
    "Passage",
    "Qrels",
    "QueryInput",
    "ReformulationOutput",
    "ReformulationRecord",
    "ResponseRecord",
    "Run",
    "RunFile",
    "TunedOn",
    "Turn",
    "Usage",
    "WeightsFile",
    "cited_numbers",
    "levels_of",
    "load_levels",
    "load_reformulations",
    "load_responses",
    "load_run",
    "load_weights",
    "ranking",
    "read_run_file",
    "strip_citations",
    "trec_order",
    "with_fallbacks",
    "write_levels",
    "write_run",
]
