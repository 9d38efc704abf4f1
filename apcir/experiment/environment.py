"""What a run directory records about the machine and software that produced it (``environment.json``)."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from apcir._version import __version__
from apcir.experiment.config import ExperimentConfig
from apcir.io import read_json, write_json

PACKAGES = ("torch", "sentence-transformers", "transformers", "pyserini", "openai", "pytrec-eval-terrier", "numpy",
            "scipy", "numba")


def environment(config: ExperimentConfig) -> dict[str, Any]:
    """Versions of apcir, Python and the libraries that shape the numbers, plus the git commit."""
    packages: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                                cwd=Path(__file__).resolve().parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"apcir": __version__, "python": platform.python_version(), "platform": platform.platform(),
            "packages": packages, "git_commit": commit, "reformulator": config.reformulator.method,
            "encoder": config.retrieval.encoder, "backend": config.retrieval.backend}


def record_index(run_dir: Path, index_dir: Path) -> None:
    """Add the index's manifest (model, length budgets, collection hash, counts) to environment.json."""
    from apcir.retrieval.manifest import MANIFEST

    manifest = index_dir / MANIFEST
    info = read_json(manifest, "index manifest") if manifest.exists() else {"path": str(index_dir)}
    env_path = run_dir / "environment.json"
    write_json(env_path, read_json(env_path, "environment.json") | {"index": info})
