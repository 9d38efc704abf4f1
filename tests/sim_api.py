"""The TREC iKAT organisers' simulation server (Sim.API) as a test counterpart: where its snapshot is, the Python
environment it runs in, and starting it on a free loopback port.

The snapshot is not part of apcir (its code is MIT, kept unchanged in the shared folder beside the clones): the tests
reach it through ``shared/vendor/`` (``sim_api_launch.py`` and ``user-simulation-api/``), found as

1. ``$APCIR_SHARED/vendor`` when ``APCIR_SHARED`` is set (then nothing else is tried);
2. ``<repository>/../shared/vendor``;
3. for a git worktree, ``<main checkout>/../shared/vendor``;
4. for a clone of a checkout on this machine (``origin`` a local folder), ``<origin>/../shared/vendor``.

The server runs in its own environment, ``.venv-simapi`` at the repository root, never in apcir's: a virtual
environment with the versions its ``pyproject.toml`` pins (read from the snapshot, so a new snapshot brings its
own pins). Its model stack (torch, transformers, sentence-transformers, accelerate, bitsandbytes,
huggingface-hub) is not installed: its modules import torch, transformers and sentence_transformers when they
load, but the ``dummy`` task never calls them, so the server gets import stand-ins for those three
(``tests/sim_api_standins/``, put on the server's path only) that fail loudly if anything uses them.

``make test`` builds the environment (``python tests/sim_api.py setup``, a no-op when it is up to date).
Under ``APCIR_REQUIRE_SIM_API=1`` (``.ci/run``) a missing snapshot fails the setup, and a real-server test that
would skip fails instead.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-simapi"
STANDINS = Path(__file__).resolve().parent / "sim_api_standins"
LAUNCHER = "sim_api_launch.py"
SNAPSHOT = "user-simulation-api"
REQUIRE = "APCIR_REQUIRE_SIM_API"
MODEL_STACK = {"torch", "transformers", "sentence-transformers", "accelerate", "bitsandbytes", "huggingface-hub"}
"""Its dependencies that only the model-backed users (trec-ikat25: Gemma on a GPU) call: not installed."""
STAMP = ".apcir-simapi-installed"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _candidates() -> list[Path]:
    shared = os.environ.get("APCIR_SHARED")
    if shared:
        return [Path(shared) / "vendor"]
    found = [ROOT.parent / "shared" / "vendor"]
    common = _git("rev-parse", "--path-format=absolute", "--git-common-dir")
    if common:  # a worktree's common git dir is the main checkout's .git
        found.append(Path(common).resolve().parent.parent / "shared" / "vendor")
    origin = _git("remote", "get-url", "origin")
    if origin and Path(origin).is_dir():  # a clone of a checkout on this machine: beside that checkout
        found.append(Path(origin).resolve().parent / "shared" / "vendor")
    return list(dict.fromkeys(found))


def vendor_dir() -> Path | None:
    """The folder holding ``sim_api_launch.py`` and the snapshot, or None."""
    for folder in _candidates():
        if (folder / LAUNCHER).is_file() and (folder / SNAPSHOT / "pyproject.toml").is_file():
            return folder
    return None


def where_looked() -> str:
    return ", ".join(str(p) for p in _candidates())


_DEP = re.compile(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(?:\((.*)\))?\s*$")


def requirements(vendor: Path) -> list[str]:
    """The snapshot's pinned dependencies (poetry's ``name[extra] (spec)`` as pip's ``name[extra]spec``), less
    its model stack."""
    project = tomllib.loads((vendor / SNAPSHOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = []
    for dependency in project["dependencies"]:
        match = _DEP.match(dependency)
        if match is None:
            raise SystemExit(f"cannot read the dependency {dependency!r} of {vendor / SNAPSHOT / 'pyproject.toml'}")
        name, extras, spec = match.group(1), match.group(2) or "", (match.group(3) or "").replace(" ", "")
        if name.lower() in MODEL_STACK:
            continue
        wanted.append(f"{name}{extras}{spec}")
    return wanted


def locked(vendor: Path) -> list[str]:
    """Every package of the snapshot's ``poetry.lock`` at its locked version, as pip constraints (they bind only
    the packages that get installed: the server's dependencies resolve to what its authors ran)."""
    lock = vendor / SNAPSHOT / "poetry.lock"
    if not lock.is_file():
        return []
    packages = tomllib.loads(lock.read_text(encoding="utf-8")).get("package", [])
    return sorted(f"{p['name']}=={p['version']}" for p in packages if p["name"].lower() not in MODEL_STACK)


def python_of(venv: Path = VENV) -> Path:
    return venv / "bin" / "python"


