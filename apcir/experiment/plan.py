"""From an experiment's config to its stage objects: which files each stage reads and writes, and its settings.

Each function builds one stage (see :mod:`apcir.contract.stage`); the stage
itself lives in its package (reformulation, retrieval, fusion, ...). Nothing
here computes anything: it only wires the config and the run directory's
layout (:class:`apcir.contract.layout.RunLayout`) to the stages.
"""

from __future__ import annotations

from pathlib import Path

from apcir import datasets
from apcir.contract.fusion import FusionRecord
from apcir.contract.layout import RunLayout
from apcir.contract.levels import ANNOTATORS
from apcir.contract.records import Turn
from apcir.contract.reformulations import LIST_NAMES, ReformulationRecord
from apcir.contract.weights import WeightsFile
from apcir.evaluation.inspector import TEMPLATE, InspectStage
from apcir.evaluation.results import RerankerInfo, RunMetrics
from apcir.evaluation.stage import EvaluateStage, ReportStage
from apcir.experiment.config import ExperimentConfig
from apcir.fusion.stage import FuseStage, TuneStage, tuning_variants
from apcir.fusion.systems import PRIMARY, SYSTEMS
from apcir.reformulation.settings import ReformulatorOptions
from apcir.reformulation.stage import ReformulateStage
from apcir.reranking.registry import RERANKERS
from apcir.reranking.settings import RerankSettings
from apcir.reranking.stage import RerankStage
from apcir.responses.ptkb import BM25, PTKB_METHODS
from apcir.responses.stage import PtkbStage, RespondStage
from apcir.retrieval.stage import RetrieveStage, resolved_dtype
from apcir.submission.stage import ExportStage, ValidateStage


def passages_file(config: ExperimentConfig) -> Path | None:
    source = config.retrieval.passages_source
    return datasets.collection_path(source) if source else None


def reformulate(config: ExperimentConfig, label: str, turns: list[Turn], options: ReformulatorOptions,
                out: Path) -> ReformulateStage:
    """The reformulation stage (``label``: reformulate, or its tuning or manual leg)."""
    return ReformulateStage.of(label, turns, options, out)


def retrieve(config: ExperimentConfig, label: str, index: Path, source: Path,
             records: dict[str, ReformulationRecord], fields: dict[str, str], outs: dict[str, Path]) -> RetrieveStage:
    return RetrieveStage.of(label, config.retrieval, index, source, records, fields, outs, config.name)


def tune(config: ExperimentConfig, layout: RunLayout, names: list[str], turns: list[Turn],
         records: dict[str, ReformulationRecord], lists: dict[str, Path]) -> TuneStage:
    weights = config.fusion.weights
    assert weights.tune_topics and weights.tune_qrels
    outs = {name: layout.tuned_weights(None if name == PRIMARY else name) for name in tuning_variants(names)}
    return TuneStage(lists, layout.tune_dir / "reformulations.jsonl", datasets.qrels_path(weights.tune_qrels),
                     weights.tune_qrels, weights.tune_topics, weights.search_settings(),
                     config.fusion.params(config.evaluation.rel_threshold), config.fusion.levels, outs, turns, records)


def fuse(config: ExperimentConfig, layout: RunLayout, index: Path, turns: list[Turn],
         records: dict[str, ReformulationRecord], weights_files: list[Path],
         given: dict[str, WeightsFile] | None) -> FuseStage:
    qrels = config.evaluation.qrels
    third = layout.query_vectors(layout.list_run("third"))
    vectors = [layout.query_vectors(path) for path in layout.lists().values()]
    return FuseStage(
        config.name, list(layout.lists().values()),
        layout.annotator_levels if config.fusion.levels == ANNOTATORS else layout.levels, config.fusion,
        datasets.qrels_path(qrels) if qrels else None, qrels, config.evaluation.rel_threshold, layout.reformulations,
        datasets.topics_path(config.topics), weights_files, index, config.retrieval.backend,
        config.retrieval.encoder if config.retrieval.uses_encoder else "tfidf", third if third.exists() else None,
        passages_file(config), [p if p.exists() else None for p in vectors], layout, turns, records, given)


def rerank(config: ExperimentConfig, layout: RunLayout, settings: RerankSettings, record: FusionRecord, index: Path,
           records: dict[str, ReformulationRecord],
           manual_records: dict[str, ReformulationRecord]) -> tuple[RerankStage, list[str]]:
    """One ``[[rerank]]`` entry's stage, and the systems it names that were not built."""
    key = settings.label
    built = record.systems
    wanted = list(built) if settings.systems == "all" else list(settings.systems)
    absent = [name for name in wanted if name not in built]
    runs = {f"{name}+{key}": layout.system_run(name, record) for name in wanted if name in built}
    bases = {f"{name}+{key}": name for name in wanted if name in built}
    outs = {target: layout.system(target) for target in runs}
    if settings.submit:
        runs[f"fused+{key}"], bases[f"fused+{key}"] = layout.fused, "fused"
        outs[f"fused+{key}"] = layout.reranked_fused(key)
    model = Path(settings.model_name).expanduser()
    own = any(base in SYSTEMS and SYSTEMS.get(base).reformulator for base in bases.values())
    return RerankStage(key=key, settings=settings, model=model if model.exists() else settings.model_name,
                       runs=runs, bases=bases, reformulations=layout.reformulations,
                       manual=layout.manual_reformulations if own else None, passages=passages_file(config) or index,
                       experiment=config.name, outs=outs, records=records, manual_records=manual_records), absent


