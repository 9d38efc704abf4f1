"""The export stage: a fused run as an iKAT submission, and the offline checks of a submission.

``apcir export`` / ``apcir validate`` and ``apcir run`` call these functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from apcir.console import warn
from apcir.contract.records import Turn
from apcir.errors import ApcirError
from apcir.export.common import SubmissionInputs, submitted_hits
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


def check_inputs(inputs: SubmissionInputs, fmt: str, *, allow_missing_text: bool = False) -> None:
    """Refuse an incomplete submission, warn about what will not be in it (see :func:`write_submission`)."""
    spec = FORMATS.get(fmt)
    known = {t.turn_id for t in inputs.turns}
    outside = sorted(set(inputs.run) - known)
    if outside:
        warn(f"{len(outside)} turn(s) of the run are not in the topics and are not exported: {_shown(outside)}")
    if not inputs.reformulations:
        warn("no reformulations given: responses fall back to the top passage's text and carry no PTKB provenance")
    else:
        lacking = sorted(t for t in known if t in inputs.run and t not in inputs.reformulations)
        if lacking:
            warn(f"{len(lacking)} turn(s) have no reformulation, so no PTKB provenance and no pseudo-response: "
                 f"{_shown(lacking)}")
    if spec.passage_text or inputs.mode == "passage":
        cited = sorted({pid for t in known for pid, _ in submitted_hits(inputs.run, t, inputs.used_top)})
        missing = [pid for pid in cited if not inputs.passages.get(pid, "").strip()]
        if missing and not allow_missing_text:
            raise ApcirError(
                f"{len(missing)} of the {len(cited)} cited passages have no text in the given collection (e.g. "
                f"{missing[0]}): the submission would be incomplete; give the collection that holds them "
                "(--collection / retrieval.passages), or pass --allow-missing-text (export.allow_missing_text)"
            )
        if missing:
            warn(f"{len(missing)} cited passage(s) have no text; `apcir validate` will flag them: {_shown(missing)}")


def _shown(items: list[str]) -> str:
    return ", ".join(items[:10]) + (" ..." if len(items) > 10 else "")


def write_submission(inputs: SubmissionInputs, fmt: str, out: Path, *, allow_missing_text: bool = False) -> Path:
    """Build the submission in format ``fmt`` and write it atomically to ``out``.

    Refused when cited passages have no text (unless ``allow_missing_text``);
    turns of the run outside the topics, and turns without a reformulation,
    are named in a warning.
    """
    check_inputs(inputs, fmt, allow_missing_text=allow_missing_text)
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
        for turn in _items(data.get("turns")):
            for response in _items(turn.get("responses")) if isinstance(turn, dict) else []:
                for item in _items(response.get("ptkb_provenance")) if isinstance(response, dict) else []:
                    return "ikat23" if isinstance(item, dict) else "ikat24"
        return "ikat24"
    if isinstance(data, dict) and "references" in data:
        return "ikat25"
    raise ApcirError("not an iKAT submission: expected a JSON object with 'turns' or JSONL lines", path=path)


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def validate_submission(path: Path, turns: list[Turn], fmt: str | None = None) -> list[str]:
    """Every problem found in the submission at ``path`` against the topics ``turns``."""
    return FORMATS.get(fmt or detect_format(path)).call("check", path, turns)  # type: ignore[no-any-return]
