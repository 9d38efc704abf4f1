"""The LLM stage: every turn's level and three reformulations, one JSONL record per turn.

:func:`reformulate` appends one :class:`ReformulationRecord` to the output as
soon as its turn finishes, so a killed run loses at most the turns in flight;
a re-run skips the turns whose record is already ``ok`` in the output (failed
ones are asked again, and their new line replaces the old for
:func:`load_reformulations`). Answers are cached by content (see
:mod:`apcir.llm.cache`), so a re-run into a new file makes no request either.
A summary (configuration, counts, usage and cost) is written beside the output
as ``<out stem>.summary.json``; it never contains the API key.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, Field, ValidationError

from apcir.errors import ApcirError
from apcir.llm.accounting import Accounting, ModelUsage, Price
from apcir.llm.cache import CachedAnswer, ResponseCache, cache_key, default_cache_dir
from apcir.llm.client import ChatClient, LLMFatalError, LLMRequestError, RetryPolicy, StructuredMode
from apcir.llm.offline import OFFLINE_MODELS, offline_record
from apcir.llm.prompt import (
    PROMPT_VERSION,
    Prompt,
    PromptOptions,
    build_prompt,
    output_schema,
    parse_answer,
    repair_messages,
)
from apcir.llm.schema import LEVELS, ReformulationRecord, Usage
from apcir.models import Turn


def is_offline(llm: str) -> bool:
    """True for the reformulators that need no model and no network (``manual``, ``heuristic``)."""
    return llm in OFFLINE_MODELS


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
    requests: int = Field(
        default=0, description="HTTP requests actually sent (retries and repairs included)"
    )
    cache_hits: int = 0
    retries: int = 0
    repairs: int = 0
    seconds: float = 0.0
    levels: dict[str, int] = Field(
        default_factory=dict, description="levels of all ok records in the output"
    )
    usage: list[ModelUsage] = Field(default_factory=list)
    cost_usd: float | None = None
    structured: str | None = Field(
        default=None, description="structured-output mode in use at the end of the run"
    )
    config: dict[str, Any] = Field(default_factory=dict)


def summary_path_for(out: Path) -> Path:
    return out.with_name(f"{out.stem}.summary.json")


def public_url(url: str | None) -> str | None:
    """``url`` without user info, query or fragment (where credentials could hide)."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


# --- the output file -------------------------------------------------------------------------


def read_existing(out: Path) -> dict[str, ReformulationRecord]:
    """Records already in ``out`` (by turn id); a torn last line from a killed run is cut off."""
    if not out.exists():
        return {}
    data = out.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with out.open("r+b") as handle:
            handle.truncate(cut)
        data = data[:cut]
        from apcir.cli.common import err_console

        err_console.print(
            f"[yellow]warning:[/] {out}: removed an incomplete last line (interrupted run)"
        )
    records: dict[str, ReformulationRecord] = {}
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = ReformulationRecord.model_validate_json(line)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ApcirError(
                f"not a reformulation record ({first['msg']}); use another --out or --refresh to start over",
                path=out,
                line=number,
            ) from None
        records[record.turn_id] = record
    return records


class _Writer:
    """Appends records, one line each, flushed immediately."""

    def __init__(self, handle: IO[str]):
        self.handle = handle
        self.records: list[ReformulationRecord] = []

    def write(self, record: ReformulationRecord) -> None:
        self.handle.write(record.model_dump_json() + "\n")
        self.handle.flush()
        self.records.append(record)


# --- the orchestrator ------------------------------------------------------------------------


