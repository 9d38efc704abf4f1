"""Reusing artifacts across runs: a stage reruns only when its inputs changed.

Each stage of ``apcir run`` declares the inputs it depends on (config values,
upstream files) and the files it writes. ``stages.json`` in the run directory
records, per stage, the fingerprint of those inputs and whether the stage
finished. On a re-run a finished stage with the same fingerprint and all its
outputs present is skipped; an unfinished one with the same fingerprint is
resumed (its own code continues from what is on disk, e.g. the LLM stage's
JSONL); a stage whose inputs changed starts over.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apcir.errors import ApcirError
from apcir.io import read_json, write_text

STAGES_FILE = "stages.json"


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes; for a directory, of its ``manifest.json``, else of its files' names and sizes."""
    if path.is_dir() and not (path / "manifest.json").exists():
        listing = sorted(f"{p.relative_to(path)} {p.stat().st_size} {p.stat().st_mtime_ns}"
                         for p in path.rglob("*") if p.is_file())
        return hashlib.sha256("\n".join(listing).encode()).hexdigest()
    target = path / "manifest.json" if path.is_dir() else path
    digest = hashlib.sha256()
    with target.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(inputs: dict[str, Any]) -> str:
    """A stable hash of JSON-able inputs; :class:`Path` values stand for their content."""

    def encode(value: Any) -> Any:
        if isinstance(value, Path):
            return {"file": file_digest(value)}
        if isinstance(value, dict):
            return {str(k): encode(v) for k, v in sorted(value.items())}
        if isinstance(value, (list, tuple)):
            return [encode(v) for v in value]
        return value

    blob = json.dumps(encode(inputs), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


@dataclass
class StageOutcome:
    name: str
    ran: bool
    seconds: float
    detail: str = ""


class StageLedger:
    """The ``stages.json`` of a run directory."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / STAGES_FILE
        self.entries: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            data = read_json(self.path, "stage ledger")
            if not isinstance(data, dict) or not all(isinstance(v, dict) and "fingerprint" in v for v in data.values()):
                raise ApcirError("not a stage ledger; delete it to redo every stage", path=self.path)
            self.entries = data

    def _save(self) -> None:
        write_text(self.path, json.dumps(self.entries, indent=1, sort_keys=True))

    def run(
        self,
        name: str,
        inputs: dict[str, Any],
        outputs: list[Path],
        work: Callable[[], str | None],
    ) -> StageOutcome:
        """Run ``work`` unless the stage finished before with the same inputs; ``work`` returns a detail line."""
        key = fingerprint(inputs)
        entry = self.entries.get(name)
        if entry and entry["fingerprint"] == key and entry.get("finished") and all(p.exists() for p in outputs):
            return StageOutcome(name, ran=False, seconds=0.0, detail=entry.get("detail", ""))
        if entry and entry["fingerprint"] != key:
            for path in outputs:  # inputs changed: what is on disk belongs to other inputs
                if path.is_file():
                    path.unlink()
        self.entries[name] = {"fingerprint": key, "finished": False}
        self._save()
        start = time.perf_counter()
        detail = work() or ""
        seconds = time.perf_counter() - start
        self.entries[name] = {"fingerprint": key, "finished": True, "seconds": round(seconds, 3), "detail": detail}
        self._save()
        return StageOutcome(name, ran=True, seconds=seconds, detail=detail)

    def mark_unfinished(self, name: str) -> None:
        """Have the next run resume this stage (e.g. some of its turns failed and should be retried)."""
        if name in self.entries:
            self.entries[name]["finished"] = False
            self._save()
