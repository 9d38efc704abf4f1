"""A plugin re-ranker with an option of its own (tests/plugins/with_options: ``wordcount`` and its ``favour`` and
``min_words``), installed through an entry point: reached from a config's ``[rerank]`` and from ``apcir rerank
--favour``, its keys checked like a built-in's, and listed in the generated reference, with no edit to apcir."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared import cli_section, reference_pages
from tiny_models import write_collection

from apcir.errors import ApcirError
from apcir.evaluation.nuggets.registry import MATCHERS
from apcir.reranking.registry import RERANKERS
from apcir.responses.registry import RESPONDERS

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "with_options"
TURN = "9-1_1"
LENGTHS = {f"clueweb22-en0000-00-{i:05d}:0": n for i, n in enumerate([3, 9, 1, 6, 4])}


REGISTRIES = [RERANKERS, RESPONDERS, MATCHERS]


@pytest.fixture
def plugin(monkeypatch):
    """The plugin installed (its dist-info on sys.path): the names each registry added, and the registries as they
    were afterwards (entries read while it was installed leave with it)."""
    for registry in REGISTRIES:
        registry.load_plugins()  # what is installed without it, read now
    saved = [dict(r._entries) for r in REGISTRIES]
    monkeypatch.syspath_prepend(str(PLUGIN))
    yield [r.load_plugins(again=True) for r in REGISTRIES]
    for registry, entries in zip(REGISTRIES, saved):
        registry._entries = entries


@pytest.fixture
def files(tmp_path):
    passages = {pid: " ".join(["word"] * n) for pid, n in LENGTHS.items()}
    write_collection(tmp_path / "c.jsonl", passages)
    (tmp_path / "in.run").write_text("".join(f"{TURN} Q0 {pid} {rank} {10.0 - rank} first\n"
                                             for rank, pid in enumerate(LENGTHS, 1)))
    (tmp_path / "q.tsv").write_text(f"{TURN}\twhich passage is longest\n")
    return tmp_path


def by_length(reverse: bool) -> list[str]:
    return sorted(LENGTHS, key=lambda pid: (-LENGTHS[pid] if reverse else LENGTHS[pid], pid))


def config(**rerank):
    from apcir.experiment.config import validate_config

    return validate_config({"name": "p", "fusion": {"weights": {"source": "file", "file": "w.json"}},
                            "rerank": rerank})


def test_the_plugin_option_is_reached_from_a_config(plugin):
    from apcir.reranking.stage import rerank_run

    assert plugin == [["wordcount"], ["first"], ["letters"]]
    settings = config(reranker="wordcount", favour="long", depth=5).rerank[0]
    assert settings.options.favour == "long" and settings.favour == "long"
    assert settings.model_dump()["favour"] == "long", "a dump gives the plugin's key flat, as a config has it"
    run = {TURN: {pid: 10.0 - i for i, pid in enumerate(LENGTHS)}}
    texts = {pid: " ".join(["word"] * n) for pid, n in LENGTHS.items()}
    for favour in ("long", "short"):
        chosen = config(reranker="wordcount", favour=favour, depth=5).rerank[0]
        result, _ = rerank_run(run, {TURN: "q"}, texts, chosen, progress=False)
        assert sorted(result[TURN], key=result[TURN].get, reverse=True) == by_length(favour == "long")


def test_the_plugin_keys_are_checked_like_a_builtins(plugin):
    with pytest.raises(ApcirError, match=r"rerank\[1\]\.favor': did you mean 'rerank\[1\]\.favour'\?"):
        config(reranker="wordcount", favor="long")
    with pytest.raises(ApcirError, match="rerank.0.favour: Input should be 'short' or 'long'"):
        config(reranker="wordcount", favour="medium")
    with pytest.raises(ApcirError, match="window: not used by the wordcount re-ranker"):
        config(reranker="wordcount", window=5)
    with pytest.raises(ApcirError, match="favour: not used by the monot5 re-ranker"):
        config(reranker="monot5", favour="long")
    assert config(reranker="monot5", favour="short").rerank[0].reranker == "monot5", "another entry's default is kept"


def test_the_plugin_option_is_reached_from_apcir_rerank(plugin, files, run_cli):
    from apcir.contract.runs import read_run_file

    code, out, err = run_cli("rerank", "--help")
    assert code == 0 and "--favour" in out and "--min-words" in out, err
    for favour in ("long", "short"):
        code, _, err = run_cli("rerank", "--run", str(files / "in.run"), "--queries", str(files / "q.tsv"),
                               "--collection", str(files / "c.jsonl"), "--reranker", "wordcount", "--favour", favour,
                               "--out", str(files / f"{favour}.run"), "--no-progress")
        assert code == 0, err
        hits = read_run_file(files / f"{favour}.run").run[TURN]
        assert sorted(hits, key=hits.get, reverse=True) == by_length(favour == "long")
    code, _, err = run_cli("rerank", "--run", str(files / "in.run"), "--queries", str(files / "q.tsv"),
                           "--collection", str(files / "c.jsonl"), "--reranker", "wordcount", "--min-words", "-1",
                           "--out", str(files / "bad.run"))
    assert code == 2 and "--min-words -1: Input should be greater than or equal to 0" in err
    code, _, err = run_cli("rerank", "--run", str(files / "in.run"), "--queries", str(files / "q.tsv"),
                           "--collection", str(files / "c.jsonl"), "--favour", "long", "--out", str(files / "m.run"))
    assert code == 2 and "favour: not used by the monot5 re-ranker" in err


def test_the_plugin_option_is_in_the_generated_reference(plugin):
    config_page, cli_page = reference_pages()
    assert "| `rerank.favour` | Literal['short', 'long'] | `'short'` | wordcount: which passages come first: short " \
           "or long ones |" in config_page
    rerank_section = cli_section(cli_page, "apcir rerank")
    assert "| `--favour` |  | wordcount: which passages come first: short or long ones (default short). |" \
           in rerank_section
    assert "`--min-words`" in rerank_section


def test_a_plugin_responder_and_matcher_join_through_their_entry_point_groups(plugin, tmp_path):
    import apcir
    from apcir.evaluation.nuggets.gold import Nugget
    from apcir.evaluation.nuggets.settings import MatcherSettings
    from apcir.experiment.config import validate_config

    turns = [t for t in apcir.topics("ikat23-test") if t.conversation_id == "9-1"][:2]
    passages = {pid: f"passage {n} words long" for pid, n in LENGTHS.items()}
    run = {t.turn_id: {p: 10.0 - i for i, p in enumerate(passages)} for t in turns}
    responses = apcir.respond(turns, apcir.reformulate(turns, "heuristic"), run, passages, "first")
    assert [r.citations for r in responses.values()] == [[next(iter(passages))]] * 2
    assert validate_config({"name": "p", "fusion": {"weights": {"source": "file", "file": "w.json"}},
                            "respond": {"responder": "first"}}).respond.responder == "first"
    nugget = Nugget(turn_id=turns[0].turn_id, nugget_id="1", text="abc")
    assert MATCHERS.get("letters").build(MatcherSettings(matcher="letters")).scores([(nugget, "cab"), (nugget, "xyz")]) == [1.0, 0.0]
    with pytest.raises(ApcirError, match="did you mean 'letters'"):
        MATCHERS.get("leters")


def respond_config(**respond):
    from apcir.experiment.config import validate_config

    return validate_config({"name": "p", "fusion": {"weights": {"source": "file", "file": "w.json"}},
                            "respond": respond})


def test_the_plugin_responders_option_is_reached_from_a_config(plugin, tmp_path):
    """``[respond] responder = "first"`` and ``passage = 2``: the plugin's own key, through the respond stage's
    function (what ``apcir run`` calls with the config's ``[respond]``), checked like a built-in's keys."""
    import apcir
    from apcir.contract.responses import load_responses
    from apcir.responses.job import build_jobs
    from apcir.responses.stage import respond

    turns = [t for t in apcir.topics("ikat23-test") if t.conversation_id == "9-1"][:2]
    passages = {pid: f"passage {n} words long" for pid, n in LENGTHS.items()}
    run = {t.turn_id: {p: 10.0 - i for i, p in enumerate(passages)} for t in turns}
    jobs = build_jobs(turns, {}, run, passages, {}, 5)
    settings = respond_config(responder="first", passage=2).respond
    assert settings.passage == 2 and settings.model_dump()["passage"] == 2, "read and dumped flat, as a config has it"
    respond(jobs, settings, tmp_path / "r.jsonl", progress=False)
    second = list(passages)[1]
    assert [r.citations for r in load_responses(tmp_path / "r.jsonl").values()] == [[second]] * 2
    assert [r.citations for r in apcir.respond(turns, {}, run, passages, "first", passage=3).values()] == \
        [[list(passages)[2]]] * 2
    with pytest.raises(ApcirError, match=r"'respond\.pasage': did you mean 'respond\.passage'\?"):
        respond_config(responder="first", pasage=2)
    with pytest.raises(ApcirError, match="respond.passage: Input should be greater than or equal to 1"):
        respond_config(responder="first", passage=0)
    with pytest.raises(ApcirError, match="passage: not used by the extractive responder"):
        respond_config(responder="extractive", passage=2)
    with pytest.raises(ApcirError, match="max_sentences: not used by the first responder"):
        respond_config(responder="first", max_sentences=2)


def test_the_plugin_responders_option_is_reached_from_apcir_respond(plugin, files, run_cli):
    from apcir.contract.responses import load_responses

    code, out, err = run_cli("respond", "--help")
    assert code == 0 and "--passage" in out, err
    args = [str(files / "in.run"), "--topics", "ikat23-test", "--turns", TURN, "--collection", str(files / "c.jsonl"),
            "--responder", "first", "--no-progress"]
    for rank in (2, 4):
        code, _, err = run_cli("respond", *args, "--passage", str(rank), "--out", str(files / f"r{rank}.jsonl"))
        assert code == 0, err
        assert load_responses(files / f"r{rank}.jsonl")[TURN].citations == [list(LENGTHS)[rank - 1]]
    code, _, err = run_cli("respond", *args, "--passage", "0", "--out", str(files / "bad.jsonl"))
    assert code == 2 and "--passage 0: Input should be greater than or equal to 1" in err
    code, _, err = run_cli("respond", *args[:-3], "--passage", "2", "--out", str(files / "x.jsonl"))
    assert code == 2 and "passage: not used by the extractive responder" in err


def test_the_plugin_responders_option_is_in_the_generated_reference(plugin):
    config_page, cli_page = reference_pages()
    assert "| `respond.passage` | int | `1` | first: the rank of the passage cited (1: the first) |" in config_page
    respond_section = cli_section(cli_page, "apcir respond")
    assert "| `--passage` |  | first: the rank of the passage cited (1: the first) (default 1). |" in respond_section


def test_a_builtin_entrys_own_keys_are_read_as_strictly_and_guessed_as_the_shared_ones():
    with pytest.raises(ApcirError, match="rerank.0.batch_size: Input should be a valid integer"):
        config(reranker="monot5", batch_size="16")  # a config says what it means, an entry's keys too
    with pytest.raises(ApcirError, match=r"'rerank\[1\]\.true_tokn': did you mean 'rerank\[1\]\.true_token'"):
        config(reranker="monot5", true_tokn="yes")
    with pytest.raises(ApcirError, match=r"'rerank\[1\]\.llm\.bse_url': did you mean 'rerank\[1\]\.llm\.base_url'"):
        config(reranker="rankgpt", llm={"bse_url": "http://localhost:1/v1"})
    settings = config(reranker="rankgpt", window=10, llm={"base_url": "http://localhost:1/v1"}).rerank[0]
    assert (settings.window, settings.step, settings.llm.base_url) == (10, 10, "http://localhost:1/v1")


# ---- the plugin nugget matcher `letters` and its own option, min_letters -------------------------------------
# "big cat" against "it is a cat by a bag": every letter of the nugget is in the response's words (1.0 >= τ 0.9);
# over the words of 3 letters or more (cat, bag), the i is not (5/6 < 0.9)
NUGGET, RESPONSE = "big cat", "it is a cat by a bag"


@pytest.fixture
def nugget_files(tmp_path):
    import json

    (tmp_path / "nuggets.jsonl").write_text(json.dumps({"turn_id": TURN, "nugget_id": "1", "text": NUGGET}) + "\n")
    (tmp_path / "responses.json").write_text(json.dumps({TURN: {"A": RESPONSE}}))
    return tmp_path


def test_the_plugin_matchers_option_is_reached_from_apcir_evaluate_responses(plugin, nugget_files, run_cli):
    import json

    code, out, err = run_cli("evaluate-responses", "--help")
    assert code == 0 and "--min-letters" in out, err
    recall = {}
    for more in ([], ["--min-letters", "1"], ["--min-letters", "3"], ["--min-letters", "3", "--tau", "0.8"]):
        code, out, err = run_cli("evaluate-responses", str(nugget_files / "responses.json"), "--topics", "ikat23-test",
                                 "--nuggets", str(nugget_files / "nuggets.jsonl"), "--matcher", "letters", *more,
                                 "--json")
        assert code == 0, err
        recall[" ".join(more)] = json.loads(out)["runs"]["A"]["recall"]
    assert recall == {"": 1.0, "--min-letters 1": 1.0, "--min-letters 3": 0.0, "--min-letters 3 --tau 0.8": 1.0}
    base = ["evaluate-responses", str(nugget_files / "responses.json"), "--topics", "ikat23-test", "--nuggets",
            str(nugget_files / "nuggets.jsonl")]
    code, _, err = run_cli(*base, "--matcher", "letters", "--min-letters", "0")
    assert code == 2 and "--min-letters 0: Input should be greater than or equal to 1" in err, err
    code, _, err = run_cli(*base, "--min-letters", "3")
    assert code == 2 and err.strip() == ("error: --min-letters: not used by the lexical nugget matcher (letters reads "
                                         "it); remove it"), err


def test_the_plugin_matchers_keys_in_a_config_are_checked_like_a_builtins(plugin):
    from apcir.experiment.config import validate_config

    def evaluation(**keys):
        return validate_config({"name": "p", "fusion": {"weights": {"source": "file", "file": "w.json"}},
                                "evaluation": keys}).evaluation

    chosen = evaluation(nugget_matcher="letters", nugget_min_letters=3, nugget_tau=0.8)
    assert (chosen.options.min_letters, chosen.nugget_min_letters, chosen.nugget_tau) == (3, 3, 0.8)
    assert chosen.matcher_settings().own(type(chosen.options)).min_letters == 3
    assert chosen.model_dump()["nugget_min_letters"] == 3, "a dump spells the key as the config does"
    with pytest.raises(ApcirError, match="evaluation: nugget_min_letters: not used by the lexical nugget matcher "
                                         r"\(letters reads it\); remove it"):
        evaluation(nugget_min_letters=3)
    with pytest.raises(ApcirError, match="evaluation: nugget_encoder: not used by the letters nugget matcher "
                                         r"\(embedding reads it\); remove it"):
        evaluation(nugget_matcher="letters", nugget_encoder="e5")
    with pytest.raises(ApcirError, match="evaluation.nugget_min_letters: Input should be greater than or equal to 1"):
        evaluation(nugget_matcher="letters", nugget_min_letters=0)
    with pytest.raises(ApcirError, match="evaluation.nugget_min_letters: Input should be a valid integer"):
        evaluation(nugget_matcher="letters", nugget_min_letters="3")  # a config is read strictly
    with pytest.raises(ApcirError, match=r"'evaluation\.nugget_min_leters': did you mean "
                                         r"'evaluation\.nugget_min_letters'"):
        evaluation(nugget_matcher="letters", nugget_min_leters=3)


@pytest.mark.slow
def test_the_plugin_matchers_option_is_reached_from_a_run_config(plugin, small, tmp_path, run_cli):
    """`apcir run` on a config whose [evaluation] names the plugin matcher and its option: the option decides the
    recall, and changing it redoes the evaluation (it is in the stage's fingerprint)."""
    import json

    root, collection, index, chosen = small
    conversations = sorted({t.rsplit("_", 1)[0] for t in chosen})[:2]  # two: the cross-validation's folds
    chosen = [t for t in chosen if t.rsplit("_", 1)[0] in conversations]
    nuggets = tmp_path / "nuggets.jsonl"
    nuggets.write_text(json.dumps({"turn_id": chosen[0], "nugget_id": "1", "text": "zzzz qqqq"}) + "\n")
    toml = tmp_path / "letters.toml"

    def run(min_letters: int) -> dict:
        toml.write_text(f'''name = "letters"
topics = "ikat23-test"
turns = {json.dumps(chosen)}
output_dir = "{root / 'letters-run'}"
[retrieval]
index = "{index}"
collection = "{collection}"
encoder = "splade-tiny"
[fusion]
baselines = false
weights = {{ source = "cv", folds = 2, step = 0.1, bootstrap = 0 }}
[evaluation]
qrels = "ikat23-test-provenance"
nuggets = "{nuggets}"
nugget_matcher = "letters"
nugget_min_letters = {min_letters}
''')
        code, _, err = run_cli("run", str(toml), "--no-progress")
        assert code == 0, err
        metrics = json.loads((root / "letters-run" / "metrics.json").read_text())
        return metrics

    assert run(1)["responses"]["nuggets"]["matcher"] == "letters"
    # the response's own first long word as the nugget: covered over words of 1 letter or more; over words of 50
    # letters or more the nugget has no letter, and covers nothing
    text = json.loads((root / "letters-run" / "responses.jsonl").read_text().splitlines()[0])["text"]
    word = max(text.split(), key=len)
    nuggets.write_text(json.dumps({"turn_id": chosen[0], "nugget_id": "1", "text": word}) + "\n")
    assert run(1)["responses"]["measures"]["nugget recall"] == 1.0
    stages = json.loads((root / "letters-run" / "stages.json").read_text())
    before = stages["evaluate"]["fingerprint"]
    assert run(50)["responses"]["measures"]["nugget recall"] == 0.0
    assert json.loads((root / "letters-run" / "stages.json").read_text())["evaluate"]["fingerprint"] != before


def test_the_plugin_matchers_option_is_in_the_generated_reference(plugin):
    config_page, cli_page = reference_pages()
    assert "| `evaluation.nugget_min_letters` | int | `1` | letters: words shorter than this are left out of the " \
           "nugget and the response |" in config_page
    assert "| `evaluation.nugget_tau` | float \\| None | `None` | lexical, embedding, letters: " in config_page
    section = cli_section(cli_page, "apcir evaluate-responses")
    assert "| `--min-letters` |  | letters: words shorter than this are left out of the nugget and the response " \
           "(default 1). |" in section
