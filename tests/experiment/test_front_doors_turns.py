"""Every turn of three conversations, four front doors, two ways of getting the weights (issue 51, part 5).

``apcir run CONFIG`` (door 1, the reference), the stage commands chained by hand as docs/ tells a user to chain
them (door 2), the Python API (door 3: ``Experiment.answer`` and the stage functions chained) and the PyTerrier
``Answer`` transformer (door 4) answer every turn of three conversations of the ``small`` fixture, later turns
with their history, with a re-ranker (a tiny cross-encoder, ``submit = true``), the local LLM responder (SmolLM2
behind llama.cpp's server) and the PTKB statements ranked by the retrieval encoder (splade-tiny, the index's), and
the weights (A) from a file and (B) tuned on another conversation (``source = "tune"``). For each turn each door
must give door 1's ranking (order, and scores to 1e-5), response text, PTKB provenance (the response's
``ptkb_used``) and warnings. ``apcir converse`` keeps its first-turn check in test_front_doors.py: its later turns
differ by design (the live history holds apcir's own answers).

Inputs, kept small so that the module runs in a few minutes on one core:

* the collection is ``small``'s, each passage cut to :data:`PASSAGE_WORDS` words, indexed here (splade-tiny,
  embedded);
* the topics file holds the three conversations with the fewest turns (11-1, 10-3, 10-2: 34 turns), each
  canonical response cut to :data:`HISTORY_WORDS` words, so that a later turn's prompt, which carries the
  conversation so far, stays a few hundred tokens (the longest, 10-2_15, is checked to fit the server's window);
  the fourth conversation (10-1) is the tuning topics of (B), with its qrels;
* the reformulator is ``file:PATH`` holding the heuristic reformulator's records of every turn but one
  (:data:`MISSING`): that turn falls back to its utterance at level a, which apcir says in a warning, so the
  warnings compared are not vacuous. (B)'s tuning leg reformulates with the heuristic (``tune_method``).
* (A)'s weights.json holds the weights tuned on 10-1 (by the API, in the fixture), so that (B)'s prompts are
  (A)'s and (B) is answered from the cache; each door of (B) still tunes its own weights.

The LLM answers are cached by content in one folder for the module (temperature 0): a door that builds the same
prompt as ``apcir run`` gets ``apcir run``'s answer from the cache, a door that builds another prompt asks the
server and gets its own answer. Equal response texts therefore mean equal prompts (the passages, their order,
the PTKB statements, their order, the rewrite, the level).

What "the same warnings" means here: a warning concerns a turn when it names the turn's id; for each chosen turn
the warnings that name it are compared, each as its *kind*: the message with the turn ids, the counts and the
paths taken out ("N turn(s) have no usable reformulation in PATH: 10-3_4, ..." and "1 turn(s) ...: 10-3_4" are one
kind). Warnings that name no chosen turn concern the whole batch (the tuning topics, the index, a file) and are
left out: a batch run and a chain of commands may fairly say those in other words, or once per command. Counts and
lists are left out for the same reason (a command that answers a subset says "1 turn(s)"). The submission's own
warnings are left out too (:data:`SUBMISSION_ONLY`): only ``apcir run`` writes one. What must hold is that a user
of any door is told the same thing about the same turn.

The stage commands are chained as docs/guide/retrieval.md says to chain them so that they give what ``apcir run``
gives: ``--topics`` on ``apcir retrieve`` and ``apcir rerank`` (a turn whose reformulation failed is asked with its
utterance), ``--missing-level a`` on ``apcir fuse``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from shared import cli_code

import apcir
from apcir import datasets
from apcir.contract.reformulations import LIST_NAMES
from apcir.contract.runs import ranking
from apcir.llm.local_server import LocalServer, server_available

pytestmark = [pytest.mark.local_llm, pytest.mark.slow]
if not server_available():
    pytest.skip("llama.cpp's server (llama-cpp-python[server]) is not installed", allow_module_level=True)

CONVERSATIONS = ("11-1", "10-3", "10-2")
"""The three conversations of ``small`` with the fewest turns (9, 10 and 15), every turn answered."""
TUNING = "10-1"
"""The fourth conversation of ``small``: the tuning topics of config (B)."""
MISSING = "10-3_4"
"""The turn the reformulations file lacks: it falls back to its utterance (a warning)."""
PASSAGE_WORDS = 25
HISTORY_WORDS = 8
N_CTX = 4096
RESPOND = {"top_k": 2, "max_words": 30, "max_tokens": 96}
"""The responder's budget: two passages, one sentence, a short JSON answer."""
RERANK_DEPTH = 5
STEP = "0.1"
CONFIGS = ("file", "tune")


