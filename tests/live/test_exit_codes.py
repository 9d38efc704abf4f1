"""``apcir converse``'s exit codes: one per case, the server's statuses mapped to them, and the documented tables
(the live-task guide and the errors reference) listing every one as the code says it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from apcir.live import errors
from apcir.live.errors import EXIT_CODES, LiveError, exit_code_of, summarise

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize(("status", "detail", "code"), [
    (400, "Token is not base64 encoded.", errors.TOKEN_REFUSED),
    (401, "Token is invalid.", errors.TOKEN_REFUSED),
    (401, "Not authenticated", errors.TOKEN_REFUSED),
    (400, "Run name cannot be empty. Please provide a meaningful name.", errors.USER_ERROR),
    (403, "You exceeded the maximum number of runs you can submit.", errors.BUDGET_SPENT),
    (403, "You exceeded the maximum number of requests you can submit.", errors.BUDGET_SPENT),
    (403, 'Run with the name "r" does not belong to team "t".', errors.RUN_ID_TAKEN),
    (412, 'Active run with the name "r" already exists or a run with that name was already completed before.',
     errors.RUN_ID_TAKEN),
    (422, "response: Response is too long (376 tokens). Response exceeds limit of 250 tokens.",
     errors.ANSWER_REFUSED),
    (428, 'Run with the name "r" does not exist or was completed.', errors.WHERE_UNKNOWN),
    (404, 'Run "r" does not exist.', errors.WHERE_UNKNOWN),
    (500, "Internal Server Error", errors.SERVER_FAILING),
    (503, "Service Unavailable", errors.SERVER_FAILING),
])
def test_each_status_of_the_server_has_its_exit_code(status, detail, code):
    assert exit_code_of(status, detail) == code
    assert LiveError(status, detail).exit_code == code


def test_the_exit_codes_are_distinct_and_each_is_explained():
    named = [v for k, v in vars(errors).items() if k.isupper() and isinstance(v, int) and k not in ("STATUS",)]
    assert sorted(named) == sorted(EXIT_CODES) and len(set(named)) == len(named)


def test_fastapis_error_list_is_one_line_without_the_input():
    detail = [{"type": "value_error", "loc": ["body", "response"], "input": "word " * 300,
               "msg": "Value error, Response is too long (300 tokens). Response exceeds limit of 250 tokens."},
              {"type": "float_parsing", "loc": ["body", "citations", "p1"], "input": "x",
               "msg": "Input should be a valid number, unable to parse string as a number"}]
    line = summarise(detail)
    assert line == ("response: Response is too long (300 tokens). Response exceeds limit of 250 tokens.; "
                    "citations.p1: Input should be a valid number, unable to parse string as a number")
    assert "\n" not in summarise("two\nlines")


def _table(page: Path, header: str) -> dict[int, str]:
    text = page.read_text(encoding="utf-8")
    start = text.index(header)
    rows = {}
    for line in text[start:].splitlines()[2:]:
        match = re.match(r"^\| (\d+) \| (.*) \|$", line)
        if match is None:
            break
        rows[int(match.group(1))] = match.group(2).replace("`", "")
    return rows


@pytest.mark.parametrize(("page", "header"), [("guide/converse.md", "| exit | meaning |"),
                                              ("reference/errors.md", "| exit | `apcir converse` |")])
def test_the_documented_tables_list_every_exit_code_as_the_code_says_it(page, header):
    assert _table(DOCS / page, header) == EXIT_CODES
