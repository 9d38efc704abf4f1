"""The llm matcher against people through the real local server (llama.cpp with SmolLM2-135M): ``apcir nuggets
agreement`` on labels crafted in the published human-study layout. SmolLM2's κ is low; the test checks the path:
every label is decided or counted, κ and its interval are printed, and a re-run is answered from the cache."""

from __future__ import annotations

import json

import pytest

from apcir.llm.local_server import LocalServer, server_available

pytestmark = [pytest.mark.local_llm, pytest.mark.slow]
if not server_available():
    pytest.skip("llama.cpp's server (llama-cpp-python[server]) is not installed", allow_module_level=True)


def test_llm_matcher_agreement_on_the_published_layout(tmp_path, run_cli):
    gold = tmp_path / "gold_nuggets_human.json"
    gold.write_text(json.dumps({"1_6": {"[1]": {"text": "Apples are red.", "relevance": "2"},
                                        "[2]": {"text": "Bananas are yellow.", "relevance": "1"},
                                        "[3]": {"text": "The train leaves at noon.", "relevance": "1"}}}))
    responses = tmp_path / "automatic_responses.json"
    responses.write_text(json.dumps({"1_6": {"uot-yahoo_run": "Apples are red. Bananas are yellow."}}))
    labels = tmp_path / "human-study-matching-labels.txt"
    labels.write_text("1_1_6_1_iires-1\t1\n1_1_6_2_iires-1\t1\n1_1_6_3_iires-1\t0\n")
    args = ["nuggets", "agreement", "--labels", str(labels), "--nuggets", str(gold), "--responses", str(responses),
            "--matcher", "llm", "--matcher-model", "smollm2", "--cache-dir", str(tmp_path / "cache"), "--json"]
    with LocalServer(n_ctx=4096) as server:
        code, out, err = run_cli(*args, "--base-url", server.url)
        assert code == 0, err
        [report] = json.loads(out)
        assert report["matcher"]["name"] == "llm" and report["matcher"]["requests"] >= 1  # one batched request
        decided = report["used"]
        assert decided + report["unmapped"].get("the matcher could not decide", 0) == 3
        assert report["mapping"] == {"iires-1": ["uot-yahoo_run"]} and report["layout"] == "cone-rag"
        assert -1 <= report["kappa"]["low"] <= report["kappa"]["value"] <= report["kappa"]["high"] <= 1
        code, out, err = run_cli(*args, "--base-url", server.url)
        assert code == 0, err
        [again] = json.loads(out)
        assert again["matcher"]["requests"] == 0 and again["kappa"] == report["kappa"]