TURN_ID = re.compile(r"\b\d+-\d+_\d+\b")
SUBMISSION_ONLY = ("have no ok response record",)
"""Warnings only the submission's export says (``apcir run``'s export stage): the other doors give the responses,
not a submission, so they are left out of the comparison. The response stage's own warning about the same turns
("have no response ... the submission falls back to the pseudo-response") is compared."""


@dataclass
class Warnings:
    """The warning lines apcir.console printed while a door worked."""

    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """The ``error:`` lines (a command that stopped)."""

    def about(self, turn_id: str, paths: dict[str, str]) -> set[str]:
        """The kinds of the warnings that name ``turn_id`` (see the module docstring)."""
        kinds = set()
        for line in self.lines:
            if turn_id not in TURN_ID.findall(line) or any(s in line for s in SUBMISSION_ONLY):
                continue
            text = line
            for path, name in sorted(paths.items(), key=lambda item: -len(item[0])):
                text = text.replace(path, name)
            text = TURN_ID.sub("<turn>", text)
            text = re.sub(r"<turn>(, <turn>)*( \.\.\.)?", "<turns>", text)
            kinds.add(re.sub(r"\b\d+\b", "N", text))
        return kinds


class captured_warnings:
    """``with captured_warnings() as said: ...``: every line apcir.console's stderr printed, kept in ``said``."""

    def __enter__(self) -> Warnings:
        from apcir.console import err

        self.said = Warnings()
        err.begin_capture()
        return self.said

    def __exit__(self, *exc: Any) -> None:
        from apcir.console import err

        text = err.end_capture()
        self.said.lines = [line.removeprefix("warning: ") for line in text.splitlines()
                           if line.startswith("warning: ")]
        self.said.errors = [line for line in text.splitlines() if line.startswith("error: ")]


@dataclass
class TurnResult:
    ranking: dict[str, float]
    text: str
    status: str
    ptkb_used: list[str] | None
    """None: the door does not give it."""
    warnings: set[str]
    fallback: str = ""
    """apcir run: the text submitted when the response failed (the reformulation's pseudo-response)."""
    fallback_used: list[str] = field(default_factory=list)
    """apcir run: the PTKB provenance submitted when the response failed (the statements the reformulation used)."""


Door = dict[str, TurnResult]
SUBMITTED = "submitted"
"""The status of a door that gives the answer's text only (PyTerrier's ``answer``: the response, or the
pseudo-response when the responder failed, as the submission has it)."""


@dataclass
class Setup:
    folder: Path
    collection: Path
    index: Path
    topics: Path
    turns: list[Any]
    tune_topics: Path
    tune_qrels: Path
    refs: Path
    weights: Path
    model: Path
    server: str
    cache: Path

    @property
    def paths(self) -> dict[str, str]:
        return {str(self.folder): "<folder>"}


# ---- inputs -------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with LocalServer(n_ctx=N_CTX, threads=1) as running:  # one core, as the suite gives it
        yield running


@pytest.fixture(scope="module", autouse=True)
def _environment(tmp_path_factory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "APCIR_CACHE_DIR"):
            patch.delenv(name, raising=False)
        patch.setenv("APCIR_CACHE_DIR", str(tmp_path_factory.mktemp("no-cache-but-this")))
        yield


def _cut(text: str, words: int) -> str:
    return " ".join(text.split()[:words])


