"""What a stage that writes one record per item into a resumable log shares (reformulation, responses).

The record log is appended to as each item finishes (:class:`apcir.io.RecordAppender`), under a progress bar;
at the end, finished or not, a summary of what this call did is written beside the log as
``<out stem>.summary.json``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from apcir.console import progress as progress_bar
from apcir.errors import ApcirError
from apcir.io import RecordAppender
from apcir.llm.accounting import Accounting, ModelUsage


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


def summary_path_for(out: Path) -> Path:
    return out.with_name(f"{out.stem}.summary.json")


@contextmanager
def appending(out: Path, what: str, description: str, total: int, progress: bool) -> Iterator[RecordAppender[Any]]:
    """A :class:`RecordAppender` on ``out`` (opened for appending; folders made) under a progress bar of ``total``."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        handle = out.open("a", encoding="utf-8")
    except OSError as exc:
        raise ApcirError(f"cannot write the {what}: {exc.strerror}", path=out) from None
    with handle, progress_bar(description, total, enabled=progress) as advance:
        yield RecordAppender(handle, advance)


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
