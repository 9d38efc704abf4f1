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