@pytest.fixture(scope="module")
def setup(small, server, tmp_path_factory) -> Setup:
    from tiny_models import tiny_cross_encoder

    from apcir.datasets.qrels import write_qrels
    from apcir.datasets.registry import topics_path
    from apcir.retrieval.build import build_index

    _, small_collection, _, chosen = small
    assert {t.split("_")[0] for t in chosen} == {*CONVERSATIONS, TUNING}, "small's conversations changed"
    folder = tmp_path_factory.mktemp("doors-turns")
    collection = folder / "collection.jsonl"
    collection.write_text("".join(
        json.dumps({"id": p.id, "contents": _cut(p.contents, PASSAGE_WORDS)}) + "\n"
        for p in datasets.iter_collection(small_collection)), encoding="utf-8")
    index = folder / "index"
    build_index(collection, "embedded", index, "splade-tiny", progress=False)

    raw = json.loads(topics_path("ikat23-test").read_text(encoding="utf-8"))
    answered = [c for c in raw if str(c["number"]) in CONVERSATIONS]
    for conversation in answered:
        for turn in conversation["turns"]:
            turn["response"] = _cut(turn.get("response") or "", HISTORY_WORDS)
    topics = folder / "topics.json"
    topics.write_text(json.dumps(answered), encoding="utf-8")
    tune_topics = folder / "tune-topics.json"
    tune_topics.write_text(json.dumps([c for c in raw if str(c["number"]) == TUNING]), encoding="utf-8")
    qrels = datasets.qrels("ikat23-test-provenance")
    tune_qrels = folder / "tune.qrels"
    write_qrels({t: g for t, g in qrels.items() if t.startswith(f"{TUNING}_")}, tune_qrels)

    turns = apcir.topics(topics)
    assert len(turns) == 34 and MISSING in {t.turn_id for t in turns}
    heuristic = apcir.reformulate(turns, "heuristic")
    refs = folder / "heuristic-but-one.jsonl"
    refs.write_text("".join(r.model_dump_json() + "\n" for t, r in heuristic.items() if t != MISSING),
                    encoding="utf-8")
    # (A)'s weights.json holds the weights (B) is tuned to (here by the API; by each door again in (B)), so that
    # (B)'s prompts are (A)'s and its answers come from the cache: the LLM answers the 34 turns once per module
    # when the doors agree. A door of (B) that tunes other weights gets other rankings and asks the server anew.
    tuning = apcir.reformulate(apcir.topics(tune_topics), "heuristic")
    weights = folder / "weights.json"
    apcir.tune([apcir.retrieve(tuning, index, field=name) for name in LIST_NAMES],
               {t: r.output.level for t, r in tuning.items() if r.output is not None}, tune_qrels,
               step=STEP).save(weights)
    return Setup(folder, collection, index, topics, turns, tune_topics, tune_qrels, refs, weights,
                 tiny_cross_encoder(folder / "ce"), server.url, folder / "llm-cache")


def _config(setup: Setup, source: str) -> Path:
    weights = (f'source = "file"\nfile = "{setup.weights}"\n' if source == "file" else
               f'source = "tune"\ntune_topics = "{setup.tune_topics}"\ntune_qrels = "{setup.tune_qrels}"\n'
               f'tune_method = "heuristic"\n')
    config = setup.folder / f"{source}.toml"
    config.write_text(
        f'name = "doors-{source}"\ntopics = "{setup.topics}"\noutput_dir = "{setup.folder / source / "run"}"\n'
        f'[reformulator]\nmethod = "file:{setup.refs}"\n'
        f'[retrieval]\nindex = "{setup.index}"\ncollection = "{setup.collection}"\nencoder = "splade-tiny"\n'
        f'[fusion]\nbaselines = false\n[fusion.weights]\nstep = {STEP}\n{weights}'
        f'[[rerank]]\nreranker = "cross-encoder"\nmodel = "{setup.model}"\ndepth = {RERANK_DEPTH}\nsubmit = true\n'
        f'[respond]\nresponder = "smollm2"\nbase_url = "{setup.server}"\ncache_dir = "{setup.cache}"\n'
        + "".join(f"{k} = {v}\n" for k, v in RESPOND.items()), encoding="utf-8")
    return config


def _results(setup: Setup, said: Warnings, rankings: dict[str, dict[str, float]],
             texts: dict[str, tuple[str, str]], used: dict[str, list[str]] | None) -> Door:
    return {t.turn_id: TurnResult(dict(rankings.get(t.turn_id, {})), *texts.get(t.turn_id, ("", "missing")),
                                  None if used is None else list(used.get(t.turn_id, [])),
                                  said.about(t.turn_id, setup.paths)) for t in setup.turns}


def _records(path: Path) -> tuple[dict[str, tuple[str, str]], dict[str, list[str]]]:
    from apcir.contract.responses import load_responses

    records = load_responses(path)
    return ({t: (r.text, r.status) for t, r in records.items()}, {t: list(r.ptkb_used) for t, r in records.items()})


# ---- the doors ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=CONFIGS)
def source(request) -> str:
    return str(request.param)


