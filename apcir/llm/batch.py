"""The resumable batch that a stage writing one record per item runs (reformulation, responses): :func:`run_batch`.

The record log is appended to as each item finishes (:class:`apcir.io.RecordAppender`), under a progress bar;
at the end, finished or not, a summary of what this call did is written beside the log as
``<out stem>.summary.json``. A caller that runs the batch again and again on the same log (a live run, one turn
a call) holds it open as a :class:`apcir.io.RecordLog`: its records are then read from disk once, not at every call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field, model_validator

from apcir.console import progress as progress_bar
from apcir.errors import ApcirError
from apcir.io import RecordAppender, RecordLog, exclusive, write_json
from apcir.llm.accounting import Accounting, ModelUsage
from apcir.llm.settings import LLM_FIELDS, LLMSettings, refuse_unused
from apcir.options import EntrySettings, Options
from apcir.registry import Syntax, call_ref


class BatchSummary(BaseModel):
    """What one call of a record-writing stage did (also saved beside its output)."""

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
    usage: list[ModelUsage] = Field(default_factory=list)
    cost_usd: float | None = None
    structured: str | None = Field(default=None, description="structured-output mode in use at the end of the run")
    config: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] | None = Field(
        default=None, description="the settings that shape the records (a resume with others is refused)")


def summary_path_for(out: Path) -> Path:
    return out.with_name(f"{out.stem}.summary.json")


@contextmanager
def appending(out: Path, what: str, description: str, total: int, progress: bool,
              settings: dict[str, Any] | None = None, log: RecordLog[Any] | None = None) -> Iterator[RecordAppender[Any]]:
    """A :class:`RecordAppender` on ``out`` (opened for appending; folders made) under a progress bar of ``total``,
    which puts every record it writes into ``log`` too (when given: ``out`` held open, :class:`RecordLog`).

    ``settings`` (those that shape the records) are written into the summary beside ``out`` just before the first
    record, so a resume can check them (:func:`check_resume`). A call that writes no record leaves no new file: an
    output it created stays absent, so a failed start (a missing input, a bad option) leaves nothing behind."""
    existed = out.exists()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        handle = out.open("a", encoding="utf-8")
    except OSError as exc:
        raise ApcirError(f"cannot write the {what}: {exc.strerror}", path=out) from None

    def start() -> None:
        if settings is not None:
            from apcir.io import write_json

            summary = BatchSummary(out=str(out), summary_path=str(summary_path_for(out)), turns=0, settings=settings)
            write_json(summary_path_for(out), summary.model_dump(), indent=2)

    writer: RecordAppender[Any] | None = None
    try:
        with handle, progress_bar(description, total, enabled=progress) as advance:
            writer = RecordAppender(handle, advance, start, log)
            yield writer
    finally:
        if not existed and (writer is None or not writer.records) and out.exists() and out.stat().st_size == 0:
            out.unlink()


def batch_counts(writer: RecordAppender[Any], accounting: Accounting, started: float) -> dict[str, Any]:
    """The :class:`BatchSummary` fields that count what was written and asked since ``started``."""
    usage = accounting.summary()
    costs = [u.cost_usd for u in usage if u.cost_usd is not None]
    failed = [r.turn_id for r in writer.records if r.status == "failed"]
    return {
        "written": len(writer.records), "ok": len(writer.records) - len(failed), "failed": len(failed),
        "failed_turns": failed, "requests": sum(u.requests for u in usage),
        "cache_hits": sum(u.cache_hits for u in usage), "retries": sum(u.retries for u in usage),
        "repairs": sum(u.repairs for u in usage), "seconds": round(time.perf_counter() - started, 3),
        "usage": usage, "cost_usd": sum(costs) if costs else None,
    }


def check_resume(out: Path, settings: dict[str, Any], what: str, *, redo: bool = False) -> bool:
    """Make sure the records already in ``out`` were made with ``settings`` (the ones that shape them; the
    summary records them before the first record, see :func:`appending`).

    Records made with other settings are never mixed with new ones: the call stops with
    :class:`~apcir.errors.StaleOutput` (exit 1) naming every setting that changed, or, with ``redo``
    (``apcir run``, whose stage fingerprint already decided to redo the stage), ``out`` is started over.
    An output whose summary predates this record is resumed with a warning (its settings are unknown).

    Returns whether ``out`` was started over (removed: stale under ``redo``)."""
    import json

    from apcir.console import warn
    from apcir.errors import StaleOutput

    summary_file = summary_path_for(out)
    settings = json.loads(json.dumps(settings))  # as they read back from the summary (tuples become lists)
    has_records = out.is_file() and out.stat().st_size > 0
    previous: dict[str, Any] | None = None
    if has_records and summary_file.is_file():
        try:
            from apcir.io import read_json

            recorded = read_json(summary_file, "summary")
            previous = recorded.get("settings") if isinstance(recorded, dict) else None
        except ApcirError:
            previous = None
    if has_records and previous is None:
        warn(f"{out}: the settings its records were made with are not recorded (no summary, or one from an older "
             f"apcir); they are resumed as they are; --refresh redoes them")
    elif has_records and previous is not None and previous != settings:
        keys = sorted(set(previous) | set(settings))
        changed = "; ".join(f"{k}: {previous.get(k)!r} -> {settings.get(k)!r}" for k in keys
                            if previous.get(k) != settings.get(k))
        if not redo:
            raise StaleOutput(f"holds {what} made with other settings ({changed}); re-run with --refresh to redo "
                              "them, or choose another --out", path=out)
        warn(f"{out}: settings changed ({changed}); its {what} are redone")
        out.unlink()
        return True
    return False


@dataclass(frozen=True)
class ProducerSpec:
    """A registry entry whose records a batch makes (a reformulator, a responder). Its functions are given as
    functions or ``"module:function"`` references, imported only when used (:func:`apcir.registry.call_ref`), so
    the settings can consult the registry without importing every producer:

    * ``identity(...) -> dict``: what identifies its output (the stage fingerprint's part);
    * ``produce(items, settings, emit, *, accounting, refresh) -> structured mode or None`` (:func:`run_batch`'s
      ``produce``).

    Its ``syntax`` says how it is named (:data:`apcir.registry.Syntax`; the registry's ``resolve`` reads a name so),
    and ``options`` names the model of its own keys (:mod:`apcir.options`), a class or a ``"module:Class"``
    reference to its own module.
    """

    name: str
    description: str
    usage: str
    """How a config or a command names it."""
    offline: bool
    identity: str | Callable[..., dict[str, Any]]
    produce: str | Callable[..., str | None]
    syntax: Syntax = "name"
    """``name`` (``heuristic``), ``prefix`` (``file:PATH``) or ``other`` (any other name: a model's)."""
    options: str | type[Options] = Options
    """The model of its own keys: the stage section's keys it reads besides the shared ones (any other entry's key
    is refused), generated as the command's options."""

    def call(self, which: str, *args: Any, **kwargs: Any) -> Any:
        """Call the function field ``which``; a field that is None gives ``{}``."""
        target = getattr(self, which)
        return {} if target is None else call_ref(target, *args, **kwargs)


class ProducerSettings(EntrySettings, LLMSettings):
    """The settings of a stage whose entries are :class:`ProducerSpec` s (``[reformulator]``, ``[respond]``): the
    entry's name (``ENTRY_KEY``), the keys every entry reads, the client's (read only by an entry that asks a model:
    an offline one refuses them) and, in ``options``, the chosen entry's own (:class:`~apcir.options.EntrySettings`)."""

    @model_validator(mode="after")
    def _offline_asks_no_model(self) -> ProducerSettings:
        entry = self.entry()
        if entry.offline:
            refuse_unused(self, LLM_FIELDS, f"by the {entry.name} {self.ENTRY_REGISTRY.concept} (offline, no model)")
        return self

    @property
    def argument(self) -> str:
        """What the entry's name gives the entry: a model's name, ``MODEL`` of ``pathways:MODEL``, ``PATH`` of
        ``file:PATH``; "" for an entry named as it is (:meth:`~apcir.registry.Registry.resolve`)."""
        return str(self.ENTRY_REGISTRY.resolve(getattr(self, self.ENTRY_KEY))[1])

    def llm_settings(self) -> LLMSettings:
        """The client part of these settings (server, retries, cache, generation parameters)."""
        return LLMSettings.model_validate(self.model_dump(include=set(LLMSettings.model_fields), exclude_unset=True))

    def accounting(self) -> Accounting:
        """Requests and cost, priced by ``prices``."""
        return Accounting(self.price_table())

    def config_snapshot(self, head: dict[str, Any], refresh: bool) -> dict[str, Any]:
        """What a stage's summary says of how it was configured: ``head`` (the stage's own: the name, ...), whether
        the entry is offline, when, the entry's own keys and, for an entry that asks a model, the client's (never
        the key, the URL without credentials)."""
        from apcir.io import timestamp

        offline = bool(self.entry().offline)
        return {**head, "offline": offline, "created": timestamp(), **self.options.model_dump(mode="json"),
                **({} if offline else self.client_snapshot(refresh))}


Item = TypeVar("Item")
Record = TypeVar("Record", bound=BaseModel)
Summary = TypeVar("Summary", bound=BatchSummary)


@dataclass(frozen=True)
class Batch(Generic[Item, Record]):
    """What one :func:`run_batch` call did, for the stage's own summary fields."""

    items: list[Item]
    """The items asked for, each once (the first of those with the same key)."""
    existing: dict[str, Record]
    """The records in the output before this call (by turn id)."""
    done: set[str]
    """The keys of the items whose existing record was kept (not asked again)."""
    writer: RecordAppender[Record]
    """The records this call appended (``writer.records``)."""
    final_mode: str | None
    """The structured-output mode the producer ended with (None: nothing asked, or no model)."""


def _ok(item: Any, record: Any) -> bool:
    return bool(record.status == "ok")


def run_batch(
    items: Sequence[Item],
    out: Path,
    *,
    what: str,
    record: type[Record],
    key: Callable[[Item], str],
    settings: dict[str, Any],
    description: str,
    accounting: Callable[[], Accounting],
    config: Callable[[], dict[str, Any]],
    produce: Callable[[list[Item], RecordAppender[Record], Accounting], str | None],
    summarise: Callable[[Batch[Item, Record], dict[str, Any]], Summary],
    is_done: Callable[[Item, Record], bool] = _ok,
    check_existing: Callable[[dict[str, Record]], None] | None = None,
    refresh: bool = False,
    also_refresh: Sequence[Path] = (),
    progress: bool = True,
    redo_stale: bool = False,
    log: RecordLog[Record] | None = None,
) -> Summary:
    """Make a record of every item (by its turn id, ``key``) into the log ``out``, resumably, and summarise.

    Under a lock on ``out`` (a second writer fails at once): the items are made unique by key; ``refresh`` starts
    ``out`` (and the files ``also_refresh``) over; the records already there are read (``check_existing`` may
    refuse them) and checked against the ``settings`` that shape them (:func:`check_resume`; ``redo_stale`` redoes
    stale ones); the items without a record that ``is_done`` keeps go to ``produce``, each record appended as it
    comes (:func:`appending`), with ``accounting()`` counting requests and cost. Then, even when ``produce`` fails,
    the summary is written beside ``out``: ``summarise(batch, fields)`` makes it from the fields every
    :class:`BatchSummary` has (``fields``) plus the stage's own; a call that wrote nothing leaves no summary behind.

    ``log``: ``out`` held open by the caller across calls (a :class:`~apcir.io.RecordLog` of ``record`` on ``out``):
    its records are read from the file on its first use only, each record appended is put into it, and it is
    emptied when ``out`` is started over (``refresh``, or stale under ``redo_stale``). Without it, the file is read
    once in the call.

    Raises :class:`ApcirError` for user errors and :class:`~apcir.llm.client.LLMFatalError` (a subclass) when the
    server refuses the key or the model; records finished before that stay in ``out``.
    """
    out = Path(out)
    if log is None:
        log = RecordLog(out, record, what)
    elif log.path.absolute() != out.absolute() or log.model is not record:
        raise ValueError(f"run_batch: the log given is {log!r}, not one of {record.__name__} records on {out}")
    with exclusive(out.parent / f".{out.name}.lock", f"{what} file {out}", guards=out):
        started = time.perf_counter()
        unique: dict[str, Item] = {}
        for item in items:
            unique.setdefault(key(item), item)
        if refresh and out.exists():
            out.unlink()
        if refresh:
            log.clear()
            for path in also_refresh:
                path.unlink(missing_ok=True)
        existing = log.current()  # a file that is no such log is refused before its summary
        if check_existing is not None:
            check_existing(existing)
        if check_resume(out, settings, what, redo=redo_stale):
            log.clear()
        existing = dict(log.current())  # as it was before this call (the log's own grows as records are appended)
        done = {k for k, item in unique.items() if k in existing and is_done(item, existing[k])}
        pending = [item for k, item in unique.items() if k not in done]
        counting = accounting()
        snapshot = config()
        final_mode: str | None = None
        try:
            with appending(out, what, description, len(pending), progress, settings=settings, log=log) as writer:
                try:
                    if pending:
                        final_mode = produce(pending, writer, counting)
                finally:
                    batch = Batch(list(unique.values()), existing, done, writer, final_mode)
                    fields = {"out": str(out), "summary_path": str(summary_path_for(out)), "turns": len(unique),
                              "skipped": len(done), "structured": final_mode, "config": snapshot,
                              "settings": settings, **batch_counts(writer, counting, started)}
                    summary = summarise(batch, fields)
                    write_json(summary_path_for(out), summary.model_dump(), indent=2)
        finally:
            if not out.exists():  # nothing was written (a failed start): no summary of nothing either
                summary_path_for(out).unlink(missing_ok=True)
        return summary
