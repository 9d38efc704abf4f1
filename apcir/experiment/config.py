"""Experiment configuration: one TOML or YAML file per experiment.

Each section is the settings record of one stage, the same record that
stage's command builds from its options: ``[reformulator]``
(:class:`~apcir.reformulation.settings.ReformulatorOptions`), ``[retrieval]``,
``[fusion]`` (with ``[fusion.weights]``), ``[rerank]`` (optional; one table, or
several as ``[[rerank]]``), ``[respond]``, ``[evaluation]`` (with
``[evaluation.judge]``) and ``[export]``. The export format defaults to the
topics' year's, and a format of another year is refused here, before any work.
Every field has a default that runs the embedded demo offline, so the
smallest config is a name and ``[evaluation] qrels`` (cross-validated weights,
the default, tune on them; with ``[fusion.weights] source = "file"`` a name
alone will do). Relative paths are resolved against the working
directory of ``apcir run``. The resolved config is saved into the run
directory, and each stage records a fingerprint of the parts of it that it
depends on, so a re-run redoes only stages whose inputs changed.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from apcir import datasets
from apcir.console import shown
from apcir.errors import ApcirError
from apcir.evaluation.settings import EvaluationSettings
from apcir.fusion.settings import FusionSettings
from apcir.io import check_unicode, folder_name_problem, read_text
from apcir.options import EntrySettings
from apcir.reformulation.settings import ReformulatorOptions
from apcir.reranking.settings import RerankSettings
from apcir.responses.settings import RespondSettings
from apcir.retrieval.settings import RetrievalSettings
from apcir.submission.formats import FORMATS
from apcir.submission.settings import ExportSettings

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


class ExperimentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    topics: str = "ikat23-test"
    turns: list[str] | None = Field(None, description="restrict to these turn ids")
    output_dir: str | None = Field(None, description="default runs/<name>")
    reformulator: ReformulatorOptions = Field(default_factory=ReformulatorOptions)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    fusion: FusionSettings = Field(default_factory=FusionSettings)
    rerank: list[RerankSettings] = Field(
        default_factory=list, description="re-rankers applied after fusion (none: no re-ranking); [rerank] or [[rerank]]"
    )
    respond: RespondSettings = Field(default_factory=RespondSettings)
    evaluation: EvaluationSettings = Field(default_factory=EvaluationSettings)
    export: ExportSettings = Field(default_factory=ExportSettings)

    @field_validator("name")
    @classmethod
    def _name_is_a_word(cls, value: str) -> str:
        if not value or any(c.isspace() or c in "/\\" for c in value):
            raise ValueError("must be one word without slashes (it names the run directory and the run tag)")
        problem = folder_name_problem(value)
        if problem is not None:  # runs/.. would be the folder above runs/
            raise ValueError(f"{value[:60]!r} {problem} (it names the run directory, runs/NAME)")
        return value

    @field_validator("turns")
    @classmethod
    def _some_turns(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("is empty, which would select no turn; leave it out to run every turn")
        return value

    @field_validator("rerank", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _distinct_rerankers(self) -> ExperimentConfig:
        labels = [r.label for r in self.rerank]
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise ValueError(f"two [[rerank]] entries are both called {repeated[0]!r}: give one a `name`")
        if sum(r.submit for r in self.rerank) > 1:
            raise ValueError("only one [[rerank]] entry can set submit = true")
        for entry in self.rerank:
            device = getattr(entry.options, "device", None)  # a local model's (the re-ranker's own option)
            if device:
                from apcir.retrieval.encoder import resolve_device

                try:
                    resolve_device(device)  # now, rather than after the stages before re-ranking have run
                except ApcirError as exc:
                    raise ValueError(f"rerank.device: {exc}") from None
        return self

    @model_validator(mode="after")
    def _data_exist(self) -> ExperimentConfig:
        """Every qrels and topic set named is a bundled one or a file, and a collection named (not a path: an index
        built elsewhere needs none here) is a bundled one, checked now rather than at the stage that reads it,
        after the stages before it have run."""
        named = [("evaluation.qrels", self.evaluation.qrels, datasets.qrels_path),
                 ("evaluation.ptkb_qrels", self.evaluation.ptkb_qrels, datasets.qrels_path),
                 ("fusion.weights.tune_qrels", self.fusion.weights.tune_qrels, datasets.qrels_path),
                 ("fusion.weights.tune_topics", self.fusion.weights.tune_topics, datasets.topics_path),
                 ("retrieval.collection", self.retrieval.collection, datasets.collection_path),
                 ("retrieval.passages", self.retrieval.passages, datasets.collection_path)]
        problems = []
        for key, value, locate in named:
            if value is None or (locate is datasets.collection_path and ("/" in value or Path(value).suffix)):
                continue
            try:
                locate(value)
            except ApcirError as exc:
                problems.append(f"{key}: {exc}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _cv_has_qrels(self) -> ExperimentConfig:
        if self.fusion.weights.source == "cv" and self.evaluation.qrels is None:
            raise ValueError("fusion.weights.source = 'cv' needs evaluation.qrels (cross-validation tunes on them)")
        return self

    @model_validator(mode="after")
    def _tuning_rewrites_cover_the_tuning_topics(self) -> ExperimentConfig:
        """A reformulator of the tuning leg that covers only some turns (``file:PATH``: those of its file) and none
        of some tuning topics is refused now, naming them, rather than tuning on fallbacks (see
        fusion.weights.tune_method)."""
        weights = self.fusion.weights
        if weights.source != "tune" or not weights.tune_topics:
            return self
        tuner = weights.tune_method or self.reformulator.method
        try:
            options = self.reformulator.with_method(tuner) if weights.tune_method else self.reformulator
            if options.entry().covered is None:
                return self
            covered = options.entry().call("covered", options)
            turns = datasets.topics(weights.tune_topics)
        except ApcirError as exc:
            raise ValueError(f"fusion.weights: {exc}") from None
        lacking = sorted({t.conversation_id for t in turns} - {t.conversation_id for t in turns if t.turn_id in covered})
        if lacking:
            listed = shown(lacking, 8)
            which = "fusion.weights.tune_method" if weights.tune_method else "reformulator.method"
            raise ValueError(f"{which} {tuner!r} holds no turn of {len(lacking)} of the {weights.tune_topics} "
                             f"topics the weights are tuned on ({listed}); give the tuning leg its own rewrites with "
                             "fusion.weights.tune_method = \"file:...\" (or another reformulator)")
        return self

    @model_validator(mode="after")
    def _format_of_the_topics(self) -> ExperimentConfig:
        """``export.format`` defaults to the topics' year's; another year's format is refused (see the export)."""
        try:
            year = datasets.topics_year(self.topics)
        except ApcirError as exc:
            raise ValueError(f"topics: {exc}") from None
        fmt = self.export.format
        if fmt is not None:
            problem = FORMATS.get(fmt).year_problem(year)
            if problem is not None:
                raise ValueError(f"export.format: {problem}")
        try:
            self.export = self.export.resolved(year)
        except ApcirError as exc:
            raise ValueError(f"export.run_type: {exc}") from None
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) if self.output_dir else Path("runs") / self.name