SECONDS: dict[str, float] = {}


@pytest.fixture(scope="module")
def by_run(setup, source) -> Door:
    """Door 1, the reference: ``apcir run CONFIG`` (in-process): the submitted run (re-ranked fused run), the
    responses and their PTKB provenance, the warnings it printed."""
    config = _config(setup, source)
    started = time.perf_counter()
    with captured_warnings() as said:
        code = cli_code("run", str(config), "--no-progress")
    SECONDS[f"apcir run ({source})"] = time.perf_counter() - started
    assert code == 1, f"apcir run ({source}) exited {code}, not 1 (done, {MISSING} failed): {said.errors} {said.lines}"
    run_dir = setup.folder / source / "run"
    submitted = list(run_dir.glob("fused+*.run"))
    assert len(submitted) == 1, f"apcir run ({source}): one re-ranked fused run submitted, found {submitted}"
    texts, used = _records(run_dir / "responses.jsonl")
    result = _results(setup, said, apcir.load_run(submitted[0]), texts, used)
    from apcir.contract.reformulations import load_reformulations, with_fallbacks
    from apcir.responses.ptkb import statements_used

    records = with_fallbacks(load_reformulations(run_dir / "reformulations.jsonl"), setup.turns)
    for turn in setup.turns:
        output = records[turn.turn_id].output
        result[turn.turn_id].fallback = output.response if output is not None else ""
        result[turn.turn_id].fallback_used = statements_used(turn, records[turn.turn_id])
    # Preconditions of a comparison that means something: a response per turn, nearly all of them the LLM's (a
    # failed turn, SmolLM2 looping past max_tokens, is compared too: the same status and no text).
    assert set(texts) == {t.turn_id for t in setup.turns}, f"apcir run ({source}): a response per turn"
    failed = [t for t, (_, status) in texts.items() if status != "ok"]
    assert len(failed) <= 3, f"apcir run ({source}): the responder failed turns {failed}"
    assert result[MISSING].warnings, f"apcir run ({source}) said nothing about {MISSING}: {said.lines}"
    assert all(r.ranking for r in result.values())
    assert any(r.ptkb_used for r in result.values()), f"apcir run ({source}): no response used a PTKB statement"
    return result


def _same(door: str, source: str, got: Door, expected: Door) -> None:
    """Every turn of ``got`` as ``expected`` (door 1); one message listing every difference, by turn."""
    problems: list[str] = []
    for turn_id, want in expected.items():
        mine = got.get(turn_id)
        where = f"{door} ({source}), turn {turn_id}"
        if mine is None:
            problems.append(f"{where}: not answered")
            continue
        order, want_order = [p for p, _ in ranking(mine.ranking)], [p for p, _ in ranking(want.ranking)]
        if order != want_order:
            first = next((i for i, (a, b) in enumerate(zip(order, want_order)) if a != b), min(len(order),
                                                                                               len(want_order)))
            problems.append(f"{where}: another ranking from rank {first + 1} ({order[first:first + 3]} instead of "
                            f"{want_order[first:first + 3]}; {len(order)} vs {len(want_order)} passages)")
        elif mine.ranking != pytest.approx(want.ranking, abs=1e-5):
            worst = max(want.ranking, key=lambda p: abs(mine.ranking[p] - want.ranking[p]))
            problems.append(f"{where}: other scores ({worst}: {mine.ranking[worst]} instead of "
                            f"{want.ranking[worst]})")
        if mine.status == SUBMITTED:  # the text a user is given: the pseudo-response when the responder failed
            if mine.text != (want.text if want.status == "ok" else want.fallback):
                problems.append(f"{where}: another answer {mine.text[:80]!r} instead of apcir run's ({want.status}) "
                                f"{(want.text if want.status == 'ok' else want.fallback)[:80]!r}")
        elif (mine.status, mine.text) != (want.status, want.text):
            problems.append(f"{where}: another response ({mine.status}) {mine.text[:80]!r} instead of "
                            f"({want.status}) {want.text[:80]!r}")
        # a door that gives what is submitted: the statements the reformulation used when the responder failed
        wanted = want.fallback_used if mine.status == SUBMITTED and want.status != "ok" else want.ptkb_used
        if mine.ptkb_used is None:
            problems.append(f"{where}: gives no PTKB provenance (apcir run's: {wanted})")
        elif mine.ptkb_used != wanted:
            problems.append(f"{where}: PTKB provenance {mine.ptkb_used} instead of {wanted}")
        if mine.warnings != want.warnings:
            problems.append(f"{where}: warnings {sorted(mine.warnings)} instead of {sorted(want.warnings)}")
    assert not problems, f"{len(problems)} difference(s) from apcir run:\n" + "\n".join(problems)


