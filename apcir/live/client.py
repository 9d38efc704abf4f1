"""A client of the simulation API: typed replies, retries on server faults, and a token that never shows.

The token is sent as ``Authorization: Bearer <token>`` and appears nowhere else: not in an error message,
a log line or a file (:meth:`SimulationClient.clean` removes it from any text that could quote it).
A 5xx or a refused connection is retried with backoff, sending the same body again, except where the server
answers 500 as a matter of course (``run/session`` with no session open: an answer, not a fault); a timeout
(the request may have reached the server) is a :class:`LostReply`, for the caller to ask ``run/session`` before
sending anything again; any other refusal stops with one line (:class:`LiveError`, whose exit status says
which case it was: :mod:`apcir.live.errors`). An address that is not ``http(s)://host...`` is refused at once.
:meth:`SimulationClient.access` is ``apcir converse --check``: the token's team and the budget left, nothing spent.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from apcir.errors import ApcirError
from apcir.live.errors import LiveError, LostReply, ServerUnreachable, summarise
from apcir.live.protocol import Budget, Protocol, RunStatus, Utterance, parse_dump

__all__ = ["Access", "LiveError", "LostReply", "SimulationClient"]


@dataclass(frozen=True)
class Access:
    """What a token gives: its team (``auth/verify``) and the budget left (``budget/check``)."""

    team_id: str
    budget: Budget


class SimulationClient:
    def __init__(self, base_url: str, token: str, protocol: Protocol, *, timeout: float = 300.0,
                 retries: int = 5, retry_delay: float = 1.0):
        from apcir.llm.settings import redact_url, url_problem

        problem = url_problem(base_url)
        if problem is not None:  # else urllib tries it (ftp://...) and the retries wait out a refusal
            raise ApcirError(f"--api {redact_url(base_url)!r}: {problem}")
        if not token:
            raise ApcirError("no API token: set IKAT_API_TOKEN (or the variable --token-env names)")
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self._token = token
        self.protocol = protocol
        self.timeout = timeout
        self.retries = retries
        self.retry_delay = retry_delay

    def clean(self, text: str) -> str:
        """``text`` without the token (for anything said or written)."""
        return text.replace(self._token, "<token>") if self._token else text

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                 retry_faults: bool = True) -> Any:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        delay = self.retry_delay
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(self.base_url + path, data=data, method=method, headers={
                "Authorization": f"Bearer {self._token}", "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                    text = reply.read().decode("utf-8")
                    kind = reply.headers.get("Content-Type", "")
                    return text if ("ndjson" in kind or "jsonl" in kind) else json.loads(text or "null")
            except urllib.error.HTTPError as exc:
                detail = self._detail(exc)
                if exc.code >= 500 and retry_faults and attempt < self.retries:
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise LiveError(exc.code, self.clean(detail)) from None
            except urllib.error.URLError as exc:
                refused = isinstance(exc.reason, ConnectionRefusedError)
                if refused and attempt < self.retries:
                    time.sleep(delay)
                    delay *= 2
                    continue
                if isinstance(exc.reason, TimeoutError):
                    raise LostReply(f"{method} {path}: no reply within {self.timeout:g} s") from None
                raise ServerUnreachable(f"cannot reach the simulation server at {self.clean(self.base_url)}: "
                                        f"{self.clean(str(exc.reason))}") from None
            except TimeoutError:
                raise LostReply(f"{method} {path}: no reply within {self.timeout:g} s") from None
            except (ConnectionError, http.client.HTTPException) as exc:  # dropped after the request went out
                raise LostReply(f"{method} {path}: the connection dropped before the reply "
                                f"({type(exc).__name__})") from None
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _detail(exc: urllib.error.HTTPError) -> str:
        """The server's ``detail`` in one line (FastAPI's list of validation errors summarised)."""
        try:
            text = exc.read().decode("utf-8")
        except OSError:
            text = ""
        try:
            payload = json.loads(text or "{}")
        except ValueError:
            return summarise(text) if text.strip() else (exc.reason if isinstance(exc.reason, str)
                                                          else str(exc.code))
        if isinstance(payload, dict) and "detail" in payload:
            return summarise(payload["detail"])
        return summarise(payload)

    @staticmethod
    def _query(run_id: str) -> str:
        return urllib.parse.urlencode({"run_id": run_id})

    # ---- the endpoints --------------------------------------------------------------------------------
    def verify(self) -> str:
        return str(self._request("GET", "auth/verify")["team_id"])

    def budget(self) -> Any:
        return self._request("GET", "budget/check")

    def access(self) -> Access:
        """The token's team and the budget left of each kind: ``auth/verify`` and ``budget/check`` only (no run
        or debug session is started, nothing is spent). A 404 means the address is not the API's base URL."""
        try:
            team = self.verify()
        except LiveError as exc:
            if exc.status != 404:
                raise
            from apcir.llm.settings import redact_url

            raise ApcirError(f"--api {redact_url(self.base_url)!r}: no auth/verify there (404); expected the "
                             "simulation API's base URL (the organisers' ends in /simulation/)") from None
        return Access(team, Budget.read(self.budget()))

    def start(self, run_id: str, description: str, *, track_persona: bool = False, debug: bool = False) -> Utterance:
        path = "debug/start" if debug else "run/start"
        return Utterance.model_validate(self._request("POST", path, self.protocol.start_body(
            run_id, description, track_persona)))

    def send(self, run_id: str, response: str, citations: dict[str, float], ptkb_provenance: list[str], *,
             debug: bool = False) -> Utterance:
        path = "debug/continue" if debug else "run/continue"
        return Utterance.model_validate(self._request("POST", path, self.protocol.continue_body(
            run_id, response, citations, ptkb_provenance)))

    def session(self, run_id: str, *, debug: bool = False) -> Utterance:
        """The open session's current utterance. With no session open the server answers 500, at once (not
        retried: it is where the run stands, not a fault)."""
        path = f"{'debug' if debug else 'run'}/session?{self._query(run_id)}"
        return Utterance.model_validate(self._request("GET", path, retry_faults=False))

    def status(self, run_id: str) -> RunStatus:
        """``run/status`` (runs only: a debug run has none)."""
        return RunStatus.read(self._request("GET", f"run/status?{self._query(run_id)}"))

    def dump(self, run_id: str) -> list[dict[str, Any]]:
        """``run/dump``: the server's record of the run, one record per request (NDJSON)."""
        reply = self._request("GET", f"run/dump?{self._query(run_id)}")
        if isinstance(reply, list):  # a server answering a JSON list
            return [r for r in reply if isinstance(r, dict)]
        return parse_dump(reply if isinstance(reply, str) else json.dumps(reply))