def resolve_config_path(value: str) -> Path:
    """A config file, or the name of a bundled one (``demo``)."""
    path = Path(value)
    if path.exists():
        return path
    bundled = CONFIGS / f"{value}.toml"
    if bundled.exists():
        return bundled
    names = ", ".join(sorted(p.stem for p in CONFIGS.glob("*.toml")))
    raise ApcirError(f"config {value!r} is neither a file nor a bundled config ({names})")


def load_config(path: Path) -> ExperimentConfig:
    """Read a TOML (.toml) or YAML (.yaml/.yml) experiment file, or a run directory's ``config.json`` (the config
    as that run resolved it); errors name the file and the field."""
    if path.suffix not in (".toml", ".yaml", ".yml", ".json"):
        raise ApcirError("config must be .toml, .yaml or .yml (or a run directory's config.json)", path=path)
    if path.suffix == ".json":
        from apcir.io import read_json

        data = read_json(path, "config file")
        if isinstance(data, dict):  # the resolved config holds every default: keep only what differs from them
            data = _without_defaults(data)
    else:
        data = _parse(path)
    if not isinstance(data, dict):
        raise ApcirError("config must be a table/mapping at the top level", path=path)
    check_unicode(data, path)  # YAML, like JSON, lets an escape make a lone surrogate (TOML refuses it)
    return validate_config(data, path)


def _parse(path: Path) -> Any:
    text = read_text(path, "config file")
    try:
        return tomllib.loads(text) if path.suffix == ".toml" else (yaml.load(text, Loader=_UniqueKeyLoader) or {})
    except tomllib.TOMLDecodeError as exc:
        raise ApcirError(f"malformed config: {exc}", path=path) from None
    except yaml.YAMLError as exc:
        raise _yaml_problem(exc, path) from None


