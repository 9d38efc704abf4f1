"""``dtype`` for every local model: resolution, settings, the index manifest, the plan of a sharded build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apcir import datasets
from apcir.errors import ApcirError
from apcir.retrieval import build_index, open_index
from apcir.retrieval.encoder import SpladeEncoder
from apcir.retrieval.precision import check_dtype, gpu_supports_bfloat16, resolve_dtype, stored_dtype, torch_dtype
from apcir.retrieval.settings import RetrievalSettings

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")


def test_auto_is_float32_on_the_cpu_and_a_named_precision_is_kept():
    assert resolve_dtype("auto", "cpu") == "float32"
    assert resolve_dtype(None, "cpu") == "float32"
    assert not gpu_supports_bfloat16("cpu")
    for name in ("float32", "bfloat16", "float16"):
        assert resolve_dtype(name, "cpu") == name
        assert torch_dtype(name) == getattr(torch, name)
    assert stored_dtype(None) == "float32" and stored_dtype("bfloat16") == "bfloat16"


def test_auto_on_a_gpu_follows_its_compute_capability(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (9, 0))
    assert resolve_dtype("auto", "cuda") == "bfloat16" and resolve_dtype("auto", "cuda:1") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (7, 0))  # V100: no native bfloat16
    assert resolve_dtype("auto", "cuda") == "float32"
    assert resolve_dtype("float16", "cuda") == "float16"


@pytest.mark.parametrize("bad", ["fp16", "half", "float64", ""])
def test_an_unknown_precision_is_one_line(bad):
    with pytest.raises(ApcirError, match="not a precision apcir knows: expected auto, float32, bfloat16, float16"):
        check_dtype(bad)


def test_settings_take_a_precision_and_refuse_others():
    from apcir.reranking.settings import RerankSettings

    assert RetrievalSettings().dtype == "auto"
    assert RetrievalSettings(dtype="bfloat16").dtype == "bfloat16"
    with pytest.raises(ValueError, match="dtype"):
        RetrievalSettings(dtype="fp8")
    assert RerankSettings(reranker="monot5", dtype="float16").dtype == "float16"
    assert RerankSettings(reranker="cross-encoder", dtype="bfloat16").dtype == "bfloat16"
    with pytest.raises(ValueError, match="dtype"):
        RerankSettings(reranker="rankgpt", dtype="bfloat16")  # an LLM behind a server: not apcir's to set


def test_a_config_sets_the_precision_of_retrieval_and_rerankers():
    from apcir.experiment.config import validate_config

    config = validate_config({"name": "x", "evaluation": {"qrels": "ikat23-test-provenance"},
                              "retrieval": {"dtype": "bfloat16"},
                              "rerank": {"reranker": "cross-encoder", "dtype": "float32"}})
    assert config.retrieval.dtype == "bfloat16" and config.rerank[0].dtype == "float32"
    with pytest.raises(ApcirError, match="retrieval.dtype"):
        validate_config({"name": "x", "evaluation": {"qrels": "ikat23-test-provenance"},
                         "retrieval": {"dtype": "double"}})


@pytest.fixture(scope="module")
def encoder() -> SpladeEncoder:
    return SpladeEncoder("splade-tiny", device="cpu")


@pytest.fixture
def small_collection(tmp_path) -> Path:
    passages = list(datasets.iter_collection(datasets.collection_path("ikat23-provenance")))[:9]
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps({"id": p.id, "contents": p.contents}) + "\n" for p in passages))
    return path


def test_the_manifest_records_the_precision_and_a_differing_query_encoder_is_reported(
        tmp_path, small_collection, encoder, capsys):
    out = tmp_path / "idx"
    built = build_index(small_collection, "embedded", out, encoder=encoder, progress=False)
    assert built.manifest is not None and built.manifest.dtype == "float32"
    assert json.loads((out / "manifest.json").read_text())["dtype"] == "float32"
    capsys.readouterr()
    open_index(out, encoder)
    assert "encoded in" not in capsys.readouterr().err
    half = SpladeEncoder("splade-tiny", device="cpu", dtype="bfloat16")
    open_index(out, half)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1
    assert "passages were encoded in float32 and the queries are encoded in bfloat16" in lines[0]
    assert "--dtype float32" in lines[0]


def test_an_index_from_before_precision_was_recorded_counts_as_float32(tmp_path, small_collection, encoder, capsys):
    out = tmp_path / "idx"
    build_index(small_collection, "embedded", out, encoder=encoder, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["dtype"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    open_index(out, encoder)
    assert "encoded in" not in capsys.readouterr().err
    again = build_index(small_collection, "embedded", out, encoder="splade-tiny", dtype="float32", progress=False)
    assert again.status == "up-to-date"


def test_a_named_precision_other_than_the_index_is_refused_and_auto_keeps_it(tmp_path, small_collection, encoder):
    out = tmp_path / "idx"
    build_index(small_collection, "embedded", out, encoder=encoder, progress=False)
    with pytest.raises(ApcirError, match="encoded in float32, not bfloat16; pass --overwrite"):
        build_index(small_collection, "embedded", out, encoder="splade-tiny", dtype="bfloat16", progress=False)
    assert build_index(small_collection, "embedded", out, encoder="splade-tiny", progress=False).status == "up-to-date"


def test_shards_share_the_plan_precision(tmp_path, small_collection):
    out = tmp_path / "idx"
    first = build_index(small_collection, "embedded", out, encoder="splade-tiny", shard="0/2", dtype="bfloat16",
                        device="cpu", progress=False)
    assert first.status == "shard-done"
    plan = json.loads((out / "_build" / "plan.json").read_text())
    assert plan["dtype"] == "bfloat16"
    with pytest.raises(ApcirError, match="dtype: bfloat16 -> float32"):
        build_index(small_collection, "embedded", out, encoder="splade-tiny", shard="1/2", dtype="float32",
                    device="cpu", progress=False)
    # auto continues in the plan's precision (a merge on a machine that would pick another)
    merged = build_index(small_collection, "embedded", out, encoder="splade-tiny", device="cpu", progress=False)
    assert merged.status == "built" and merged.manifest is not None and merged.manifest.dtype == "bfloat16"
    assert "encoded in bfloat16" in merged.manifest.describe()


def test_the_ptkb_encoder_takes_the_precision():
    from apcir.responses.ptkb import encoder_similarity

    spec = encoder_similarity("splade-tiny", dtype="bfloat16")
    scores = spec.similarity([("vegetarian food", ["I am vegetarian.", "I live in Delft."])])
    assert len(scores[0]) == 2 and scores[0][0] > scores[0][1]
