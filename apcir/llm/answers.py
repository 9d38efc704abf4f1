"""Reading a model's answer: the JSON object in it, and the error that says why an answer is unusable."""

from __future__ import annotations

import json
from typing import Any


class InvalidAnswer(ValueError):
    """An answer that is not what was asked for (the message says why); :func:`apcir.llm.jobs.ask_all` repairs it once."""


def extract_json(raw: str) -> Any:
    """The JSON value of an answer: the whole text, inside a ``` fence, or the outermost ``{...}`` in it."""
    text = raw.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        if text.rstrip().endswith("```"):
            text = text.rstrip()[:-3]
    try:
        # strict=False: a literal newline or tab inside a string (llama.cpp's JSON grammar allows them; strict JSON
        # does not) is read as that character rather than failing the turn
        return json.loads(text, strict=False)
    except json.JSONDecodeError:
        start, end = text.find("{"), text.rfind("}")
        if start != -1 and end > start:
            try:
                return json.loads(text[start : end + 1], strict=False)
            except json.JSONDecodeError as exc:
                raise InvalidAnswer(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
        raise InvalidAnswer("no JSON object found in the answer") from None
    except RecursionError:
        raise InvalidAnswer("not valid JSON (nested too deeply)") from None
