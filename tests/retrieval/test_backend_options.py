"""A retrieval backend's own options (BackendSpec.options): `[retrieval]` keys beside the shared ones, generated
command-line options, another backend's key refused in one line, the keys that shape an index; and the one loader
of module:function references taking a FILE.py."""

from __future__ import annotations

import pytest

from apcir.cli.common import settings
from apcir.errors import ApcirError
from apcir.retrieval.options import BM25Options, PisaOptions, PyTerrierOptions
from apcir.retrieval.registry import BACKENDS
from apcir.retrieval.settings import RetrievalSettings


def test_a_backend_s_keys_are_validated_against_its_model_and_dumped_flat():
    chosen = RetrievalSettings(backend="lucene-bm25", bm25_k1=1.2)
    assert isinstance(chosen.options, BM25Options) and (chosen.options.bm25_k1, chosen.options.bm25_b) == (1.2, 0.4)
    dumped = chosen.model_dump()
    assert dumped["bm25_k1"] == 1.2 and "options" not in dumped and "query_algorithm" not in dumped
    assert RetrievalSettings.model_validate(dumped) == chosen  # a full dump reloads
    pisa = RetrievalSettings(backend="pisa", query_algorithm="wand")
    assert isinstance(pisa.options, PisaOptions) and pisa.options.build_values() == {"quantization_scale": 100}
    # another backend's key at its default is accepted (a dump reloads after the backend changes); another value not
    assert RetrievalSettings.model_validate({**pisa.model_dump(), "backend": "embedded",
                                             "query_algorithm": "maxscore"}).backend == "embedded"
    with pytest.raises(ApcirError, match=r"^query_algorithm: not used by the embedded retrieval backend \(pisa reads "
                                         r"it\); remove it$"):
        settings(RetrievalSettings, backend="embedded", query_algorithm="wand")
    with pytest.raises(ApcirError, match="--quantization-scale 0: Input should be greater than or equal to 1"):
        settings(RetrievalSettings, backend="pisa", quantization_scale=0)


def test_what_encodes_the_queries_follows_the_options():
    spec = BACKENDS.get("pyterrier")
    assert spec.build is None and spec.encoder is None
    text = RetrievalSettings(backend="pyterrier", retriever="retrievers.py:bm25")
    toks = RetrievalSettings(backend="pyterrier", retriever="retrievers.py:bm25", query_form="toks")
    assert isinstance(toks.options, PyTerrierOptions)
    assert (text.encoder_kind, text.uses_encoder) == (None, False)
    assert (toks.encoder_kind, toks.uses_encoder) == ("splade", True)
    assert [p.name for p in toks.option_files] == ["retrievers.py"]  # the ledger fingerprints the file
    assert RetrievalSettings(backend="pyterrier", retriever="my_pkg.retrievers:bm25").option_files == []
    assert RetrievalSettings(backend="pisa").encoder_kind == "splade"
    assert RetrievalSettings(backend="lucene-bm25").encoder_kind is None


def test_the_commands_take_every_backend_s_options(run_cli, tmp_path):
    for command in (("index", "build"), ("retrieve",)):
        code, out, _ = run_cli(*command, "--help")
        assert code == 0
        for flag in ("--bm25-k1", "--bm25-b", "--quantization-scale", "--query-algorithm", "--retriever",
                     "--query-form"):
            assert flag in out, (command, flag)

    def one_line(*args: str) -> str:
        code, _, err = run_cli(*args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        return err

    assert "query_algorithm: not used by the embedded retrieval backend" in one_line(
        "index", "build", "-c", "ikat23-provenance", "--out", str(tmp_path / "x"), "--query-algorithm", "wand")
    assert "bm25_b: not used by the pisa retrieval backend" in one_line(
        "index", "build", "--backend", "pisa", "-c", "ikat23-provenance", "--out", str(tmp_path / "x"),
        "--bm25-b", "0.5")
    assert not (tmp_path / "x").exists()  # refused before any work


def test_a_config_refuses_another_backend_s_key_in_one_line(tmp_path):
    from apcir.experiment.config import load_config

    config = tmp_path / "c.toml"
    config.write_text('name = "c"\ntopics = "ikat23-test"\n[retrieval]\nbackend = "embedded"\nbm25_k1 = 1.5\n')
    with pytest.raises(ApcirError, match="bm25_k1: not used by the embedded retrieval backend"):
        load_config(config)
    config.write_text('name = "c"\ntopics = "ikat23-test"\n[retrieval]\nbackend = "lucene-bm25"\nbm25_k1 = 1.5\n'
                      'index = "x"\n[evaluation]\nqrels = "ikat23-test-provenance"\n')
    assert load_config(config).retrieval.options.bm25_k1 == 1.5


def test_load_ref_takes_a_python_file_relative_to_the_working_directory(tmp_path, monkeypatch):
    from apcir.registry import load_ref

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text("def answer(index):\n    return ('answer', index)\n")
    assert load_ref("mine.py:answer")("x") == ("answer", "x")
    assert load_ref(f"{tmp_path / 'mine.py'}:answer") is load_ref("mine.py:answer")  # imported once per file
    with pytest.raises(ModuleNotFoundError, match="no such Python file"):
        load_ref("missing.py:answer")
    with pytest.raises(AttributeError):
        load_ref("mine.py:question")
