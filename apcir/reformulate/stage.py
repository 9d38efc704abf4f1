"""The reformulation stage: every turn's level and three reformulations, one JSONL record per turn.

:func:`reformulate` appends one :class:`ReformulationRecord` to the output as
soon as its turn finishes, so a killed run loses at most the turns in flight;
a re-run skips the turns whose record is already ``ok`` in the output (failed
ones are asked again, and their new line replaces the old for
:func:`~apcir.contract.reformulations.load_reformulations`). Model answers are
cached by content (see :mod:`apcir.llm.cache`), so a re-run into a new file
makes no request either. A summary (configuration, counts, usage and cost) is
written beside the output as ``<out stem>.summary.json``; it never contains
the API key. ``apcir reformulate`` and ``apcir run`` both call :func:`reformulate`
with the same :class:`~apcir.reformulate.options.ReformulatorOptions`.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from apcir.console import progress as progress_bar
from apcir.contract.records import Turn
from apcir.contract.reformulations import LEVELS, ReformulationRecord
from apcir.errors import ApcirError
from apcir.io import RecordAppender, exclusive, read_record_log, write_json
from apcir.llm.accounting import ModelUsage
from apcir.reformulate.chat import public_url
from apcir.reformulate.options import ReformulatorOptions
from apcir.reformulate.registry import accounting_for, reformulator_for


class ReformulateSummary(BaseModel):
    """What one :func:`reformulate` call did (also saved beside the output)."""

    model: str
    out: str
    summary_path: str
    turns: int = Field(description="turns asked for")
    skipped: int = Field(default=0, description="turns already ok in the output (resumed run)")
    written: int = Field(default=0, description="records appended by this run")
    ok: int = 0
    failed: int = 0
    failed_turns: list[str] = Field(default_factory=list)
    requests: int = Field(default=0, description="HTTP requests actually sent (retries and repairs included)")
    cache_hits: int = 0
    retries: int = 0
    repairs: int = 0
    seconds: float = 0.0
    levels: dict[str, int] = Field(default_factory=dict, description="levels of all ok records in the output")
    usage: list[ModelUsage] = Field(default_factory=list)
    cost_usd: float | None = None
    structured: str | None = Field(default=None, description="structured-output mode in use at the end of the run")
    config: dict[str, Any] = Field(default_factory=dict)


def summary_path_for(out: Path) -> Path:
    return out.with_name(f"{out.stem}.summary.json")


def stage_identity(turns: list[Turn], options: ReformulatorOptions) -> dict[str, Any]:
    """What determines the records of ``turns`` (the stage fingerprint's input): see each reformulator."""
    spec = reformulator_for(options.llm)
    return {"reformulator": spec.name, "llm": options.llm, **spec.identity(turns, options)}


# --- the output file -------------------------------------------------------------------------
def read_existing(out: Path) -> dict[str, ReformulationRecord]:
    """Records already in ``out`` (by turn id); a torn last record from a killed run is cut off."""
    return read_record_log(out, ReformulationRecord, "reformulations")


# --- the stage -------------------------------------------------------------------------------
def reformulate(
    turns: list[Turn],
    options: ReformulatorOptions,
    out: Path,
    *,
    refresh: bool = False,
    progress: bool = True,
) -> ReformulateSummary:
    """Reformulate ``turns`` as ``options.llm`` says into ``out`` (resumable; see the module docstring).

    Raises :class:`ApcirError` for user errors and
    :class:`~apcir.llm.client.LLMFatalError` (a subclass) when the server
    refuses the key or the model; records finished before that stay in ``out``.
    """
    out = Path(out)
    with exclusive(out.parent / f".{out.name}.lock", f"reformulations file {out}"):
        return _reformulate(turns, options, out, refresh=refresh, progress=progress)


def _reformulate(
    turns: list[Turn], options: ReformulatorOptions, out: Path, *, refresh: bool, progress: bool
) -> ReformulateSummary:
    started = time.perf_counter()
    spec = reformulator_for(options.llm)
    unique: dict[str, Turn] = {}
    for turn in turns:
        unique.setdefault(turn.turn_id, turn)
    turns = list(unique.values())
    if refresh and out.exists():
        out.unlink()
    existing = read_existing(out)
    others = sorted({r.model for r in existing.values() if r.model != options.llm})
    if others:
        raise ApcirError(
            f"already holds records of {', '.join(others)}, not {options.llm}; choose another --out (or --refresh to "
            "start it over)",
            path=out,
        )
    done = {tid for tid, r in existing.items() if r.status == "ok"}
    pending = [t for t in turns if t.turn_id not in done]
    accounting = accounting_for(options)
    config = _config_snapshot(options, spec.offline, refresh)
    final_mode: str | None = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        handle = out.open("a", encoding="utf-8")
    except OSError as exc:
        raise ApcirError(f"cannot write the reformulations: {exc.strerror}", path=out) from None
    with handle, progress_bar(f"reformulate {options.llm}", len(pending), enabled=progress) as advance:
        writer: RecordAppender[ReformulationRecord] = RecordAppender(handle, advance)
        try:
            if pending:
                final_mode = spec.produce(pending, options, writer, accounting=accounting, refresh=refresh)
        finally:
            summary = _summary(out, options.llm, turns, existing, writer, accounting, config, started, final_mode)
    return summary


def _config_snapshot(options: ReformulatorOptions, offline: bool, refresh: bool) -> dict[str, Any]:
    config: dict[str, Any] = {
        "llm": options.llm,
        "offline": offline,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": _versions(),
    }
    if options.llm.startswith("file:"):
        config.update(map=options.map, level_fallback=options.level_fallback)
    elif not offline:
        cache = options.cache()
        config.update(
            base_url=public_url(options.resolved_base_url()),
            structured=options.structured,
            concurrency=options.concurrency,
            temperature=options.temperature,
            max_tokens=options.max_tokens,
            timeout=options.timeout,
            max_retries=options.max_retries,
            prompt_options=options.prompt.model_dump(),
            cache_dir=None if cache is None else str(cache.directory),
            refresh=refresh,
            no_cache=options.no_cache,
        )
    return config


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("apcir", "openai"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            pass
    return found


def _summary(
    out: Path,
    llm: str,
    turns: list[Turn],
    existing: dict[str, ReformulationRecord],
    writer: RecordAppender[ReformulationRecord],
    accounting: Any,
    config: dict[str, Any],
    started: float,
    final_mode: str | None,
) -> ReformulateSummary:
    records = dict(existing)
    for record in writer.records:
        records[record.turn_id] = record
    wanted = {t.turn_id for t in turns}
    levels = Counter(r.output.level for r in records.values() if r.status == "ok" and r.output is not None)
    usage = accounting.summary()
    costs = [u.cost_usd for u in usage if u.cost_usd is not None]
    written_ok = [r for r in writer.records if r.status == "ok"]
    written_failed = [r for r in writer.records if r.status == "failed"]
    summary = ReformulateSummary(
        model=llm,
        out=str(out),
        summary_path=str(summary_path_for(out)),
        turns=len(turns),
        skipped=sum(1 for tid in wanted if tid in existing and existing[tid].status == "ok"),
        written=len(writer.records),
        ok=len(written_ok),
        failed=len(written_failed),
        failed_turns=[r.turn_id for r in written_failed],
        requests=sum(u.requests for u in usage),
        cache_hits=sum(u.cache_hits for u in usage),
        retries=sum(u.retries for u in usage),
        repairs=sum(u.repairs for u in usage),
        seconds=round(time.perf_counter() - started, 3),
        levels={level: levels.get(level, 0) for level in LEVELS},
        usage=usage,
        cost_usd=sum(costs) if costs else None,
        structured=final_mode,
        config=config,
    )
    write_json(summary_path_for(out), summary.model_dump(), indent=2)
    return summary
