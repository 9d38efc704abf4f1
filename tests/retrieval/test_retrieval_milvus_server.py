"""The Milvus backends against a real Milvus server: the Milvus 2.3.5 standalone server the ``milvus`` package ships
(``make test`` installs it; :mod:`milvus_standalone` starts it on loopback ports of its own, once per module).

* a ``milvus-dense`` build, then ``apcir retrieve``, equals the embedded ``dense`` backend's run (same encoder,
  k = 100) up to float ties;
* a ``milvus`` (sparse) build is refused before any passage is encoded, in one line naming the server's version;
* a build made to fail after inserting leaves nothing ``retrieve`` serves, and its re-run finishes it;
* the same collection reached on another port (and host name) is found complete, from this machine's companion
  folder or, on a machine without one, from the server;
* no pymilvus traceback reaches the terminal in any of them (pymilvus's log goes to a file the error line names).

Without the ``milvus`` package the module skips, except under ``APCIR_REQUIRE_MILVUS_SERVER=1`` (``.ci/run`` sets
it), where the skip is a failure (tests/conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from milvus_standalone import VERSION, Forward, Standalone, installed
from same_run import assert_same_ranking

pytest.importorskip("pymilvus")
pytest.importorskip("sentence_transformers")
if not installed():
    pytest.skip(f"needs the Milvus standalone server: pip install milvus=={VERSION} (make test installs it)",
                allow_module_level=True)

from apcir import datasets
from apcir.contract.runs import load_run
from apcir.retrieval import build_index
from apcir.retrieval.location import parse_milvus
from apcir.retrieval.milvus.client import connect

pytestmark = pytest.mark.slow

K = 100
MODEL = "splade-tiny"
"""A real packaged model, mean-pooled as a dense encoder (128 dimensions): the cheapest one to encode with."""
COLLECTION = "ikat23-provenance"
PASSAGES = 894


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory):
    """apcir's cache for the module (the Milvus companion folders and pymilvus's log live under cache/milvus)."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("APCIR_CACHE_DIR", str(root / "llm"))
        patch.delenv("APCIR_MILVUS_TOKEN", raising=False)
        yield root


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    standalone = Standalone(tmp_path_factory.mktemp("milvus-server"))
    try:
        standalone.start()
    except Exception as exc:
        pytest.fail(f"the Milvus {VERSION} standalone server did not start: {exc}\n{standalone.log_tail()}")
    yield standalone
    standalone.stop()


@pytest.fixture(scope="module")
def dense(tmp_path_factory) -> Path:
    """The embedded ``dense`` backend's index of the demo collection."""
    out = tmp_path_factory.mktemp("dense") / "index"
    build_index(COLLECTION, "dense", out, MODEL, progress=False)
    return out


