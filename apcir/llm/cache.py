"""Content-addressed cache of LLM answers.

The key is the SHA-256 of (model, messages, generation parameters); the value
is the validated answer text and the token usage of the call that produced it.
One file per key under ``<dir>/<2 hex>/<key>.json``, written atomically
(:func:`apcir.io.atomic_write`), so two
processes writing the same key never leave a torn file (the last one wins and
both wrote the same answer). The base URL and the API key are not part of the
key and never stored: the same model name behind another server is assumed to
be the same model.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from apcir.contract.reformulations import Usage
from apcir.errors import ApcirError
from apcir.io import write_text

CACHE_ENV = "APCIR_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$APCIR_CACHE_DIR``, else ``$XDG_CACHE_HOME/apcir/llm``, else ``~/.cache/apcir/llm``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "apcir" / "llm"


def cache_key(model: str, messages: list[dict[str, str]], params: dict[str, Any]) -> str:
    payload = {"model": model, "messages": messages, "params": params}
    text = json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class CachedAnswer(BaseModel):
    key: str
    model: str
    content: str
    usage: Usage = Usage()


class ResponseCache:
    """Answers on disk by content hash; unreadable entries count as misses."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self._warned = False

    def path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> CachedAnswer | None:
        try:
            text = self.path(key).read_text(encoding="utf-8")
            answer = CachedAnswer.model_validate_json(text)
        except (FileNotFoundError, ValidationError, UnicodeDecodeError, OSError):
            return None
        return answer if answer.key == key else None

    def put(self, answer: CachedAnswer) -> None:
        write_text(self.path(answer.key), answer.model_dump_json())

    def check_writable(self) -> None:
        """Refuse, before any request, a cache folder that cannot be written (read-only, a file, no space for
        a folder): the user asked for a cache, so apcir stops rather than pay for answers it cannot keep.
        ``--no-cache`` or ``--cache-dir`` is the way out."""
        from apcir.io import check_writable_dir

        try:
            check_writable_dir(self.directory, "LLM answer cache folder")
        except ApcirError as exc:
            raise ApcirError(f"{exc}; give another --cache-dir (cache_dir), or --no-cache") from None

    def put_or_warn(self, answer: CachedAnswer) -> None:
        """Cache an answer; a write that fails mid-run (a full disk) is said once and the work goes on:
        the answer is still handed to the stage, whose output keeps it."""
        try:
            self.put(answer)
        except ApcirError as exc:
            if not self._warned:
                self._warned = True
                from apcir.console import warn

                warn(f"the LLM answer cache could not be written ({exc}); going on without caching new answers "
                     "(the stage's output keeps them)")
