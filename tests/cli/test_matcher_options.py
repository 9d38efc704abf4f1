"""The nugget matchers' own options (issue 51): generated once from each matcher's options model for ``apcir
evaluate-responses --nuggets`` and ``apcir nuggets agreement``; an option no matcher in use reads is refused in one
line naming the option, the matcher, and the matchers that read it (the six cases a bad-input campaign ran with
exit 0 and no word), while the same option with a matcher that reads it still runs."""

from __future__ import annotations

import json

import pytest

NUGGETS = [("1-1_1", "1", "cats sleep a lot"), ("1-1_1", "2", "dogs bark loudly"), ("1-1_2", "1", "fish swim")]
RESPONSES = {"1-1_1": {"A": "Cats sleep a lot.", "B": "Dogs bark."}, "1-1_2": {"A": "Fish swim.", "B": "No."}}


@pytest.fixture
def leaderboard(tmp_path, run_cli):
    nuggets, responses, topics = tmp_path / "nuggets.jsonl", tmp_path / "responses.json", tmp_path / "topics.json"
    nuggets.write_text("".join(json.dumps({"turn_id": t, "nugget_id": i, "text": x}) + "\n" for t, i, x in NUGGETS))
    responses.write_text(json.dumps(RESPONSES))
    topics.write_text(json.dumps([{"number": "1-1", "title": "t", "ptkb": {"1": "I like pets."}, "turns": [
        {"turn_id": i, "utterance": f"question {i}", "resolved_utterance": "", "response": "", "ptkb_provenance": [],
         "response_provenance": []} for i in (1, 2)]}]))

    def run(*more: str) -> tuple[int, str, str]:
        return run_cli("evaluate-responses", str(responses), "--topics", str(topics), "--nuggets", str(nuggets),
                       *more)

    return run


CAMPAIGN = [
    (["--matcher", "lexical", "--learned-model", "M"], "--learned-model", "lexical", "(learned reads it)"),
    (["--matcher", "lexical", "--matcher-model", "gpt-4o"], "--matcher-model", "lexical", "(llm reads it)"),
    (["--matcher", "lexical", "--per-nugget"], "--per-nugget", "lexical", "(llm reads it)"),
    (["--matcher", "llm", "--tau", "0.5"], "--tau", "llm", "(lexical, embedding, learned read it)"),
    (["--matcher", "learned", "--learned-model", "M", "--encoder", "X"], "--encoder", "learned",
     "(embedding reads it)"),
    (["--matcher", "embedding", "--learned-model", "M"], "--learned-model", "embedding", "(learned reads it)"),
]


@pytest.mark.parametrize(("args", "flag", "matcher", "readers"), CAMPAIGN, ids=[" ".join(c[0]) for c in CAMPAIGN])
def test_another_matchers_option_is_refused_in_one_line(leaderboard, args, flag, matcher, readers):
    code, out, err = leaderboard(*args)
    assert code == 2, (out, err)
    assert err.strip() == f"error: {flag}: not used by the {matcher} nugget matcher {readers}; remove it", err


def test_an_option_of_the_matcher_in_use_still_runs(leaderboard):
    code, out, err = leaderboard("--matcher", "lexical", "--tau", "0.5", "--json")
    assert code == 0, err
    report = json.loads(out)
    # A covers cats (turn 1 of 2 nuggets) and fish (turn 2); B dogs (2 of 3 content words >= 0.5), not fish
    assert report["matcher"]["tau"] == 0.5
    assert (report["runs"]["A"]["recall"], report["runs"]["B"]["recall"]) == pytest.approx((0.75, 0.25))


def test_the_llm_options_are_the_llm_matchers_and_tau_the_first_matchers(leaderboard):
    code, _, err = leaderboard("--matcher", "lexical", "--base-url", "http://localhost:1/v1")
    assert code == 2 and err.strip() == ("error: --base-url: not used by the lexical nugget matcher (llm reads it); "
                                         "remove it"), err
    # --tau is the first matcher's: a compared matcher keeps its own, so it does not make --tau read
    code, _, err = leaderboard("--matcher", "llm", "--compare-matcher", "lexical", "--tau", "0.5")
    assert code == 2 and "error: --tau: not used by the llm nugget matcher" in err, err
    # an option the compared matcher reads is its own
    code, out, err = leaderboard("--matcher", "lexical", "--compare-matcher", "embedding", "--encoder", "bogus-x")
    assert code == 2 and "--encoder" in err and "bogus-x" in err, err


def test_a_matcher_option_without_nuggets_is_refused(leaderboard, tmp_path, run_cli):
    code, _, err = run_cli("evaluate-responses", str(tmp_path / "none.jsonl"), "--topics", "ikat25-test", "--tau",
                           "0.5")
    assert code == 2 and err.strip() == "error: --tau: nugget matcher option, used only with --nuggets", err


def test_agreement_takes_an_option_any_measured_matcher_reads(tmp_path, run_cli):
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"turn_id": t, "run": "A", "nugget_id": i, "label": 1}) + "\n"
                              for t, i, _ in NUGGETS))
    common = ["nuggets", "agreement", "--labels", str(labels), "--nuggets", "x", "--responses", "y"]
    code, _, err = run_cli(*common, "--matcher", "lexical", "--matcher", "embedding", "--per-nugget")
    assert code == 2 and err.strip() == ("error: --per-nugget: not used by the lexical or embedding nugget matchers "
                                         "(llm reads it); remove it"), err
    code, _, err = run_cli(*common, "--matcher", "lexical", "--encoder", "minilm")
    assert code == 2 and "--encoder: not used by the lexical nugget matcher (embedding, learned read it)" in err, err