@pytest.fixture(scope="module")
def queries(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("queries") / "q.tsv"
    turns = [t for t in datasets.topics("ikat23-test") if t.manual_rewrite]
    path.write_text("".join(f"{t.turn_id}\t{t.manual_rewrite}\n" for t in turns))
    return path


def assert_terminal_clean(text: str) -> None:
    """Nothing of pymilvus's own logging: no traceback, no RPC error record."""
    assert "Traceback" not in text and "RPC error" not in text and "[ERROR]" not in text, text


@pytest.fixture
def cli(capfd):
    """Run the apcir CLI in-process; (exit code, stdout, stderr) as the terminal got them (file descriptors, so
    whatever grpc or pymilvus writes there is seen), checked to hold no pymilvus traceback."""
    from apcir.cli.main import main

    def run(*args: object) -> tuple[int, str, str]:
        capfd.readouterr()
        code = 0
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capfd.readouterr()
        assert_terminal_clean(out + err)
        return code, out, err

    return run


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def rows(uri: str) -> int:
    location = parse_milvus(uri)
    client = connect(location)
    try:
        client.load_collection(location.collection)
        return int(client.query(location.collection, filter="", output_fields=["count(*)"])[0]["count(*)"])
    finally:
        client.close()


def has_collection(uri: str) -> bool:
    location = parse_milvus(uri)
    client = connect(location)
    try:
        return bool(client.has_collection(location.collection))
    finally:
        client.close()


def test_a_milvus_dense_build_then_retrieve_equals_the_dense_backend(server, dense, queries, cli, tmp_path):
    uri = server.uri("dense_cli")
    code, out, err = cli("index", "build", "--backend", "milvus-dense", "-c", COLLECTION, "-e", MODEL,
                         "--vectors-from", dense, "--out", uri)
    assert code == 0, err
    assert "built milvus-dense index" in out
    runs = {}
    for name, index in (("milvus", uri), ("dense", dense)):
        run = tmp_path / f"{name}.run"
        code, _, err = cli("retrieve", "--index", index, "--queries", queries, "--k", K, "--out", run)
        assert code == 0, err
        runs[name] = load_run(run)
    assert len(runs["dense"]) == len(queries.read_text().splitlines())
    assert all(len(hits) == K for hits in runs["dense"].values())
    top = max(abs(s) for hits in runs["dense"].values() for s in hits.values())
    differ, largest = assert_same_ranking(runs["milvus"], runs["dense"], tolerance=1e-6 * top)
    # measured: 3 of 331 turns ordered differently (tied scores), the largest score difference 6.1e-5 at scores up
    # to 105 (float32 sums in another order)
    assert differ <= 30 and largest <= 1e-6 * top, (differ, largest)


def test_a_sparse_build_is_refused_before_any_passage_is_encoded(server, cli, cache, monkeypatch):
    import apcir.retrieval.build as build

    def never(*args, **kwargs):
        raise AssertionError("the build went on to encode")

    monkeypatch.setattr(build, "encode_shard", never)
    monkeypatch.setattr(build, "make_encoder", never)  # not even the model is loaded
    uri = server.uri("sparse_c")
    code, out, err = cli("index", "build", "--backend", "milvus", "-c", COLLECTION, "-e", "splade-tiny",
                         "--out", uri)
    assert code == 2, err
    line = one_line(err)
    assert f"is v{VERSION}-lite" in line and "needs Milvus 2.4 or later" in line and "SPARSE_FLOAT_VECTOR" in line
    assert not has_collection(uri)  # nothing created either
    assert not list((cache / "milvus").glob("sparse_c*"))


def test_a_server_lacking_what_its_version_promises_is_refused_and_left_clean(server, cli, monkeypatch):
    """Past the version check (as for a server whose version string apcir cannot read), the collection is created
    and read back: Milvus 2.3.5 creates a collection with a sparse field but no index on it, and is refused."""
    import apcir.retrieval.build as build
    import apcir.retrieval.milvus.collection as collection

    monkeypatch.setattr(collection, "version_number", lambda version: None)
    monkeypatch.setattr(build, "encode_shard", lambda *args, **kwargs: pytest.fail("the build went on to encode"))
    uri = server.uri("sparse_probe")
    code, _, err = cli("index", "build", "--backend", "milvus", "-c", COLLECTION, "-e", "splade-tiny", "--out", uri)
    line = one_line(err)
    assert code == 2 and f"(v{VERSION}-lite) did not create the SPARSE_INVERTED_INDEX index" in line
    assert "needs Milvus 2.4 or later" in line and "(pymilvus's log: " in line
    assert not has_collection(uri)  # the empty collection it made is dropped


FAULT = """
import sys

from pymilvus import MilvusClient

alter, drop = MilvusClient.alter_collection_properties, MilvusClient.drop_collection_properties


def refused(self, collection_name, properties, **kwargs):
    # the server refuses to record the manifest, for real: Milvus 2.3 cannot delete a collection property, and
    # answers this call (what apcir's publish did before) with an error that pymilvus logs with a traceback
    if "apcir.manifest" in properties:
        return drop(self, collection_name, property_keys=list(properties), **kwargs)
    return alter(self, collection_name, properties, **kwargs)


MilvusClient.alter_collection_properties = refused
from apcir.cli.main import main

main(sys.argv[1:])
"""


def test_a_build_that_fails_after_inserting_leaves_nothing_retrieve_serves(server, dense, queries, cli, cache,
                                                                            tmp_path):
    uri = server.uri("dense_fail")
    build = ["index", "build", "--backend", "milvus-dense", "-c", COLLECTION, "-e", MODEL, "--vectors-from",
             str(dense), "--chunk-size", "300", "--out", uri]
    # in a process of its own: the terminal is its real stdout and stderr
    failed = subprocess.run([sys.executable, "-c", FAULT, *build], capture_output=True, text=True, timeout=600)
    assert failed.returncode == 2, failed.stderr
    assert_terminal_clean(failed.stdout + failed.stderr)
    line = one_line(failed.stderr)
    log = cache / "milvus" / "pymilvus.log"
    assert "recording the manifest failed" in line and f"(pymilvus's log: {log})" in line
    assert "Traceback" in log.read_text()  # pymilvus's full text, in the file the line names
    assert rows(uri) == PASSAGES  # it failed after inserting every passage

    folders = list((cache / "milvus").glob("dense_fail-*"))
    assert len(folders) == 1 and not (folders[0] / "manifest.json").exists()  # unfinished here, as in the server
    for command in (("retrieve", "--index", uri, "--queries", queries, "--k", K, "--out", tmp_path / "x.run"),
                    ("index", "info", uri)):
        code, _, err = cli(*command)
        assert code == 2 and "holds an unfinished apcir build, which is never searched" in one_line(err)
    assert not (tmp_path / "x.run").exists()
    # nor when the collection holds a manifest but no mark of completion (what apcir's publish left on Milvus 2.3
    # before: the manifest set, then removing the mark of a running build refused)
    manifest = json.loads((dense / "manifest.json").read_text()) | {"backend": "milvus-dense", "location": uri}
    location = parse_milvus(uri)
    client = connect(location)
    client.alter_collection_properties(location.collection, properties={"apcir.manifest": json.dumps(manifest)})
    client.close()
    code, _, err = cli("index", "info", uri)
    assert code == 2 and "holds an unfinished apcir build" in one_line(err)

    code, out, err = cli(*build, "--json")  # the same build again, without the fault: it finishes
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "built" and result["passages_encoded"] == 0
    assert rows(uri) == PASSAGES and (folders[0] / "manifest.json").exists()
    code, _, err = cli("retrieve", "--index", uri, "--queries", queries, "--k", "10", "--out", tmp_path / "ok.run")
    assert code == 0, err


@pytest.fixture(scope="module")
def shared(server, dense) -> str:
    """A complete milvus-dense index, built through the server's own port."""
    uri = server.uri("dense_shared")
    build_index(COLLECTION, "milvus-dense", uri, MODEL, progress=False, vectors_from=dense)
    return uri


def test_the_same_collection_reached_on_another_port_is_found_complete(server, shared, queries, cli, cache,
                                                                        tmp_path, monkeypatch):
    folders = list((cache / "milvus").glob("dense_shared-*"))
    assert len(folders) == 1 and (folders[0] / "manifest.json").exists()
    direct = tmp_path / "direct.run"
    code, _, err = cli("retrieve", "--index", shared, "--queries", queries, "--k", K, "--out", direct)
    assert code == 0, err

    with Forward(server.port) as forward:
        other = server.uri("dense_shared", host="localhost", port=forward.port)
        code, out, err = cli("index", "info", other, "--json")
        assert code == 0, err
        assert json.loads(out)["passages"] == PASSAGES
        assert list((cache / "milvus").glob("dense_shared-*")) == folders  # the same companion folder
        code, out, err = cli("index", "build", "--backend", "milvus-dense", "-c", COLLECTION, "-e", MODEL,
                             "--out", other, "--json")
        assert code == 0 and json.loads(out)["status"] == "up-to-date", err

        # another machine: no companion folder at all; the server's manifest restores it
        elsewhere = tmp_path / "elsewhere"
        monkeypatch.setenv("APCIR_CACHE_DIR", str(elsewhere / "llm"))
        forwarded = tmp_path / "forwarded.run"
        code, _, err = cli("retrieve", "--index", other, "--queries", queries, "--k", K, "--out", forwarded)
        assert code == 0, err
        assert (elsewhere / "milvus" / folders[0].name / "manifest.json").exists()
        assert forward.connections > 0  # it went through the other port
    assert load_run(forwarded) == load_run(direct)
