"""The names of apcir's public Python API: defined in the modules of :mod:`apcir.api`, re-exported by it and
(loaded on first use) by ``apcir`` itself. Written here once, so that ``import apcir`` need not import the API to
know them."""

PUBLIC = (
    "Experiment",
    "Run",
    "RunDirectory",
    "Table",
    "TurnView",
    "collection",
    "compare",
    "evaluate",
    "experiment_names",
    "export",
    "fuse",
    "load_run",
    "nugget_recall",
    "qrels",
    "quiet",
    "reformulate",
    "rerank",
    "respond",
    "retrieve",
    "save_run",
    "topics",
    "tune",
    "validate",
)