def test_the_stage_commands_chained_by_hand_answer_every_turn_as_apcir_run_does(setup, source, by_run):
    """Door 2: the stage commands as docs/ chains them: reformulate, retrieve (the three lists), for (B)
    reformulate + retrieve the tuning topics and tune, fuse, rerank, rank-ptkb --index, respond --ptkb-run."""
    chain = setup.folder / source / "chain"
    chain.mkdir(parents=True)
    refs, lists = chain / "reformulations.jsonl", chain / "lists"
    collection, index = str(setup.collection), str(setup.index)
    started = time.perf_counter()
    with captured_warnings() as said:
        steps: list[list[str]] = [
            ["reformulate", "-t", str(setup.topics), "-m", f"file:{setup.refs}", "-o", str(refs), "--no-progress"],
            ["retrieve", "-i", index, "-q", str(refs), "-t", str(setup.topics), "-f", ",".join(LIST_NAMES), "-o",
             str(lists)]]
        weights = setup.weights
        if source == "tune":
            tune_refs, tune_lists, weights = chain / "tune-reformulations.jsonl", chain / "tune-lists", \
                chain / "weights.json"
            steps += [
                ["reformulate", "-t", str(setup.tune_topics), "-m", "heuristic", "-o", str(tune_refs),
                 "--no-progress"],
                ["retrieve", "-i", index, "-q", str(tune_refs), "-f", ",".join(LIST_NAMES), "-o", str(tune_lists)],
                ["tune", "--runs", *(str(tune_lists / f"{n}.run") for n in LIST_NAMES), "--levels", str(tune_refs),
                 "-q", str(setup.tune_qrels), "--step", STEP, "-o", str(weights)]]
        steps += [
            ["fuse", "--runs", *(str(lists / f"{n}.run") for n in LIST_NAMES), "--levels", str(refs), "-w",
             str(weights), "--missing-level", "a", "-o", str(chain / "fused.run")],
            ["rerank", "-r", str(chain / "fused.run"), "-q", str(refs), "-t", str(setup.topics), "-c", collection,
             "--reranker",
             "cross-encoder", "-m", str(setup.model), "-d", str(RERANK_DEPTH), "-o", str(chain / "reranked.run"),
             "--no-progress"],
            ["rank-ptkb", "-t", str(setup.topics), "-r", str(refs), "--index", index, "-o", str(chain / "ptkb.run")],
            ["respond", str(chain / "reranked.run"), "-t", str(setup.topics), "-r", str(refs), "--ptkb-run",
             str(chain / "ptkb.run"), "--collection", collection, "--responder", "smollm2", "--base-url",
             setup.server, "--cache-dir", str(setup.cache), "--top-k", str(RESPOND["top_k"]), "--max-words",
             str(RESPOND["max_words"]), "--max-tokens", str(RESPOND["max_tokens"]), "-o",
             str(chain / "responses.jsonl"), "--no-progress"]]
        codes = [(step[0], cli_code(*step)) for step in steps]
    SECONDS[f"stage commands ({source})"] = time.perf_counter() - started
    assert all(code in (0, 1) for _, code in codes), f"stage commands ({source}): exit codes {codes}: {said.errors}; warnings {said.lines}"
    texts, used = _records(chain / "responses.jsonl")
    _same("the stage commands", source, _results(setup, said, apcir.load_run(chain / "reranked.run"), texts, used),
          by_run)


def test_experiment_answer_answers_every_turn_as_apcir_run_does(setup, source, by_run):
    """Door 3a: ``apcir.Experiment.from_config(config).answer(turns, out=...)``."""
    started = time.perf_counter()
    with captured_warnings() as said:
        answers = apcir.Experiment.from_config(_config(setup, source)).answer(
            setup.turns, out=setup.folder / source / "api")
    SECONDS[f"Experiment.answer ({source})"] = time.perf_counter() - started
    texts = {t: (a.response.text, a.response.status) if a.response is not None else ("", "missing")
             for t, a in answers.items()}
    used = {t: list(a.response.ptkb_used) if a.response is not None else [] for t, a in answers.items()}
    _same("Experiment.answer", source, _results(setup, said, {t: a.ranking for t, a in answers.items()}, texts, used),
          by_run)