def reformulate(
    turns: list[Turn],
    llm: str,
    out: Path,
    *,
    cache_dir: Path | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    concurrency: int = 8,
    refresh: bool = False,
    no_cache: bool = False,
    prompt_options: PromptOptions | None = None,
    structured: StructuredMode = "auto",
    temperature: float | None = 0.0,
    max_tokens: int | None = 1024,
    timeout: float = 120.0,
    retry: RetryPolicy | None = None,
    prices: dict[str, Price] | None = None,
    progress: bool = True,
) -> ReformulateSummary:
    """Reformulate ``turns`` with ``llm`` (a model name, or ``manual``/``heuristic``) into ``out``.

    Raises :class:`ApcirError` for user errors and :class:`LLMFatalError` (a
    subclass) when the server refuses the key or the model; records finished
    before that stay in ``out``.
    """
    started = time.perf_counter()
    if not llm.strip():
        raise ApcirError("--llm is empty: give a model name, 'manual' or 'heuristic'")
    unique: dict[str, Turn] = {}
    for turn in turns:
        unique.setdefault(turn.turn_id, turn)
    turns = list(unique.values())
    options = prompt_options or PromptOptions()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if refresh and out.exists():
        out.unlink()
    existing = read_existing(out)
    others = sorted({r.model for r in existing.values() if r.model != llm})
    if others:
        raise ApcirError(
            f"already holds records of {', '.join(others)}, not {llm}; choose another --out (or --refresh to "
            "start it over)",
            path=out,
        )
    done = {tid for tid, r in existing.items() if r.status == "ok"}
    pending = [t for t in turns if t.turn_id not in done]
    accounting = Accounting(prices)
    config: dict[str, Any] = {
        "llm": llm,
        "offline": is_offline(llm),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "versions": _versions(),
    }
    if not is_offline(llm):
        config.update(
            base_url=public_url(base_url),
            structured=structured,
            concurrency=concurrency,
            temperature=temperature,
            max_tokens=max_tokens,
            timeout=timeout,
            prompt_version=PROMPT_VERSION,
            prompt_options=options.model_dump(),
            cache_dir=None if no_cache else str(cache_dir or default_cache_dir()),
            refresh=refresh,
            no_cache=no_cache,
        )
    final_mode: str | None = None
    handle = out.open("a", encoding="utf-8")
    writer = _Writer(handle)
    try:
        with _progress(progress, llm, len(pending)) as advance:
            if is_offline(llm):
                for turn in pending:
                    writer.write(offline_record(turn, llm))
                    advance()
            elif pending:
                job = _LLMJob(
                    llm=llm,
                    writer=writer,
                    advance=advance,
                    options=options,
                    cache=None if no_cache else ResponseCache(cache_dir or default_cache_dir()),
                    read_cache=not refresh,
                    params=_params(temperature, max_tokens),
                    accounting=accounting,
                    client_args={
                        "base_url": base_url,
                        "api_key": api_key,
                        "concurrency": concurrency,
                        "timeout": timeout,
                        "retry": retry,
                        "structured": structured,
                    },
                )
                final_mode = asyncio.run(job.run(pending))
    finally:
        handle.close()
        summary = _write_summary(
            out, llm, turns, existing, writer, accounting, config, started, final_mode
        )
    return summary


