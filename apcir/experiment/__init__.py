"""An experiment: one config file, every stage in order, each reused while its inputs do not change.

* :func:`apcir.experiment.pipeline.run_experiment` (``apcir run``);
* :class:`apcir.experiment.config.ExperimentConfig`: one section per stage, each the stage's own settings record;
* :class:`apcir.experiment.ledger.StageLedger`: ``stages.json``, the fingerprints that decide what is redone.
"""
