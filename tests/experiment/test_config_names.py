"""Renamed config keys: old configs still load, with a deprecation warning naming the new key."""

from __future__ import annotations

import pytest

from apcir.errors import ApcirError
from apcir.experiment.config import load_config


def test_reformulator_llm_and_tune_llm_still_load_with_a_warning(tmp_path, capsys):
    config = tmp_path / "old.toml"
    config.write_text('name = "old"\n[reformulator]\nllm = "manual"\n[fusion.weights]\nsource = "tune"\n'
                      'tune_topics = "ikat23-train"\ntune_qrels = "ikat23-test"\ntune_llm = "heuristic"\n')
    loaded = load_config(config)
    assert loaded.reformulator.method == "manual" and loaded.fusion.weights.tune_method == "heuristic"
    err = capsys.readouterr().err
    assert "'llm' is deprecated; it is now 'method'" in err and "[reformulator]" in err
    assert "'tune_llm' is deprecated; it is now 'tune_method'" in err


def test_old_and_new_key_together_is_an_error(tmp_path):
    config = tmp_path / "both.toml"
    config.write_text('name = "both"\n[reformulator]\nllm = "manual"\nmethod = "heuristic"\n')
    with pytest.raises(ApcirError, match="give 'method' only"):
        load_config(config)


def test_the_command_line_takes_the_new_and_the_old_option(run_cli, tmp_path):
    for option in ("--method", "--llm"):
        out = tmp_path / f"{option.strip('-')}.jsonl"
        code, _, err = run_cli("reformulate", "--topics", "ikat23-test", option, "manual", "--turns", "9-1_1",
                               "--out", str(out))
        assert code == 0, err
        assert out.exists()


def test_a_run_directory_config_json_loads_as_the_same_config(tmp_path):
    from apcir.experiment.config import validate_config
    from apcir.io import write_json
    from apcir.llm.settings import redact_urls

    config = validate_config({"name": "again", "turns": ["9-1_1", "9-1_2"], "output_dir": str(tmp_path / "r"),
                              "reformulator": {"method": "gpt-x", "base_url": "http://127.0.0.1:9/v1"},
                              "rerank": {"reranker": "cross-encoder", "model": "some/model", "depth": 20},
                              "fusion": {"weights": {"folds": 3}}, "evaluation": {"qrels": "ikat23-test"}})
    path = tmp_path / "config.json"
    write_json(path, redact_urls(config.model_dump(mode="json")))  # as `apcir run` writes it
    again = load_config(path)
    assert again == config


# ---- misspelt names and keys: one line naming the closest valid choices, exit 2, before any stage (issue 37) ----
MISSPELT = [
    ('[reformulator]\nmethod = "heuristc"\n', "reformulator.method", "did you mean 'heuristic'?"),
    ('[respond]\nresponder = "extractve"\n', "respond.responder", "did you mean 'extractive'?"),
    ('[[rerank]]\nreranker = "monot"\n', "rerank.0.reranker", "did you mean 'monot5'?"),
    ('[retrieval]\nbackend = "embeded"\n', "retrieval.backend", "did you mean 'embedded'?"),
    ('[retrieval]\nencoder = "splade-tny"\n', "retrieval.encoder", "did you mean 'splade-tiny'?"),
    ('[retreival]\nbackend = "embedded"\n', "unknown key 'retreival'", "did you mean 'retrieval'?"),
    ('[fusion.weigths]\nfolds = 3\n', "unknown key 'fusion.weigths'", "did you mean 'fusion.weights'?"),
    ('[[rerank]]\ndept = 10\n', "unknown key 'rerank[1].dept'", "did you mean 'rerank[1].depth'?"),
    ('[fusion]\nbaselines = ["equl"]\n', "fusion.baselines", "did you mean 'equal'?"),
    ('[fusion.weights]\nsource = "tune"\ntune_topics = "ikat23-train"\ntune_qrels = "ikat23-test"\n'
     'tune_method = "manul"\n', "fusion.weights.tune_method", "did you mean 'manual'?"),
    ('[evaluation]\nmeasures = ["nDGC@3"]\n', "evaluation.measures", "did you mean 'nDCG@3'?"),
    ('[evaluation]\nnugget_matcher = "lexcal"\n', "evaluation.nugget_matcher", "did you mean 'lexical'?"),
    ('[export]\nformat = "ikat-23"\n', "unknown submission format 'ikat-23'", "did you mean 'ikat23'"),
    ('[retrieval]\ncollection = "ikat23-provenanc"\n', "retrieval.collection", "did you mean 'ikat23-provenance'?"),
]


