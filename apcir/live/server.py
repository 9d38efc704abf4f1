"""A local server of the simulation API on 127.0.0.1, played by simulated users (``apcir simulate-user``).

It behaves as the organisers' server (Sim.API, :mod:`apcir.live.protocol`) does, point by point, so that a run
developed against it meets the real one unchanged; tests run the same conversation against both:

- ``history`` ends with the current utterance; replies carry no ``user_meta`` (``send_ptkb``: the 2026
  guidelines' ``user_meta.ptkb``, which the organisers' server does not send; ``send_verdicts``: the current
  utterance's own ``user_meta``, a rubric user's ``rubric`` and ``rubric_score``, which it does not send either);
- ``run/session`` (``debug/session``) answers the open session, 500 (``Internal Server Error``, plain text) with
  none open (between topics, after the run), 428 for a run it does not hold;
- ``run/status`` is ``{"status", "done_topics", "open_topics"}``, a topic being done as soon as its session
  opened, ``complete`` when none is left to open; 404 for a run it does not know and for a debug run;
- ``run/dump`` is NDJSON (``application/x-ndjson``), one record per request (the closing words with a null
  ``assistant_text``), ``metadata.topic_id`` ``{topic}_{i}``; a record's ``user_meta`` is the *next*
  utterance's, as the organisers' ``run/continue`` stores it (``session.user_meta[-2]``): for a rubric user the
  score of the record's own answer (``rubric_score``) and the rubric the next utterance pursues (``rubric``;
  none before the closing words), the closing record the last score only (:mod:`apcir.live.verdicts`);
- start stores ``extra`` and continue ``meta`` as sent, and ignores any other field; the errors are the
  server's statuses and details: 400 for a token that is not base64, an empty run id or description and a
  ``continue`` after the run; 401 for a wrong or missing token; 403 for a spent budget; 412 for a taken or
  finished run id; 422 with FastAPI's list of errors for a body it cannot take (a response over 250 tokens);
  428 for a run it does not hold.

It also logs every exchange (utterance, answer, citations, PTKB provenance) as JSON lines, so a test can check
that every utterance was answered exactly once, and makes faults on demand (:class:`Faults`).
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from apcir.live.protocol import RESPONSE_TOKENS, count_tokens
from apcir.live.users import Session

RUNS = 100
"""Runs a team may start (the organisers' configuration)."""
DEBUG_SESSIONS = 100
"""Debug sessions a team may open (the organisers' configuration)."""


class Refused(Exception):
    def __init__(self, status: int, detail: Any):
        super().__init__(str(detail))
        self.status = status
        self.detail = detail


class Crashed(Exception):
    """The organisers' server fails with 500 here (an unhandled exception, a plain-text body)."""


def _invalid(loc: list[str | int], message: str, given: Any, kind: str = "value_error") -> Refused:
    """A 422 as FastAPI words it: a list of errors, each with where, what and the input."""
    return Refused(422, [{"type": kind, "loc": ["body", *loc], "msg": message, "input": given}])


@dataclass
class SimulatedRun:
    run_id: str
    description: str
    extra: dict[str, Any] | None
    sessions: list[Session]
    debug: bool = False
    index: int = 0
    open: bool = True
    """A session is open (false between the user's closing words and the next ``continue``)."""
    records: list[dict[str, Any]] = field(default_factory=list)
    """What ``run/dump`` returns: one record per request, in order."""

    @property
    def session(self) -> Session:
        return self.sessions[self.index]

    @property
    def track_persona(self) -> bool:
        return bool((self.extra or {}).get("track_persona"))


@dataclass
class Faults:
    """Server faults on demand, by the number of the ``run/continue`` request (1-based), for testing a client's
    recovery: answer with an error status; hang, then drop the request unrecorded (as if it never fully
    arrived); or record it, then hang before replying (the reply lost)."""

    status: dict[int, int] = field(default_factory=dict)
    hang_unrecorded: set[int] = field(default_factory=set)
    hang_after_record: set[int] = field(default_factory=set)
    seconds: float = 5.0
    echo_token: bool = False
    """A careless server: an error's detail quotes the Authorization header it got."""
    reached: threading.Event = field(default_factory=threading.Event)
    """Set when a hang starts (a test kills the client then)."""


class Dropped(Exception):
    """The request is dropped: the connection closes with no reply."""


class Simulation:
    """The server's state: runs by id, the users' sessions, the budgets and the log."""

    def __init__(self, make_sessions: Callable[[], list[Session]], token: str, *, log: Path | None = None,
                 budget: int = DEBUG_SESSIONS, runs: int = RUNS, team_id: str = "apcir-test",
                 faults: Faults | None = None, send_ptkb: bool = False, response_tokens: int = RESPONSE_TOKENS,
                 send_verdicts: bool = False):
        self.make_sessions = make_sessions
        self.token = token
        self.log = log
        self.budget = budget
        """Debug sessions left."""
        self.runs_left = runs
        self.team_id = team_id
        self.faults = faults or Faults()
        self.send_ptkb = send_ptkb
        self.send_verdicts = send_verdicts
        self.response_tokens = response_tokens
        self.runs: dict[str, SimulatedRun] = {}
        self.debug_runs: dict[str, SimulatedRun] = {}
        self.lock = threading.Lock()
        self.continues = 0
        """``run/continue`` requests received so far (the faults count them, 1-based)."""

    # ---- replies ------------------------------------------------------------------------------------
    def _reply(self, run: SimulatedRun, *, flags: bool = True) -> dict[str, Any]:
        session = run.session
        ended = not run.open and flags
        reply: dict[str, Any] = {
            "timestamp": datetime.now().isoformat(), "run_id": run.run_id, "topic_id": session.topic_id,
            "user_id": session.user_id, "utterance": session.history[-1]["content"],
            "history": [dict(m) for m in session.history],
            "last_response_of_session": ended,
            "last_response_of_run": ended and run.index == len(run.sessions) - 1,
        }
        meta = {**({"ptkb": list(session.ptkb.values())} if self.send_ptkb else {}),
                **(session.meta() if self.send_verdicts else {})}
        if meta:
            reply["user_meta"] = meta
        return reply

    def _write_log(self, entry: dict[str, Any]) -> None:
        if self.log is not None:
            with self.log.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def _record(self, run: SimulatedRun, utterance: str, user_meta: dict[str, Any], text: str | None,
                citations: dict[str, float] | None, meta: Any) -> None:
        topic = run.session.topic_id
        number = sum(r["metadata"]["topic_id"].rpartition("_")[0] == topic for r in run.records) + 1
        run.records.append({
            "metadata": {"team_id": self.team_id, "run_id": run.run_id, "description": run.description,
                         "extra": run.extra, "topic_id": f"{topic}_{number}"},
            "responses": [{"rank": 1, "user_utterance": utterance, "user_meta": user_meta, "assistant_text": text,
                           "assistant_citations": citations, "assistant_meta": meta}]})

    # ---- bodies, checked as the organisers' pydantic models check them ---------------------------------
    @staticmethod
    def _text(body: dict[str, Any], name: str) -> str:
        if name not in body:
            raise _invalid([name], "Field required", body, "missing")
        if not isinstance(body[name], str):
            raise _invalid([name], "Input should be a valid string", body[name], "string_type")
        return str(body[name])

    @staticmethod
    def _object(body: dict[str, Any], name: str) -> dict[str, Any] | None:
        value = body.get(name)
        if value is not None and not isinstance(value, dict):
            raise _invalid([name], "Input should be a valid dictionary", value, "dict_type")
        return value

    def _response(self, body: dict[str, Any]) -> tuple[str, dict[str, float] | None, dict[str, Any] | None]:
        response = self._text(body, "response")
        tokens = count_tokens(response)
        if tokens > self.response_tokens:
            raise _invalid(["response"], f"Value error, Response is too long ({tokens} tokens). Response exceeds "
                           f"limit of {self.response_tokens} tokens.", response)
        citations = body.get("citations")
        if citations is not None:
            if not isinstance(citations, dict):
                raise _invalid(["citations"], "Input should be a valid dictionary", citations, "dict_type")
            for key, score in citations.items():
                if isinstance(score, bool) or not isinstance(score, (int, float)):
                    raise _invalid(["citations", key], "Input should be a valid number", score, "float_type")
            citations = {k: float(v) for k, v in citations.items()}
        return response, citations, self._object(body, "meta")

    # ---- endpoints ------------------------------------------------------------------------------------
    def start(self, body: dict[str, Any], debug: bool) -> dict[str, Any]:
        run_id, description = self._text(body, "run_id"), self._text(body, "description")
        extra = self._object(body, "extra")
        runs = self.debug_runs if debug else self.runs
        if debug:
            self._check_budget()
        elif self.runs_left <= 0:
            raise Refused(403, "You exceeded the maximum number of runs you can submit.")
        if not run_id:
            raise Refused(400, "Run name cannot be empty. Please provide a meaningful name.")
        if not description:
            raise Refused(400, "Run description cannot be empty. Please provide a meaningful description.")
        if run_id in runs:
            raise Refused(412, f'Active run with the name "{run_id}" already exists or a run with that name was '
                               "already completed before.")
        run = SimulatedRun(run_id, description, extra, self.make_sessions(), debug=debug)
        if not run.sessions:
            raise Crashed  # the organisers' server has no topic to open either
        if debug:
            self.budget -= 1
        else:
            self.runs_left -= 1
        runs[run_id] = run
        run.session.history = [{"role": "user", "content": run.session.current()}]
        return self._reply(run)

    def _check_budget(self) -> None:
        if self.budget <= 0:
            raise Refused(403, "You exceeded the maximum number of requests you can submit.")

    def continue_(self, body: dict[str, Any], debug: bool) -> dict[str, Any]:
        self.continues += 1
        number, faults = self.continues, self.faults
        if number in faults.status:
            raise Refused(faults.status[number], "a fault on demand")
        if number in faults.hang_unrecorded:
            faults.reached.set()
            time.sleep(faults.seconds)
            raise Dropped
        reply = self._continue(body, debug)
        if number in faults.hang_after_record:
            faults.reached.set()
            time.sleep(faults.seconds)
            raise Dropped
        return reply

    def _continue(self, body: dict[str, Any], debug: bool) -> dict[str, Any]:
        run_id = self._text(body, "run_id")
        response, citations, meta = self._response(body)
        run = self._held(run_id, debug)
        if not run.open:  # the closing words' response is ignored: the next topic opens
            if run.index + 1 >= len(run.sessions):
                raise Refused(400, f'No more open topics for run "{run.run_id}". Run was finished!')
            if debug:
                self._check_budget()
                self.budget -= 1
            run.index += 1
            run.open = True
            run.session.history = [{"role": "user", "content": run.session.current()}]
            return self._reply(run)
        session = run.session
        utterance = session.current()
        notes = session.advance(response)  # the user's own notes (a rubric user's score)
        session.history.append({"role": "assistant", "content": response})
        session.history.append({"role": "user", "content": session.current()})
        provenance = (meta or {}).get("ptkb_provenance")
        entry = {"run_id": run.run_id, "topic_id": session.topic_id, "user_id": session.user_id,
                 "turn": sum(m["role"] == "assistant" for m in session.history), "utterance": utterance,
                 "response": response, "citations": citations or {},
                 "ptkb_provenance": [str(x) for x in provenance] if isinstance(provenance, list) else [],
                 "debug": debug, **notes}
        self._write_log(entry)
        self._record(run, utterance, session.meta(), response, citations, meta)  # the next utterance's user_meta
        if session.closing:
            run.open = False
            self._record(run, session.current(), session.meta(), None, {}, {})
        return self._reply(run)

    def _held(self, run_id: str, debug: bool) -> SimulatedRun:
        run = (self.debug_runs if debug else self.runs).get(run_id)
        if run is None:
            raise Refused(428, f'Run with the name "{run_id}" does not exist or was completed.')
        return run

    def session(self, run_id: str, debug: bool) -> dict[str, Any]:
        run = self._held(run_id, debug)
        if not run.open:
            raise Crashed
        return self._reply(run, flags=False)

    def status(self, run_id: str) -> dict[str, Any]:
        run = self.runs.get(run_id)
        if run is None:
            raise Refused(404, f'Run "{run_id}" does not exist.')
        topics = [s.topic_id for s in run.sessions]
        done, left = topics[: run.index + 1], topics[run.index + 1:]
        return {"status": "complete" if not left else "active", "done_topics": done, "open_topics": left}

    def dump(self, run_id: str) -> str:
        run = self.runs.get(run_id)
        if run is None:
            raise Refused(404, f'Run "{run_id}" does not exist.')
        if not run.records:
            raise Crashed  # the organisers' server fails on a run with nothing recorded yet
        return "\n".join(json.dumps(r) for r in run.records)

    # ---- HTTP ------------------------------------------------------------------------------------------
    def _team(self, headers: Any) -> None:
        """The organisers' authentication: a bearer token, base64, a team's."""
        given = str(headers.get("Authorization") or "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Refused(401, "Not authenticated")
        if token == self.token:
            return
        try:
            base64.b64decode(token.encode()).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise Refused(400, "Token is not base64 encoded.") from None
        raise Refused(401, "Token is invalid.")

    def handle(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, str, str]:
        """(status, content type, body) of one request."""
        url = urlparse(path)
        route = url.path.strip("/")
        if route.startswith("simulation/"):  # the organisers' root path, where a client keeps it
            route = route.removeprefix("simulation/")
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        posts = ("run/start", "debug/start", "run/continue", "debug/continue")
        gets = ("auth/verify", "budget/check", "run/session", "debug/session", "run/status", "run/dump")
        if route not in posts + gets:
            return 404, "application/json", json.dumps({"detail": "Not Found"})
        if (method == "POST") != (route in posts):
            return 405, "application/json", json.dumps({"detail": "Method Not Allowed"})
        try:
            with self.lock:
                self._team(headers)
                debug = route.startswith("debug/")
                if method == "POST":
                    try:
                        data = json.loads(body or b"null")
                    except json.JSONDecodeError as exc:
                        raise _invalid([exc.pos], "JSON decode error", {}, "json_invalid") from None
                    if not isinstance(data, dict):
                        raise _invalid([], "Input should be an object", data, "dataclass_type")
                    result: Any = self.start(data, debug) if route.endswith("start") else self.continue_(data, debug)
                elif route == "auth/verify":
                    result = {"team_id": self.team_id}
                elif route == "budget/check":
                    result = {"remaining": {"debug": {"remaining": max(0, self.budget), "unit": "sessions"},
                                            "run": {"remaining": max(0, self.runs_left), "unit": "runs"}}}
                elif route.endswith("/session"):
                    result = self.session(self._run_id(query), debug)
                elif route == "run/status":
                    result = self.status(self._run_id(query))
                else:
                    return 200, "application/x-ndjson", self.dump(self._run_id(query))
        except Refused as exc:
            detail = exc.detail
            if self.faults.echo_token and isinstance(detail, str):
                detail += f" (request had Authorization: {headers.get('Authorization')})"
            return exc.status, "application/json", json.dumps({"detail": detail}, ensure_ascii=False)
        except Crashed:
            return 500, "text/plain; charset=utf-8", "Internal Server Error"
        except Dropped:
            return 0, "", ""
        return 200, "application/json", json.dumps(result, ensure_ascii=False)

    @staticmethod
    def _run_id(query: dict[str, str]) -> str:
        if "run_id" not in query:
            raise Refused(422, [{"type": "missing", "loc": ["query", "run_id"], "msg": "Field required",
                                 "input": None}])
        return query["run_id"]


class SimulationServer:
    """:class:`Simulation` served over HTTP on 127.0.0.1 (``port=0``: any free port); a context manager."""

    def __init__(self, simulation: Simulation, port: int = 0):
        self.simulation = simulation
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                status, kind, text = owner.simulation.handle(method, self.path, self.headers,
                                                             self.rfile.read(length))
                if status == 0:  # dropped: close the connection without a reply
                    self.close_connection = True
                    return
                payload = text.encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def start(self) -> SimulationServer:
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> SimulationServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

