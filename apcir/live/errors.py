"""What can stop a live run, and the exit status of each: the table of ``apcir converse``'s exit codes.

The server's refusals are told apart by their status (and, where one status has two meanings, by its detail),
so that a script driving ``apcir converse`` knows whether to fix the token, pick another run id, run the same
command again, or wait for the server.
"""

from __future__ import annotations

import json
from typing import Any

from apcir.errors import ApcirError

DONE = 0
RECORD_DIFFERS = 1
USER_ERROR = 2
INTERNAL_ERROR = 3
WHERE_UNKNOWN = 4
TOKEN_REFUSED = 5
RUN_ID_TAKEN = 6
ANSWER_REFUSED = 7
BUDGET_SPENT = 8
SERVER_FAILING = 9
INTERRUPTED = 130

EXIT_CODES: dict[int, str] = {
    DONE: "the run is complete and the server's record (run/dump) matches the journal",
    RECORD_DIFFERS: "the run is complete, but the server's record differs from what was sent (each difference "
                    "is named), or could not be read",
    USER_ERROR: "a user error: the config, an option (an --api that is not http(s)://), no token in the variable, "
                "an unusable run directory (or one another apcir converse is playing: refused at once), or a "
                "request the server refused as malformed (400: an empty run id or description)",
    INTERNAL_ERROR: "an internal error (a bug in apcir): one line saying where the traceback was written",
    WHERE_UNKNOWN: "the server cannot say where the run stands (no run/session, or it does not know the run, "
                   "e.g. a debug run after the server restarted): nothing was sent",
    TOKEN_REFUSED: "the token was refused: 400 (not base64) or 401 (not a team's token); nothing was started, "
                   "and the same command with the right token starts the run in the same directory",
    RUN_ID_TAKEN: "the run id is taken or finished (412), or it is another team's run (403)",
    ANSWER_REFUSED: "the server refused an answer (422) without naming a token limit below the one in force, or "
                    "refused it again once cut to the limit it named; the answer stays in the journal and the "
                    "same command with a lower --response-tokens sends it cut to that limit",
    BUDGET_SPENT: "the budget is spent (403: runs, or debug sessions)",
    SERVER_FAILING: "the server cannot be reached, or kept failing (5xx) after the retries",
    INTERRUPTED: "interrupted (Ctrl-C): the journal is on disk and the same command resumes",
}
"""Every exit status of ``apcir converse``, documented in docs/guide/converse.md and docs/reference/errors.md."""

STATUS = {
    400: "bad request",
    401: "the token is not valid",
    403: "forbidden",
    404: "not found",
    412: "the run id is taken or finished",
    422: "the request was refused",
    428: "no active run of this id",
    500: "server error",
}
"""What the organisers' server means by each status it answers (its detail says which case)."""


def summarise(detail: Any) -> str:
    """A ``detail`` in one line: FastAPI's list of validation errors as ``field: message`` (without the input,
    which for a long response is the whole response), anything else as it is."""
    if isinstance(detail, list):
        parts = []
        for error in detail:
            if not isinstance(error, dict):
                parts.append(str(error))
                continue
            loc = [str(x) for x in error.get("loc", [])]
            where = ".".join(loc[1:] if loc[:1] == ["body"] and len(loc) > 1 else loc)
            message = str(error.get("msg", error.get("type", "invalid"))).removeprefix("Value error, ")
            parts.append(f"{where}: {message}" if where else message)
        return "; ".join(parts)
    if isinstance(detail, dict):
        return json.dumps(detail, ensure_ascii=False)
    return " ".join(str(detail).split())


class LiveError(ApcirError):
    """The server refused a request: its status, its ``detail`` in one line, and the exit status that says
    which case it was."""

    def __init__(self, status: int, detail: str):
        super().__init__(f"the simulation server answered {status} ({STATUS.get(status, 'error')}): {detail}")
        self.status = status
        self.detail = detail
        self.exit_code = exit_code_of(status, detail)


def exit_code_of(status: int, detail: str) -> int:
    if status == 401 or (status == 400 and "base64" in detail):
        return TOKEN_REFUSED
    if status == 403:
        return BUDGET_SPENT if "exceeded" in detail else RUN_ID_TAKEN
    if status == 412:
        return RUN_ID_TAKEN
    if status == 422:
        return ANSWER_REFUSED
    if status in (404, 428):
        return WHERE_UNKNOWN
    if status >= 500:
        return SERVER_FAILING
    return USER_ERROR


class LostReply(ApcirError):
    """A request may have reached the server, but its reply did not arrive."""

    exit_code = SERVER_FAILING


class ServerUnreachable(ApcirError):
    """The server refused the connection, even after the retries."""

    exit_code = SERVER_FAILING


class SessionUnknown(ApcirError):
    """The server cannot say where the conversation stands: nothing is sent blindly."""

    exit_code = WHERE_UNKNOWN


class AnswerRefused(ApcirError):
    """The server refused an answer (422) and named no lower limit to fit it to, or refused the fitted answer; it
    stays in the journal, to be sent again fitted to the limit in force."""

    exit_code = ANSWER_REFUSED
