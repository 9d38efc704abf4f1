from __future__ import annotations

import builtins
import os
import pathlib
import threading
from collections import Counter
from pathlib import Path

import file_order
import pytest
from shared import DemoRun, build_once, demo_run

# Tests never reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Output is judged as a pipe sees it (apcir.console: no wrapping), whatever terminal runs the suite: a COLUMNS
# exported by the caller (a CI runner's 80) would wrap the long tmp paths of pytest-xdist workers mid-word.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
# Two workers share two cores: each CPU-bound helper (llama.cpp's server, torch in a re-ranker) gets one thread.
# llama.cpp's threads spin while they wait for each other, so two of them beside a busy worker crawl (a
# reformulation: 211 s with 2 threads, 26 s with 1; apcir.llm.local_server.default_threads).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("APCIR_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # torch's default, here and in the commands the tests start


@pytest.fixture
def reads(monkeypatch):
    """How many times each file (by absolute path) is opened for reading, by ``Path.open`` (``read_bytes``,
    ``read_text``) or ``open``."""
    counted: Counter[Path] = Counter()
    path_open, plain_open = pathlib.Path.open, builtins.open

    def reading(mode: str) -> bool:
        return "r" in mode and "+" not in mode

    def counting_path_open(self, mode="r", *args, **kwargs):
        if reading(mode):
            counted[Path(self).absolute()] += 1
        return path_open(self, mode, *args, **kwargs)

    def counting_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and reading(mode):
            counted[Path(file).absolute()] += 1
        return plain_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", counting_path_open)
    monkeypatch.setattr(builtins, "open", counting_open)
    return lambda path: counted[Path(path).absolute()]


@pytest.fixture
def run_cli(capsys):
    """Run the apcir CLI in-process; returns (exit_code, stdout, stderr)."""
    from apcir.cli.main import main

    def _run(*args: str) -> tuple[int, str, str]:
        code = 0
        try:
            main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return _run


def _reads_the_demo(item: pytest.Item) -> bool:
    return "demo" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(session, config, items):
    """Files in the order ``make test``'s workers should take them (tests/file_order.py): those that do not read the
    demo run first, then those that do, each kind longest first; a file's tests keep their order."""
    seconds = file_order.read()
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    order = sorted(files, key=lambda name: (any(map(_reads_the_demo, files[name])), -seconds.get(name, 0.0)))
    items[:] = [item for name in order for item in files[name]]


@pytest.fixture(scope="session", autouse=True)
def _demo_started_early(request, tmp_path_factory):
    """Under pytest-xdist, when the run has a test that reads the demo, the demo run (about a minute on one core)
    starts in the background at each worker's first test: the worker that gets the build lock builds it while
    both workers go on with the files that do not need it (they come first), instead of one of them waiting
    for it. A build that fails here is left for the ``demo`` fixture, which builds again and reports it."""
    if os.environ.get("PYTEST_XDIST_WORKER") and any(map(_reads_the_demo, request.session.items)):

        def build() -> None:
            try:
                demo_run(tmp_path_factory)
            except Exception:  # noqa: BLE001 - reported by the fixture's own attempt
                pass

        threading.Thread(target=build, name="demo-in-the-background", daemon=True).start()


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> DemoRun:
    """The demo exactly as `make demo` runs it (the bundled config), run once per pytest run and shared by every
    worker (tests/shared.py): the demo tests and the documentation examples read the same run. Read-only: a test
    that writes into it works on ``demo.copy_into(tmp_path)``."""
    return demo_run(tmp_path_factory)


def _small_chosen() -> list[str]:
    from apcir import datasets

    qrels = datasets.qrels("ikat23-test-provenance")
    turns = datasets.topics("ikat23-test")
    conversations = sorted({t.conversation_id for t in turns if t.turn_id in qrels})[:4]
    return [t.turn_id for t in turns if t.conversation_id in conversations]


def _build_small(root) -> None:
    import json

    from apcir import datasets
    from apcir.retrieval.build import build_index

    qrels = datasets.qrels("ikat23-test-provenance")
    chosen = _small_chosen()
    judged = {p for t in chosen if t in qrels for p in qrels[t]}
    passages = list(datasets.iter_collection(datasets.collection_path("ikat23-provenance")))
    keep = [p for p in passages if p.id in judged] + [p for p in passages if p.id not in judged][:60]
    collection = root / "collection.jsonl"
    collection.write_text("".join(json.dumps({"id": p.id, "contents": p.contents}) + "\n" for p in keep))
    build_index(collection, "embedded", root / "index", "splade-tiny", progress=False)


@pytest.fixture(scope="session")
def small(tmp_path_factory):
    """Four judged conversations and a collection of their judged passages plus 60 others, indexed once per pytest
    run: ``(root, collection, index, chosen turn ids)``. The collection and the index are shared by the workers
    (read-only); ``root`` is this worker's own folder for what the tests write."""
    shared = build_once(tmp_path_factory, "small", _build_small)
    return tmp_path_factory.mktemp("pipeline"), shared / "collection.jsonl", shared / "index", _small_chosen()


# Modules that test against a real server installed by `make setup`/`make test`, and the variable under which
# (`.ci/run` sets each to 1) such a module must run: skipping it is then a failure.
REQUIRED = {"test_local_llm": "APCIR_REQUIRE_LOCAL_LLM", "test_front_doors_turns": "APCIR_REQUIRE_LOCAL_LLM",
            "test_retrieval_milvus_server": "APCIR_REQUIRE_MILVUS_SERVER"}


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Under APCIR_REQUIRE_LOCAL_LLM=1 / APCIR_REQUIRE_MILVUS_SERVER=1 (``.ci/run``), the real-server tests must run:
    a skipped module fails."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped:
        return
    name = Path(str(getattr(collector, "path", ""))).stem
    variable = REQUIRED.get(name)
    if variable is not None and os.environ.get(variable) == "1":
        report.outcome = "failed"
        report.longrepr = f"{variable}=1, but the {name} tests were skipped: {report.longrepr}"