def _without_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """A resolved config without the values of its sections that are their defaults (so that a key that only
    some settings allow, such as an LLM's, is not given where it is not used)."""

    def strip(value: Any, default: Any) -> Any:
        if isinstance(value, dict) and isinstance(default, dict):
            return {k: strip(v, default.get(k)) for k, v in value.items() if k not in default or v != default[k]}
        return value

    out = dict(data)
    for key, field in ExperimentConfig.model_fields.items():
        factory = field.default_factory
        if key in out and factory is not None and isinstance(out[key], dict):
            out[key] = strip(out[key], factory().model_dump(mode="json"))  # type: ignore[call-arg]
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (as TOML does) instead of keeping the last."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(exc: yaml.YAMLError, path: Path) -> ApcirError:
    """One line for a YAML error: what is wrong and where (PyYAML's own message spans several lines)."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return ApcirError(f"malformed config: {problem}", path=path)
    return ApcirError(f"malformed config: {problem} (column {mark.column + 1})", path=path, line=mark.line + 1)


def validate_config(data: dict[str, object], path: Path | None = None) -> ExperimentConfig:
    """An :class:`ExperimentConfig` from plain data; every invalid field is named."""
    try:
        # strict: a config says what it means (k = true is not k = 1, "yes" is not true)
        return ExperimentConfig.model_validate(data, strict=True, context={"strict": True})
    except ValidationError as exc:
        errors = exc.errors()
        unknown = [e for e in errors if e["type"] == "extra_forbidden"]
        if unknown:  # misspelt keys first: the other errors may only follow from them
            raise ApcirError("invalid config: " + "; ".join(unknown_key(e["loc"]) for e in unknown), path=path) \
                from None
        lines = [(f"{'.'.join(str(p) for p in e['loc'])}: " if e["loc"] else "")
                 + str(e["msg"]).removeprefix("Value error, ") for e in errors]
        raise ApcirError("invalid config: " + "; ".join(lines), path=path) from None


def unknown_key(loc: tuple[int | str, ...], model: type[BaseModel] = ExperimentConfig) -> str:
    """What is wrong with a key no settings record has: its dotted name and the closest keys of its section."""
    from apcir.registry import unknown_name

    section = _section_model(model, loc[:-1])
    where = "".join(f"[{p + 1}]" if isinstance(p, int) else f".{p}" for p in loc[:-1]).lstrip(".")
    keys = (section.keys() if issubclass(section, EntrySettings) else list(section.model_fields)) \
        if section is not None else []
    return unknown_name("key", str(loc[-1]), keys, prefix=f"{where}." if where else "",
                        where_listed=" (the configuration reference lists them)")


def _section_model(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The settings record at ``loc`` (``("rerank", 0)`` is a :class:`RerankSettings`), None if there is none."""
    import typing

    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue  # an item of a list: the list's record, found from its annotation below
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.field_of(str(part)) if issubclass(current, EntrySettings) else current.model_fields.get(part)
        if field is None:
            return None
        annotation = field.annotation
        candidates = [annotation, *typing.get_args(annotation)]
        candidates += [inner for c in list(candidates) for inner in typing.get_args(c)]
        current = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _offline(settings: type[EntrySettings], section: dict[str, Any]) -> bool:
    """Whether the entry a section names asks no model (``llm``: the reformulator's former key; a name no entry
    takes counts as asking one)."""
    name = section.get(settings.ENTRY_KEY, section.get("llm", settings._entry_name({})))
    entry = settings.entry_for(name)
    return bool(entry is not None and entry.offline)


def with_overrides(data: dict[str, Any], *, llm: str | None = None, responder: str | None = None,
                   base_url: str | None = None, max_prompt_tokens: int | None = None, judged_only: bool = False,
                   output_dir: str | None = None) -> dict[str, Any]:
    """A config's data with ``apcir run``'s overrides applied (the CLI options and the Python API's arguments)."""
    data = dict(data)
    reformulator = dict(data.get("reformulator", {}))
    if llm:
        reformulator.pop("llm", None)
        reformulator["method"] = llm
    respond = dict(data.get("respond", {}))
    if responder:
        respond["responder"] = responder
    for option, key, value in (("--base-url", "base_url", base_url),
                               ("--max-prompt-tokens", "max_prompt_tokens", max_prompt_tokens)):
        if value is None:
            continue
        # to the stages that ask a model (an offline one would refuse a setting it does not use)
        asking = [section for section, settings in ((reformulator, ReformulatorOptions), (respond, RespondSettings))
                  if not _offline(settings, section)]
        if not asking:
            raise ApcirError(f"{option}: neither the reformulator nor the responder asks a model here; give --llm "
                             "or --responder a model name too")
        for section in asking:
            section[key] = value
    data["reformulator"] = reformulator
    data["respond"] = respond
    if output_dir:
        data["output_dir"] = str(output_dir)
    if judged_only:
        qrels = (data.get("evaluation") or {}).get("qrels")
        if not qrels:
            raise ApcirError("--judged-only needs [evaluation] qrels in the config")
        judged = datasets.qrels(qrels)
        chosen = [t.turn_id for t in datasets.select_turns(data.get("topics", "ikat23-test"), data.get("turns"))
                  if t.turn_id in judged]
        if not chosen:
            raise ApcirError(f"--judged-only: no turn of the topics is judged in {qrels}")
        data["turns"] = chosen
    return data
