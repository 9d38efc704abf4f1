"""The LLM stage: one call per turn for the personalisation level and three reformulations.

Public API (imported lazily so that ``apcir.llm.schema`` stays cheap to import
and nothing here needs the openai package or an API key until a request is sent):

* ``apcir.llm.reformulate.reformulate``: turns -> reformulations JSONL, cached, resumable (import it from
  the submodule: the package attribute ``reformulate`` is that submodule once it has been imported);
* :func:`is_offline`: ``manual`` and ``heuristic`` need no model and no network;
* :class:`ReformulateSummary`, :class:`PromptOptions`, :class:`RetryPolicy`.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "is_offline": "apcir.llm.reformulate",
    "ReformulateSummary": "apcir.llm.reformulate",
    "PromptOptions": "apcir.llm.prompt",
    "build_prompt": "apcir.llm.prompt",
    "RetryPolicy": "apcir.llm.client",
    "OFFLINE_MODELS": "apcir.llm.offline",
}

__all__ = [
    "OFFLINE_MODELS",
    "PromptOptions",
    "ReformulateSummary",
    "RetryPolicy",
    "build_prompt",
    "is_offline",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'apcir.llm' has no attribute {name!r}")
