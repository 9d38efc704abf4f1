"""Fixtures of the live tests: the organisers' real simulation server (started once per session, per xdist worker,
on a free port, in its own environment: tests/sim_api.py), a proxy in front of it that can hold back a reply,
and an experiment config for ``apcir converse`` on the small collection."""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import sim_api


@pytest.fixture(scope="session")
def real_server(tmp_path_factory):
    """The organisers' server (its ``dummy`` task: two topics, one question each, then the user's closing words).
    Skips where its snapshot or its environment is missing; under APCIR_REQUIRE_SIM_API=1 (``.ci/run``) fails."""
    problem = None
    if sim_api.vendor_dir() is None:
        problem = f"the organisers' simulation server was not found (looked in {sim_api.where_looked()})"
    elif not sim_api.python_of().exists():
        problem = f"its environment {sim_api.VENV} is not built (make simapi; make test builds it)"
    if problem is not None:
        if os.environ.get(sim_api.REQUIRE) == "1":
            pytest.fail(f"{sim_api.REQUIRE}=1, but {problem}")
        pytest.skip(problem)
    server = sim_api.start(tmp_path_factory.mktemp("sim-api"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def real_token(real_server) -> str:
    """One team's token for the session's tests (the server checks a token against every team's bcrypt hash, so
    each team more makes every request slower: the tests share one and tell their runs apart by id). Its stored
    hash is made again at bcrypt's lowest cost (:meth:`sim_api.SimApi.issue_token`): the same check, in
    milliseconds instead of about 0.2 s a request."""
    return real_server.issue_token("apcir-tests")


@pytest.fixture(scope="session")
def live_toml(small, tmp_path_factory) -> Path:
    """An experiment for ``apcir converse``: the small collection's index, the heuristic reformulator, the
    extractive responder and fixed weights (a live run cannot cross-validate)."""
    from apcir.contract.weights import LevelWeights, WeightsFile

    _, collection, index, _ = small
    folder = tmp_path_factory.mktemp("live-config")
    weights = WeightsFile(step=0.5, divisions=2, objective=["nDCG@3"],
                          levels={level: LevelWeights(weights=[0.5, 0.5, 0.0]) for level in "abc"})
    (folder / "weights.json").write_text(weights.model_dump_json(indent=1), encoding="utf-8")
    config = folder / "live.toml"
    config.write_text(
        f'name = "live"\n[retrieval]\nindex = "{index}"\ncollection = "{collection}"\nencoder = "splade-tiny"\n'
        f'[fusion]\nbaselines = false\n[fusion.weights]\nsource = "file"\nfile = "{folder / "weights.json"}"\n',
        encoding="utf-8")
    return config


class Proxy:
    """Forwards every request to ``target`` unchanged and logs it. A request in ``hold`` (a ``run/continue`` or
    ``debug/continue`` by its number, 1-based over both, or a route such as ``"run/start"``) is forwarded, and
    once the server has answered (recorded it), its reply is held back: ``held`` is set and the client never
    gets it (the test kills the client)."""

    def __init__(self, target: str):
        self.target = target.rstrip("/")
        self.requests: list[dict[str, Any]] = []
        self.hold: set[int | str] = set()
        self.held = threading.Event()
        self.release = threading.Event()
        self.continues = 0
        self.rewrite: Callable[[str, int, bytes], bytes] | None = None
        """Changes a reply's body (given its route, status and body) before the client gets it: a server that
        words a refusal otherwise."""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                route = self.path.split("?")[0]
                number = 0
                if route.endswith("/continue"):
                    owner.continues += 1
                    number = owner.continues
                request = urllib.request.Request(owner.target + self.path, data=body, method=method,
                                                 headers={k: v for k, v in self.headers.items()
                                                          if k.lower() in ("authorization", "content-type")})
                try:
                    with urllib.request.urlopen(request, timeout=120) as reply:
                        status, kind, payload = reply.status, reply.headers.get("Content-Type", ""), reply.read()
                except urllib.error.HTTPError as exc:
                    status, kind, payload = exc.code, exc.headers.get("Content-Type", ""), exc.read()
                owner.requests.append({"method": method, "route": route.removeprefix("/simulation/"),
                                       "body": json.loads(body) if body else None, "status": status})
                if owner.rewrite is not None:
                    payload = owner.rewrite(route.removeprefix("/simulation/"), status, payload)
                if number in owner.hold or route.removeprefix("/simulation/") in owner.hold:
                    owner.held.set()
                    owner.release.wait(120)
                    self.close_connection = True
                    return
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:  # noqa: N802
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/simulation/"

    def routes(self) -> list[str]:
        return [r["route"] for r in self.requests]

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def proxy(real_server):
    made = Proxy(f"http://127.0.0.1:{real_server.port}")
    yield made
    made.stop()
