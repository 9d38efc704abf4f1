"""What the tests share across pytest-xdist workers: built once per ``pytest`` run, under a lock, then read-only.

``make test`` runs the suite on two workers (``-n 2 --dist loadfile``). A session fixture runs once per *worker*,
so something expensive that several modules need (the demo run, a built index) is built through
:func:`build_once`: the first worker to ask builds it in a folder all workers of this run share, while any other
worker that asks waits on the lock, then both use the same folder. Without xdist it is the same, in one process.

What is shared is never modified by a test: a test that changes it (re-runs a stage, writes into it) works on a
copy (:meth:`DemoRun.copy_into`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

DEMO_INDEX = Path("indexes") / "ikat23-provenance-splade-tiny"
"""Where `apcir run demo` puts its index, relative to where it is run (the bundled config's ``retrieval.index``)."""
DEMO_RUN = Path("runs") / "demo"
"""Where `apcir run demo` writes its run directory, relative to where it is run."""


CHECKOUT_SKIPS = {".git", ".venv", ".venv-simapi", ".pytest_cache", ".mypy_cache", ".ruff_cache", "__pycache__"}
"""What a checkout holds that is not its content: version control, the environments, tools' caches."""


def checkout_files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file of the checkout at ``root`` (its tools' folders left out) as relative path -> (size, modification
    time in ns): taken before and after a test that must not write into the checkout, whatever was there before it
    (``make demo``'s run and index, a user's own files)."""
    found: dict[str, tuple[int, int]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in CHECKOUT_SKIPS and not d.endswith(".egg-info")]
        for name in files:
            path = Path(folder) / name
            try:
                stat = path.stat()
            except FileNotFoundError:  # gone meanwhile
                continue
            found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


def written_into(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    """The files that appeared or changed between two :func:`checkout_files` (removed ones too)."""
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder all workers of this ``pytest`` run share, and no other run: under xdist the parent of the workers'
    base temporary folders (``pytest-N/``, each worker has ``pytest-N/popen-gwK/``), else the base folder itself."""
    base = tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    root = base.parent if worker and base.name.endswith(worker) else base
    shared = root / "shared"
    shared.mkdir(exist_ok=True)
    return shared


def build_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """``build(folder)`` once per pytest run, whichever worker asks first; every caller gets the built folder.

    The folder counts as built when ``build`` returned: a build that raised (or a worker killed while building)
    leaves no mark, and the next caller builds again, from an empty folder.
    """
    root = session_root(tmp_path_factory)
    folder = root / name
    done = root / f"{name}.built"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


@dataclass(frozen=True)
class DemoRun:
    """The demo as `make demo` runs it: ``apcir run demo`` (the bundled config), run in :attr:`root`, so
    ``root/runs/demo`` and ``root/indexes/ikat23-provenance-splade-tiny``. :attr:`log` is what that first, fresh
    run printed."""

    root: Path
    log: str

    @property
    def run_dir(self) -> Path:
        return self.root / DEMO_RUN

    @property
    def index(self) -> Path:
        return self.root / DEMO_INDEX

    def config(self, root: Path | None = None) -> Any:
        """The bundled demo config, with its index and run directory under ``root`` (default: the shared one)."""
        from apcir.experiment.config import load_config, resolve_config_path

        where = root or self.root
        config = load_config(resolve_config_path("demo"))
        retrieval = config.retrieval.model_copy(update={"index": str(where / DEMO_INDEX)})
        return config.model_copy(update={"output_dir": str(where / DEMO_RUN), "retrieval": retrieval})

    def metrics(self) -> Any:
        """The run's ``metrics.json`` (:class:`apcir.evaluation.results.RunMetrics`)."""
        from apcir.evaluation.results import read_metrics

        return read_metrics(self.run_dir)

    def copy_into(self, where: Path) -> Path:
        """Copy the run directory and the index to ``where/runs/demo`` and ``where/indexes/...``, as they are
        (modification times too), so `apcir run demo` run in ``where`` finds every stage done. Returns ``where``."""
        for part in (DEMO_RUN, DEMO_INDEX):
            (where / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(self.root / part, where / part, symlinks=True)
        return where


def clean_env(cache: Path) -> dict[str, str]:
    """The environment a user's shell would give apcir here: no OpenAI key or server, an LLM cache of its own,
    offline, this virtual environment's scripts first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "APCIR_CACHE_DIR")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["APCIR_CACHE_DIR"] = str(cache)
    env["HF_HUB_OFFLINE"] = env["TRANSFORMERS_OFFLINE"] = "1"
    env["COLUMNS"] = "200"
    return env


def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The demo, run once per pytest run with `apcir run demo` (by whichever worker asks first), shared read-only."""

    def build(root: Path) -> None:
        done = subprocess.run([str(Path(sys.executable).parent / "apcir"), "run", "demo", "--no-progress"], cwd=root,
                              env=clean_env(root / ".cache" / "llm"), capture_output=True, text=True, timeout=3600)
        (root / "first-run.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            raise RuntimeError(f"`apcir run demo` failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")

    root = build_once(tmp_path_factory, "demo", build)
    return DemoRun(root, (root / "first-run.log").read_text())


def cli_code(*args: str) -> int:
    """The apcir command, in-process (output left to pytest's capture); its exit code."""
    from apcir.cli.main import main

    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def reference_pages() -> tuple[str, str]:
    """The configuration and command-line reference pages as docs/gen_reference.py generates them now (with the
    plugins the registries hold at the call)."""
    docs = str(Path(__file__).resolve().parents[1] / "docs")
    sys.path.insert(0, docs)
    try:
        import gen_reference
    finally:
        sys.path.remove(docs)
    return gen_reference.config_reference(), gen_reference.cli_reference()


def cli_section(cli_page: str, command: str) -> str:
    """The section of the command-line reference of ``command`` (``apcir rerank``)."""
    return cli_page.split(f"## `{command}`", 1)[1].split("\n## ", 1)[0]