@pytest.mark.parametrize("section, where, guess", MISSPELT, ids=[m[1] for m in MISSPELT])
def test_a_misspelt_name_or_key_exits_2_before_any_stage_naming_the_closest(tmp_path, run_cli, section, where,
                                                                            guess, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = tmp_path / "typo.toml"
    out = tmp_path / "run"
    qrels = 'qrels = "ikat23-test-provenance"\n'
    body = section.replace("[evaluation]\n", f"[evaluation]\n{qrels}") if section.startswith("[evaluation]") \
        else f"{section}[evaluation]\n{qrels}"
    config.write_text(f'name = "typo"\nturns = ["9-1_1"]\n{body}')
    code, out_text, err = run_cli("run", str(config), "--output-dir", str(out), "--no-progress")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and where in lines[0] and guess in lines[0], err
    assert "API key" not in err and "Traceback" not in err
    assert not out.exists(), "no stage may run (nor make the run directory) before the names are checked"


def test_names_that_are_not_near_misses_are_taken_as_models_and_plugins_stay_accepted():
    from apcir.experiment.config import validate_config

    for method in ("gpt-4o", "llama3:8b", "smollm2", "file:rewrites.tsv"):
        config = validate_config({"name": "m", "reformulator": {"method": method},
                                  "fusion": {"weights": {"source": "file", "file": "w.json"}}})
        assert config.reformulator.method == method
    for responder in ("gpt-4o", "pathways:gpt-4o", "extractive"):
        assert validate_config({"name": "r", "respond": {"responder": responder},
                                "fusion": {"weights": {"source": "file", "file": "w.json"}}}).respond.responder == \
            responder
    with pytest.raises(ApcirError, match=r"did you mean 'pathways:\.\.\.'"):
        validate_config({"name": "r", "respond": {"responder": "pathway:gpt-4o"},
                         "fusion": {"weights": {"source": "file", "file": "w.json"}}})


@pytest.mark.parametrize("args, guess", [
    (["run", "demo", "--method", "heuristc", "--output-dir", "{out}/i"],
     "--method: unknown reformulator 'heuristc': did you mean 'heuristic'?"),
    (["run", "demo", "--responder", "extractve", "--output-dir", "{out}/i"],
     "--responder: unknown responder 'extractve': did you mean 'extractive'?"),
    (["reformulate", "--topics", "ikat23-test", "--method", "heuristc", "--out", "{out}/r.jsonl"],
     "--method: unknown reformulator 'heuristc': did you mean 'heuristic'?"),
    (["respond", "{out}/none.run", "--topics", "ikat23-test", "--responder", "extractve", "--out", "{out}/x.jsonl"],
     "--responder: unknown responder 'extractve': did you mean 'extractive'?"),
    (["index", "build", "--collection", "ikat23-provenance", "--backend", "embeded", "--out", "{out}/i"],
     "unknown retrieval backend 'embeded': did you mean 'embedded'?"),
    (["index", "build", "--collection", "ikat23-provenance", "--encoder", "splade-tny", "--out", "{out}/i"],
     "--encoder: unknown encoder 'splade-tny': did you mean 'splade-tiny'?"),
    (["evaluate", "{out}/none.run", "--qrels", "ikat23-test", "-m", "nDGC@3"],
     "unknown measure 'nDGC@3': did you mean 'nDCG@3'?"),
    (["evaluate", "{out}/none.run", "--qrels", "ikat23-tst"], "unknown qrels 'ikat23-tst': did you mean 'ikat23-test'"),
    (["evaluate-responses", "{out}/none.jsonl", "--topics", "ikat25-test", "--nuggets", "ikat25-test", "--matcher",
      "lexcal"], "--matcher: unknown nugget matcher 'lexcal': did you mean 'lexical'?"),
    (["rank-ptkb", "--topics", "ikat23-test", "--out", "{out}/p.run", "--encoder", "bm-25"],
     "did you mean 'bm25'?"),
])
def test_the_stage_commands_check_names_the_same_way(tmp_path, run_cli, args, guess):
    (tmp_path / "none.run").write_text("9-1_1 Q0 clueweb22-en0000-00-00000:0 1 1.0 t\n")
    (tmp_path / "none.jsonl").write_text("")
    code, _, err = run_cli(*[a.format(out=tmp_path) for a in args])
    assert code == 2 and guess in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "i").exists() and not (tmp_path / "r.jsonl").exists()