def test_the_api_stage_functions_chained_answer_every_turn_as_apcir_run_does(setup, source, by_run):
    """Door 3b: the stage functions chained (reformulate, retrieve x3, tune for (B), fuse, rerank, respond), the
    PTKB statements ranked by the retrieval encoder, as the config ranks them (``ptkb_encoder``)."""
    started = time.perf_counter()
    with captured_warnings() as said:
        turns = apcir.topics(setup.topics)
        records = apcir.reformulate(turns, f"file:{setup.refs}", out=setup.folder / source / "api-refs.jsonl")
        lists = [apcir.retrieve(records, setup.index, field=name) for name in LIST_NAMES]
        weights: Any = setup.weights
        if source == "tune":
            tuning = apcir.reformulate(apcir.topics(setup.tune_topics), "heuristic")
            tune_levels = {t: r.output.level for t, r in tuning.items() if r.output is not None}
            weights = apcir.tune([apcir.retrieve(tuning, setup.index, field=name) for name in LIST_NAMES],
                                 tune_levels, setup.tune_qrels, step=STEP)
        levels = {t: r.output.level for t, r in records.items() if r.output is not None}
        fused = apcir.fuse(lists, levels, weights)
        reranked = apcir.rerank(fused, records, setup.collection, "cross-encoder", model=str(setup.model),
                                depth=RERANK_DEPTH)
        call: Callable[..., Any] = apcir.respond
        responses = call(turns, records, reranked, setup.collection, "smollm2", base_url=setup.server,
                         cache_dir=str(setup.cache), ptkb_encoder="splade-tiny",
                         out=setup.folder / source / "api-responses.jsonl", **RESPOND)
    SECONDS[f"API stage functions ({source})"] = time.perf_counter() - started
    texts = {t: (r.text, r.status) for t, r in responses.items()}
    used = {t: list(r.ptkb_used) for t, r in responses.items()}
    _same("the API stage functions", source, _results(setup, said, reranked, texts, used), by_run)


def test_the_pyterrier_answer_transformer_answers_every_turn_as_apcir_run_does(setup, source, by_run):
    """Door 4: ``apcir.pyterrier.Answer(config, out=...)`` over ``topics_frame(turns)``: the ranking, the answer
    and (a column the frame must carry) the PTKB provenance."""
    pytest.importorskip("pyterrier")
    from apcir.pyterrier import Answer, topics_frame

    started = time.perf_counter()
    with captured_warnings() as said:
        frame = Answer(_config(setup, source), out=setup.folder / source / "pt")(topics_frame(setup.turns))
    SECONDS[f"PyTerrier Answer ({source})"] = time.perf_counter() - started
    rankings: dict[str, dict[str, float]] = {}
    texts: dict[str, tuple[str, str]] = {}
    used: dict[str, list[str]] | None = {} if "ptkb_used" in frame.columns else None
    for row in frame.to_dict("records"):
        rankings.setdefault(str(row["qid"]), {})[str(row["docno"])] = float(row["score"])
        texts[str(row["qid"])] = (str(row["answer"]), SUBMITTED)
        if used is not None:
            used[str(row["qid"])] = list(row["ptkb_used"])
    _same("PyTerrier Answer", source, _results(setup, said, rankings, texts, used), by_run)


def test_every_prompt_fits_the_window(setup, by_run, source):
    """The later turns carry their history (10-2_15: 14 turns): every prompt apcir run sent, with room for the
    answer, fits the server's window, so no answer is a context failure. Prints the doors' times."""
    from apcir.contract.responses import load_responses

    records = load_responses(setup.folder / source / "run" / "responses.jsonl")
    prompts = {t: r.usage.input_tokens / r.usage.requests for t, r in records.items()
               if r.usage is not None and r.usage.requests}
    longest = max(prompts, key=lambda t: prompts[t], default=None)
    assert longest is not None and prompts[longest] + RESPOND["max_tokens"] <= N_CTX, prompts
    print(f"\nlongest prompt ({source}): {longest}, {prompts[longest]:.0f} tokens; seconds: {json.dumps(SECONDS)}")