def _params(temperature: float | None, max_tokens: int | None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if temperature is not None:
        params["temperature"] = temperature
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    return params


class _LLMJob:
    def __init__(
        self,
        *,
        llm: str,
        writer: _Writer,
        advance: Any,
        options: PromptOptions,
        cache: ResponseCache | None,
        read_cache: bool,
        params: dict[str, Any],
        accounting: Accounting,
        client_args: dict[str, Any],
    ):
        self.llm = llm
        self.writer = writer
        self.advance = advance
        self.options = options
        self.cache = cache
        self.read_cache = read_cache
        self.params = params
        self.accounting = accounting
        self.client_args = client_args
        self.schema = output_schema(options.cot)

    async def run(self, turns: list[Turn]) -> str | None:
        misses: list[tuple[Turn, Prompt, str]] = []
        for turn in turns:
            prompt = build_prompt(turn, self.options)
            key = cache_key(self.llm, prompt.messages, self.params)
            if not self._from_cache(turn, prompt, key):
                misses.append((turn, prompt, key))
        if not misses:
            return None
        client = ChatClient(self.llm, accounting=self.accounting, **self.client_args)
        try:
            async with asyncio.TaskGroup() as group:
                for turn, prompt, key in misses:
                    group.create_task(self._ask(client, turn, prompt, key))
        except BaseExceptionGroup as group_error:
            fatal = [e for e in group_error.exceptions if isinstance(e, LLMFatalError)]
            if fatal:
                raise fatal[0] from None
            raise
        finally:
            await client.close()
        return client.mode

    def _from_cache(self, turn: Turn, prompt: Prompt, key: str) -> bool:
        if self.cache is None or not self.read_cache:
            return False
        answer = self.cache.get(key)
        if answer is None:
            return False
        try:
            output = parse_answer(answer.content, turn, self.options.cot)
        except ValueError:
            return False
        self.accounting.cache_hit(self.llm)
        usage = answer.usage.model_copy(update={"requests": 0})
        self._write(turn, prompt, output=output, usage=usage, seconds=0.0, cached=True)
        return True

    async def _ask(self, client: ChatClient, turn: Turn, prompt: Prompt, key: str) -> None:
        usage = Usage()
        seconds = 0.0
        try:
            first = await client.complete(prompt.messages, self.params, self.schema)
            usage, seconds = _add(usage, first), seconds + first.seconds
            raw = first.content
            try:
                output = parse_answer(raw, turn, self.options.cot)
            except ValueError as problem:
                self.accounting.repair(self.llm)
                messages = repair_messages(prompt, raw, str(problem), self.options.cot)
                second = await client.complete(messages, self.params, self.schema)
                usage, seconds = _add(usage, second), seconds + second.seconds
                try:
                    output = parse_answer(second.content, turn, self.options.cot)
                    raw = second.content
                except ValueError as again:
                    error = f"invalid answer, and again after one repair request: {again} (first: {problem})"
                    self._fail(turn, prompt, error, second.content, usage, seconds)
                    return
        except LLMRequestError as exc:
            self._fail(turn, prompt, str(exc), None, usage, seconds)
            return
        if self.cache is not None:
            self.cache.put(CachedAnswer(key=key, model=self.llm, content=raw, usage=usage))
        self._write(turn, prompt, output=output, usage=usage, seconds=seconds, cached=False)

    def _fail(
        self, turn: Turn, prompt: Prompt, error: str, raw: str | None, usage: Usage, seconds: float
    ) -> None:
        from apcir.cli.common import err_console

        err_console.print(
            f"[yellow]warning:[/] turn {turn.turn_id} failed: {error}"
            + ("; the raw answer is kept in the record" if raw is not None else ""),
            highlight=False,
            soft_wrap=True,
        )
        record = ReformulationRecord(
            turn_id=turn.turn_id,
            model=self.llm,
            prompt_hash=prompt.hash,
            status="failed",
            error=error,
            raw=raw,
            seconds=round(seconds, 3),
            usage=usage,
            demonstrations=prompt.demonstrations,
        )
        self.writer.write(record)
        self.advance()

    def _write(
        self, turn: Turn, prompt: Prompt, *, output: Any, usage: Usage, seconds: float, cached: bool
    ) -> None:
        record = ReformulationRecord(
            turn_id=turn.turn_id,
            model=self.llm,
            prompt_hash=prompt.hash,
            status="ok",
            output=output,
            seconds=round(seconds, 3),
            usage=usage,
            demonstrations=prompt.demonstrations,
            cached=cached,
        )
        self.writer.write(record)
        self.advance()


def _add(usage: Usage, completion: Any) -> Usage:
    return Usage(
        requests=usage.requests + completion.requests,
        input_tokens=usage.input_tokens + (completion.input_tokens or 0),
        output_tokens=usage.output_tokens + (completion.output_tokens or 0),
    )


# --- progress and summary --------------------------------------------------------------------


class _progress:
    """A rich progress bar on stderr (or nothing); yields a function advancing it by one turn."""

    def __init__(self, enabled: bool, llm: str, total: int):
        self.enabled = enabled and total > 0
        self.llm = llm
        self.total = total
        self._bar: Any = None

    def __enter__(self) -> Any:
        if not self.enabled:
            return lambda: None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        from apcir.cli.common import err_console

        self._bar = Progress(
            TextColumn("reformulate [bold]{task.description}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=err_console,
        )
        self._bar.start()
        task = self._bar.add_task(self.llm, total=self.total)
        return lambda: self._bar.advance(task)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("apcir", "openai"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            pass
    return found


def _write_summary(
    out: Path,
    llm: str,
    turns: list[Turn],
    existing: dict[str, ReformulationRecord],
    writer: _Writer,
    accounting: Accounting,
    config: dict[str, Any],
    started: float,
    final_mode: str | None,
) -> ReformulateSummary:
    records = dict(existing)
    for record in writer.records:
        records[record.turn_id] = record
    wanted = {t.turn_id for t in turns}
    levels = Counter(
        r.output.level for r in records.values() if r.status == "ok" and r.output is not None
    )
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
    summary_path_for(out).write_text(
        json.dumps(summary.model_dump(), indent=2) + "\n", encoding="utf-8"
    )
    return summary
