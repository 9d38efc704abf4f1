"""A pre-imported ``apcir`` for the documentation's examples: each command still runs in a process of its own, forked
from one that has already imported apcir, PyTorch and sentence-transformers.

The pages' examples start about 90 ``apcir`` commands. Each one used to pay its imports again: about 5 s of CPU for
a command that loads a model (PyTorch, transformers and sentence-transformers), about 0.6 s for any other, some
180 s of the suite's CPU on a 2-core machine. Here a group's sandbox puts a small ``apcir`` script first on ``PATH``
(:func:`write_shim`). It hands its arguments, working directory, environment and its standard input, output and
error (the file descriptors themselves) over a Unix socket to the group's :class:`Zygote`, a process that imported
those modules once, in the same environment, and waits. For each command it forks:

* a waiter, which forks the command's process, tells the script its pid, waits for it and tells the script how it
  ended;
* the command's process: the working directory, environment and file descriptors the script had, ``sys.argv``
  with the real ``apcir`` script's path first, the signal dispositions a new Python process has, then
  ``apcir.cli.main`` as the console script calls it. It leaves through ``SystemExit``: Python finalises as at the end
  of any process (non-daemon threads joined, ``atexit`` handlers run, streams flushed).

The script exits with the command's exit status (killed by a signal: it kills itself with that signal) and passes
SIGTERM, SIGINT and SIGHUP on to the command (a page's ``kill %1`` of a server it started with ``&``). What differs
from a fresh process: the modules preloaded here are imported before the command's own code runs, not when it asks
for them. The rest of the suite starts ``apcir`` as a fresh process (the shared demo run, the kill and reproducibility
tests, the live tests), and tests/docs/test_zygote.py checks the hand-over itself.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PRELOAD = (
    "typer",
    "rich.console",
    "apcir.cli",
    "apcir.cli.lazy",
    "apcir.console",
    "apcir.errors",
    "torch",
    "transformers",
    "sentence_transformers",
    "apcir.retrieval.encoder",
    "apcir.retrieval.splade_head",
    "apcir.retrieval.dense",
    "scipy.stats",
)
"""What a command would otherwise import itself, imported once. Not ``apcir.cli.main``: importing that submodule
rebinds ``apcir.cli.main``, the console script's entry point, to the module (as in any process after its start)."""


_SHIM = '''#!{python} -S
# apcir, handed to the documentation tests' pre-imported process (tests/docs/zygote.py)
import json, os, signal, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect({socket!r})
request = json.dumps({{"argv": [{apcir!r}, *sys.argv[1:]], "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
socket.send_fds(s, [len(request).to_bytes(8, "big") + request], [0, 1, 2])
replies = s.makefile("r")
pid = int(replies.readline().split()[1])
for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(number, lambda n, _: os.kill(pid, n))
line = replies.readline()
code = int(line.split()[1]) if line.startswith("exit ") else 1
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
'''


def write_shim(folder: Path, sock: Path, apcir: Path) -> Path:
    """An executable ``apcir`` in ``folder`` that runs its command in the zygote listening on ``sock``."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "apcir"
    shim.write_text(_SHIM.format(python=sys.executable, socket=str(sock), apcir=str(apcir)))
    shim.chmod(0o755)
    return shim


class Zygote:
    """The pre-imported process of one sandbox: ``with Zygote(folder, env) as z: env["PATH"] = ...``."""

    def __init__(self, folder: Path, env: dict[str, str], cwd: Path) -> None:
        self.folder, self.env, self.cwd = folder, env, cwd
        self.socket = folder / "apcir.sock"
        self.apcir = Path(sys.executable).parent / "apcir"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Zygote:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = (self.folder / "zygote.log").open("wb")
        self.process = subprocess.Popen([sys.executable, __file__, str(self.socket)], cwd=self.cwd, env=self.env,
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while not (self.folder / "apcir.ready").exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the docs' apcir zygote did not start:\n{(self.folder / 'zygote.log').read_text()}")
            time.sleep(0.05)
        write_shim(self.folder / "bin", self.socket, self.apcir)
        return self

    @property
    def path(self) -> str:
        """``PATH`` with the handing-over ``apcir`` first."""
        return f"{self.folder / 'bin'}{os.pathsep}{self.env.get('PATH', '')}"

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=60)


# ---- the zygote process ---------------------------------------------------------------------------------------------
def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    size = int.from_bytes(data[:8], "big")
    body = data[8:]
    while len(body) < size:
        more = connection.recv(size - len(body))
        if not more:
            raise EOFError("the apcir script hung up")
        body += more
    return json.loads(body), fds


def _command(request: dict, fds: list[int], listener: socket.socket, connection: socket.socket) -> None:
    """In the command's process: become the process the script would have started, run apcir, exit as it exits."""
    listener.close()
    connection.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as at any Python process's start
    sys.argv = list(request["argv"])
    sys.path[0] = str(Path(sys.argv[0]).parent)  # a script's folder, as for the console script (not this file's)
    from apcir.cli import main  # the console script's entry point, resolved as the script resolves it

    assert callable(main), "apcir.cli.main was imported before the command ran"
    main(sys.argv[1:])  # as the console script does: sys.exit(main())
    raise SystemExit(0)


def serve(sock: Path) -> None:
    for name in PRELOAD:
        __import__(name)
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()  # the preloaded objects leave the collector's generations: a command's collections do not walk
    # (and so copy) the whole inherited heap; without this a command that loads no model took 1.3 s longer here
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters are reaped by the kernel
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock))
    listener.listen(16)
    (sock.parent / "apcir.ready").touch()
    while True:
        connection, _ = listener.accept()
        try:
            request, fds = _receive(connection)
        except (OSError, EOFError, ValueError):
            connection.close()
            continue
        if os.fork() == 0:  # the waiter
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            child = os.fork()
            if child == 0:
                _command(request, fds, listener, connection)  # never returns: SystemExit ends the process
            for fd in fds:
                os.close(fd)
            try:
                connection.sendall(f"pid {child}\n".encode())
                _, status = os.waitpid(child, 0)
                connection.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        connection.close()


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
