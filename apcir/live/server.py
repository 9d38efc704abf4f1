"""A local server of the simulation API on 127.0.0.1, played by simulated users (``apcir simulate-user``).

It keeps the protocol's fields, limits and error codes (:mod:`apcir.live.protocol`) for either year, and logs
every exchange (utterance, answer, citations, PTKB provenance) as JSON lines, so a test can check that every
utterance was answered exactly once. ``run/session`` behaves as the organisers' server is described to: its
flags are always false, and right after a session ended (the user's closing words) it fails with 500.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from apcir.live.protocol import PROTOCOLS, Protocol, count_tokens
from apcir.live.users import Session


class Refused(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass
class SimulatedRun:
    run_id: str
    description: str
    sessions: list[Session]
    track_persona: bool
    index: int = 0
    answers: list[dict[str, Any]] = field(default_factory=list)
    completed: bool = False

    @property
    def session(self) -> Session:
        return self.sessions[self.index]


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
    """The server's state: runs by id, the users' sessions, the debug budget and the log."""

    def __init__(self, make_sessions: Callable[[], list[Session]], token: str, protocol: Protocol,
                 log: Path | None = None, budget: int = 5, team_id: str = "apcir-test",
                 faults: Faults | None = None):
        self.make_sessions = make_sessions
        self.token = token
        self.protocol = protocol
        self.log = log
        self.budget = budget
        self.team_id = team_id
        self.faults = faults or Faults()
        self.runs: dict[str, SimulatedRun] = {}
        self.debug_runs: dict[str, SimulatedRun] = {}
        self.lock = threading.Lock()
        self.continues = 0
        """``run/continue`` requests received so far (the faults count them, 1-based)."""

    # ---- replies ------------------------------------------------------------------------------------
    def _reply(self, run: SimulatedRun, flags: bool = True) -> dict[str, Any]:
        session = run.session
        last_session = session.closing
        reply: dict[str, Any] = {
            "timestamp": datetime.now(UTC).isoformat(), "run_id": run.run_id, "topic_id": session.topic_id,
            "user_id": session.user_id, "utterance": session.current(), "history": list(session.history),
            "last_response_of_session": last_session and flags,
            "last_response_of_run": last_session and flags and run.index == len(run.sessions) - 1,
        }
        if self.protocol.nested:
            reply["user_meta"] = {"ptkb": list(session.ptkb.values())}
        if reply["last_response_of_run"]:
            run.completed = True  # the user's last words: every later request is an error
        return reply

    def _write_log(self, entry: dict[str, Any]) -> None:
        if self.log is not None:
            with self.log.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry, ensure_ascii=False) + "\n")

    # ---- endpoints ------------------------------------------------------------------------------------
    def start(self, body: dict[str, Any], debug: bool) -> dict[str, Any]:
        runs = self.debug_runs if debug else self.runs
        run_id, description = str(body.get("run_id") or ""), str(body.get("description") or "")
        if not run_id.strip() or not description.strip():
            raise Refused(400, "run_id and description must not be empty")
        if run_id in runs:
            raise Refused(412, f"run {run_id} already exists")
        if debug:
            self._spend()
        run = SimulatedRun(run_id, description, self.make_sessions(), self.protocol.track_persona(body))
        if not run.sessions:
            raise Refused(400, "no more topics")
        runs[run_id] = run
        return self._reply(run)

    def _spend(self) -> None:
        if self.budget <= 0:
            raise Refused(403, "debug budget spent")
        self.budget -= 1

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
        run = self._active(str(body.get("run_id") or ""), debug)
        response, citations = body.get("response"), body.get("citations", {})
        if not isinstance(response, str) or not isinstance(citations, dict):
            raise Refused(422, "response must be a string and citations an object")
        session = run.session
        if not session.closing:
            tokens = count_tokens(response)
            if tokens > self.protocol.response_tokens:
                raise Refused(422, f"response has {tokens} tokens, more than {self.protocol.response_tokens}")
            if len(citations) > 1000:
                raise Refused(422, "more than 1000 citations")
            utterance = session.current()
            entry = {"run_id": run.run_id, "topic_id": session.topic_id, "user_id": session.user_id,
                     "turn": len(session.history) // 2 + 1, "utterance": utterance, "response": response,
                     "citations": citations, "ptkb_provenance": self.protocol.ptkb_provenance(body)}
            entry.update(session.advance(response))  # the user's own notes (a rubric user's score)
            run.answers.append(entry)
            self._write_log(entry)
            session.history += [{"role": "user", "content": utterance}, {"role": "assistant", "content": response}]
            return self._reply(run)
        # the closing words' response is ignored: the next topic starts
        if debug:
            self._spend()
        run.index += 1
        return self._reply(run)

    def _active(self, run_id: str, debug: bool) -> SimulatedRun:
        run = (self.debug_runs if debug else self.runs).get(run_id)
        if run is None or run.completed:
            raise Refused(428, f"no active run {run_id}")
        return run

    def session(self, run_id: str) -> dict[str, Any]:
        run = self._active(run_id, False)
        if run.session.closing:
            raise Refused(500, "Internal Server Error")
        return self._reply(run, flags=False)

    def status(self, run_id: str) -> dict[str, Any]:
        run = self.runs.get(run_id)
        if run is None:
            raise Refused(428, f"no active run {run_id}")
        pairs = [[s.user_id, s.topic_id] for s in run.sessions]
        done = pairs[: run.index + (1 if run.completed else 0)]
        return self.protocol.status(pairs[len(done):], done, "completed" if run.completed else "active")

    def dump(self, run_id: str) -> str:
        run = self.runs.get(run_id)
        if run is None:
            raise Refused(428, f"no active run {run_id}")
        return "".join(json.dumps(a, ensure_ascii=False) + "\n" for a in run.answers)

    # ---- HTTP ------------------------------------------------------------------------------------------
    def handle(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, str, str]:
        """(status, content type, body) of one request."""
        if headers.get("Authorization") != f"Bearer {self.token}":
            return 401, "application/json", json.dumps({"detail": "Invalid token"})
        url = urlparse(path)
        route = url.path.strip("/")
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        try:
            data = json.loads(body or b"{}") if method == "POST" else {}
            if not isinstance(data, dict):
                raise Refused(422, "the body must be a JSON object")
        except json.JSONDecodeError:
            return 422, "application/json", json.dumps({"detail": "invalid JSON"})
        try:
            with self.lock:
                if route == "auth/verify":
                    return 200, "application/json", json.dumps({"team_id": self.team_id})
                if route == "budget/check":
                    return 200, "application/json", json.dumps({"budget": self.budget})
                if method == "POST" and route in ("run/start", "debug/start"):
                    result: Any = self.start(data, route.startswith("debug"))
                elif method == "POST" and route in ("run/continue", "debug/continue"):
                    result = self.continue_(data, route.startswith("debug"))
                elif route == "run/session":
                    result = self.session(query.get("run_id", ""))
                elif route == "run/status":
                    result = self.status(query.get("run_id", ""))
                elif route == "run/dump":
                    return 200, "application/jsonl", self.dump(query.get("run_id", ""))
                else:
                    return 404, "application/json", json.dumps({"detail": "Not Found"})
        except Refused as exc:
            detail = exc.detail
            if self.faults.echo_token:
                detail += f" (request had Authorization: {headers.get('Authorization')})"
            return exc.status, "application/json", json.dumps({"detail": detail})
        except Dropped:
            return 0, "", ""
        return 200, "application/json", json.dumps(result, ensure_ascii=False)


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


def protocol_for(year: int) -> Protocol:
    from apcir.errors import ApcirError

    if year not in PROTOCOLS:
        raise ApcirError(f"--protocol {year}: expected one of {', '.join(map(str, PROTOCOLS))}")
    return PROTOCOLS[year]