def ptkb(config: ExperimentConfig, layout: RunLayout, turns: list[Turn],
         records: dict[str, ReformulationRecord]) -> PtkbStage:
    encoder = config.retrieval.encoder if config.retrieval.uses_encoder else BM25
    baselines = {m.name: layout.ptkb_baseline(m.name) for m in PTKB_METHODS if m.reference}
    return PtkbStage(layout.reformulations, turns, encoder, config.retrieval.encoder_kind,
                     config.name, out=layout.ptkb_run, baselines=baselines, records=records,
                     dtype=resolved_dtype(config.retrieval))


def respond(config: ExperimentConfig, layout: RunLayout, turns: list[Turn], records: dict[str, ReformulationRecord],
            final_run: Path) -> RespondStage:
    return RespondStage.of(config.respond, run_file=final_run, reformulations=layout.reformulations,
                           ptkb=layout.ptkb_run, turns=turns, passages=passages_file(config), out=layout.responses,
                           records=records)


def export(config: ExperimentConfig, layout: RunLayout, turns: list[Turn], records: dict[str, ReformulationRecord],
           final_run: Path) -> ExportStage:
    return ExportStage(config.name, final_run, datasets.topics_path(config.topics), turns,
                       datasets.topics_year(config.topics), layout.reformulations, layout.responses, layout.ptkb_run,
                       passages_file(config), config.export, layout.submission(config.export.suffix), records)


def reranker_infos(entries: list[RerankSettings]) -> dict[str, RerankerInfo]:
    """What the report says about each re-ranker of a config, by key."""
    return {r.label: RerankerInfo(reranker=r.reranker, label=r.name or RERANKERS.get(r.reranker).label,
                                  model=r.model_name, depth=r.depth, field=r.field) for r in entries}


def evaluate(config: ExperimentConfig, layout: RunLayout, turns: list[Turn], record: FusionRecord,
             reranked: dict[str, tuple[str, str]]) -> EvaluateStage | None:
    settings = config.evaluation
    if settings.qrels is None:
        return None
    ptkb_runs = {m.name: layout.ptkb_baseline(m.name) if m.reference else layout.ptkb_run for m in PTKB_METHODS}
    retrieval = {"backend": config.retrieval.backend,
                 "encoder": config.retrieval.encoder if config.retrieval.uses_encoder else None}
    return EvaluateStage(
        config.name, config.topics, datasets.topics_path(config.topics), turns,
        {name: layout.system_run(name, record) for name in [*record.systems, *reranked]}, layout.fusion_record,
        layout.levels,
        datasets.qrels_path(settings.qrels), settings, layout.responses,
        ptkb_runs if settings.ptkb_qrels else None,
        datasets.qrels_path(settings.ptkb_qrels) if settings.ptkb_qrels else None, retrieval, reranked,
        reranker_infos(config.rerank) if reranked else {}, layout.metrics,
        nuggets=nugget_file(settings.nuggets) if settings.nuggets else None)


def nugget_file(name: str) -> Path:
    """The file of a nugget set: bundled by name, or the path given."""
    return datasets.nuggets_file(name) if name in datasets.NUGGETS else Path(name).expanduser()


def validate(config: ExperimentConfig, layout: RunLayout, turns: list[Turn]) -> ValidateStage:
    return ValidateStage(layout.submission(config.export.suffix), datasets.topics_path(config.topics), turns,
                         config.export.format, datasets.topics_year(config.topics))


def report(layout: RunLayout, metrics: RunMetrics) -> ReportStage:
    """The report reads the metrics, the fusion record, the levels, the weights and the lists of the run directory."""
    sources = [layout.metrics, layout.fusion_record, layout.levels, layout.annotator_levels]
    sources += sorted(layout.root.glob("weights*.json")) + list(layout.list_runs().values())
    return ReportStage([p for p in sources if p.exists()], metrics, run_dir=layout.root,
                       out=layout.report_dir / "report.md")


def inspect(layout: RunLayout) -> InspectStage:
    sources = [layout.metrics, layout.reformulations, layout.responses, layout.fused]
    sources += list(layout.list_runs().values()) + list(layout.system_runs().values())
    return InspectStage([p for p in sources if p.exists()], TEMPLATE, run_dir=layout.root, out=layout.inspector)


def list_outs(layout: RunLayout) -> dict[str, Path]:
    return {name: layout.list_run(name) for name in LIST_NAMES}
