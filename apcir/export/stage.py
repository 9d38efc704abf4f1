"""The export stage: a fused run as an iKAT submission, and the offline checks of a submission.

``apcir export`` / ``apcir validate`` and ``apcir run`` call these functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from apcir.contract.records import Turn
from apcir.errors import ApcirError
from apcir.export.common import SubmissionInputs
from apcir.export.formats import FORMATS
from apcir.io import read_json, read_text, write_json, write_jsonl

Submission = list[dict[str, Any]] | dict[str, Any]


def build_submission(inputs: SubmissionInputs, fmt: str) -> Submission:
    """The submission in format ``fmt`` as JSON-ready data: a dict (JSON) or a list of lines (JSONL)."""
    return FORMATS.get(fmt).call("build", inputs)  # type: ignore[no-any-return]


def save_submission(data: Submission, out: Path) -> Path:
    """Write a submission atomically: JSONL for a list, JSON otherwise."""
    if isinstance(data, list):
        write_jsonl(out, data)
    else:
        write_json(out, data)
    return out


def write_submission(inputs: SubmissionInputs, fmt: str, out: Path) -> Path:
    """Build the submission in format ``fmt`` and write it atomically to ``out``."""
    return save_submission(build_submission(inputs, fmt), out)


def detect_format(path: Path) -> str:
    """``ikat25`` for JSONL, otherwise ``ikat23`` or ``ikat24`` by the shape of PTKB provenance."""
    text = read_text(path, "submission").lstrip() if path.exists() else ""
    if not text:
        raise ApcirError("submission file is missing or empty", path=path)
    if text.startswith("{") and "\n{" in text.strip():
        return "ikat25"
    data = read_json(path, "submission")
    if isinstance(data, dict) and "turns" in data:
        for turn in data.get("turns") or []:
            for response in (turn.get("responses") or []) if isinstance(turn, dict) else []:
                for item in (response.get("ptkb_provenance") or []) if isinstance(response, dict) else []:
                    return "ikat23" if isinstance(item, dict) else "ikat24"
        return "ikat24"
    if isinstance(data, dict) and "references" in data:
        return "ikat25"
    raise ApcirError("not an iKAT submission: expected a JSON object with 'turns' or JSONL lines", path=path)


def validate_submission(path: Path, turns: list[Turn], fmt: str | None = None) -> list[str]:
    """Every problem found in the submission at ``path`` against the topics ``turns``."""
    return FORMATS.get(fmt or detect_format(path)).call("check", path, turns)  # type: ignore[no-any-return]