def setup(venv: Path, python: str) -> int:
    """Build (or keep) the server's environment; returns an exit status."""
    vendor = vendor_dir()
    if vendor is None:
        message = (f"the organisers' simulation server was not found (looked in {where_looked()}; set APCIR_SHARED "
                   "to the folder holding vendor/)")
        if os.environ.get(REQUIRE) == "1":
            print(f"error: {message}, and {REQUIRE}=1", file=sys.stderr)
            return 1
        print(f"note: {message}; its tests will skip", file=sys.stderr)
        return 0
    wanted = requirements(vendor)
    pins = locked(vendor)
    stamp = venv / STAMP
    if stamp.is_file() and json.loads(stamp.read_text(encoding="utf-8")) == wanted + pins and python_of(venv).exists():
        return 0
    print(f"building the organisers' server's environment in {venv} ({python}; {len(wanted)} pinned packages, "
          "without its model stack)", file=sys.stderr)
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    constraints = venv / "poetry-lock-constraints.txt"
    constraints.write_text("".join(f"{pin}\n" for pin in pins), encoding="utf-8")
    subprocess.run([str(python_of(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "-c", str(constraints), *wanted], check=True)
    stamp.write_text(json.dumps(wanted + pins), encoding="utf-8")
    return 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


TEST_BCRYPT_ROUNDS = 4
"""bcrypt's lowest cost, for the tests' team tokens (:meth:`SimApi.issue_token`)."""
REHASH = ("import base64, sqlite3, sys\n"
          "from passlib.hash import bcrypt\n"
          "db, team, token, rounds = sys.argv[1:]\n"
          "hashed = bcrypt.using(rounds=int(rounds)).hash(base64.b64decode(token).decode())\n"
          "with sqlite3.connect(db) as connection:\n"
          "    changed = connection.execute('UPDATE teams SET token = ? WHERE id = ?', (hashed, team)).rowcount\n"
          "sys.exit(0 if changed == 1 else f'team {team!r} not found in {db}')\n")
"""Run by the server's interpreter: the team's stored hash, made again from its token at the given cost."""


@dataclass
class SimApi:
    """One running server: its base URL (what ``apcir converse --api`` takes) and its admin."""

    process: subprocess.Popen[bytes]
    port: int
    workdir: Path
    password: str
    log: Path
    python: Path
    """The server's environment's interpreter (passlib is there)."""

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}/simulation/"

    @property
    def url(self) -> str:
        return self.root

    def issue_token(self, team: str, *, bcrypt_rounds: int | None = TEST_BCRYPT_ROUNDS) -> str:
        """A new team's token, through ``auth/issue-token`` (HTTP basic auth as the admin).

        The server stores the token's bcrypt hash at passlib's default cost (12 rounds) and checks every request's
        token against every team's hash, about 0.2 s of CPU a team and request here. With ``bcrypt_rounds``, the
        stored hash of this same token is then made again at that cost in the server's database (the same scheme;
        the server's check reads the cost from the hash), so a request's check takes milliseconds; None keeps the
        server's own hash."""
        basic = base64.b64encode(f"admin:{self.password}".encode()).decode()
        request = urllib.request.Request(f"{self.root}auth/issue-token?name={team}",
                                         headers={"Authorization": f"Basic {basic}"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            token = str(json.loads(reply.read())["token"])
        if bcrypt_rounds is not None:
            subprocess.run([str(self.python), "-c", REHASH, str(self.workdir / "database" / "dummy.db"), team, token,
                            str(bcrypt_rounds)], check=True, capture_output=True, timeout=60)
        return token

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(workdir: Path, *, venv: Path = VENV, tries: int = 3, seconds: float = 90.0) -> SimApi:
    """Start the server (its ``dummy`` task) on a free port of 127.0.0.1 and wait until it answers."""
    vendor = vendor_dir()
    if vendor is None:
        raise RuntimeError(f"the organisers' simulation server was not found (looked in {where_looked()})")
    python = python_of(venv)
    if not python.exists():
        raise RuntimeError(f"its environment {venv} is not built: make simapi (make test builds it)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONPATH"] = str(STANDINS)  # torch, transformers, sentence_transformers: stand-ins, on its path only
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing written into tests/ (the stand-ins) or the snapshot's copy
    password = base64.b64encode(os.urandom(12)).decode()
    last = ""
    for attempt in range(tries):
        port = free_port()
        folder = workdir / f"server-{attempt}"
        folder.parent.mkdir(parents=True, exist_ok=True)
        log = workdir / f"server-{attempt}.log"
        with log.open("wb") as out:
            process = subprocess.Popen([str(python), str(vendor / LAUNCHER), "--workdir", str(folder), "--port",
                                        str(port), "--admin-password", password, "--shared-task", "dummy"],
                                       stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir)
        server = SimApi(process, port, folder, password, log, python)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with urllib.request.urlopen(f"{server.root}openapi.json", timeout=5):
                    return server
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        server.stop()
        last = log.read_text(encoding="utf-8", errors="replace")[-3000:]
    raise RuntimeError(f"the organisers' server did not start ({tries} tries); its log ends:\n{last}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("setup", help="build the server's environment (a no-op when up to date)")
    build.add_argument("--venv", type=Path, default=VENV)
    build.add_argument("--python", default=sys.executable, help="the interpreter of the environment")
    sub.add_parser("where", help="print the vendor folder found (or nothing, exit 1)")
    args = parser.parse_args(argv)
    if args.command == "where":
        found = vendor_dir()
        print(found if found is not None else f"not found (looked in {where_looked()})")
        return 0 if found is not None else 1
    return setup(args.venv, args.python)


if __name__ == "__main__":
    sys.exit(main())
