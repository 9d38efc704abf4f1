"""``apcir converse``: apcir as the agent of a live run, one utterance at a time, through the same stages as
``apcir run`` (the same functions: reformulation, retrieval of the three lists, level-weighted fusion, the
response), with a journal that makes a killed run resumable.

Per utterance: the turn is built from the reply (``{topic_id}_{n}``, n the 1-based user turn; the history is
the API's, the user's utterances and apcir's own answers; the PTKB is the reply's ``user_meta.ptkb``, else
``--ptkb``'s statements for the user), reformulated, its three lists retrieved and fused with the level's
weights, answered; the response is fitted to the server's token limit (counted as it counts), the fused
ranking's top passages are sent as citations and the statements the answer used as PTKB provenance.

The journal (``conversation.jsonl``, every line flushed to disk before the next request) records each
utterance received, each answer computed and each answer sent. A second invocation with the same run id
never calls ``run/start`` again: it asks ``run/session`` where the conversation stands, resends an answer the
server has not recorded, and answers the next utterance otherwise. LLM answers come from the resumable
reformulation and response files and the cache, so a resumed run repeats no request.

Turn ids: ``{topic_id}_{n}``; when a topic comes back with another user in the same run, its turns are
``{topic_id}-u{user_id}_{n}`` (the qrels judge the first pairing's ids).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apcir.console import note, warn
from apcir.contract.records import HistoryEntry, Run, Turn
from apcir.contract.reformulations import LIST_NAMES, ReformulationRecord, load_reformulations, with_fallbacks
from apcir.contract.responses import load_responses
from apcir.contract.runs import ranking, write_run
from apcir.contract.weights import WeightsFile, load_weights
from apcir.errors import ApcirError
from apcir.experiment.config import ExperimentConfig
from apcir.live.client import LiveError, LostReply, SimulationClient
from apcir.live.protocol import HistoryMessage, Utterance, fit_tokens

JOURNAL = "conversation.jsonl"
RUN_FILE = "live.run"


_FIRST_PERSON = re.compile(r"^(I|I'm|I am|I've|I have|My|We|Our)\b")


def first_person_facts(utterance: str) -> list[str]:
    """The statements about the user an utterance makes (its first-person sentences that are not questions): the
    persona memory of an offline reformulator, which has no model to ask."""
    sentences = re.split(r"(?<=[.!?])\s+", utterance.strip())
    return [s if s.endswith((".", "!")) else s + "." for s in (x.strip() for x in sentences)
            if s and not s.endswith("?") and _FIRST_PERSON.match(s)]


class SessionUnknown(ApcirError):
    """The server cannot say where the conversation stands (no ``run/session``): nothing is sent blindly."""

    exit_code = 4


@dataclass
class Answer:
    turn_id: str
    response: str
    citations: dict[str, float]
    ptkb_provenance: list[str]
    trimmed: bool
    seconds: dict[str, float]


@dataclass
class ConverseSummary:
    run_id: str
    answered: int = 0
    resent: int = 0
    trimmed: int = 0
    topics: list[str] = field(default_factory=list)
    seconds: dict[str, list[float]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """``turn:stage`` of the optional stages skipped to keep a turn within its budget."""

    def latency(self) -> dict[str, dict[str, float]]:
        """p50/p95/max seconds per stage and for the whole turn."""
        out = {}
        for stage, values in self.seconds.items():
            ordered = sorted(values)
            p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
            out[stage] = {"p50": statistics.median(ordered), "p95": p95, "max": ordered[-1]}
        return out


class Journal:
    """``conversation.jsonl``: appended and flushed to disk line by line."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: list[dict[str, Any]] = []
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    self.entries.append(json.loads(line))
                except json.JSONDecodeError:  # a torn last line of a killed run
                    break

    def add(self, event: str, **data: Any) -> None:
        entry = {"event": event, "time": time.time(), **data}
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.entries.append(entry)

    def last(self, event: str) -> dict[str, Any] | None:
        return next((e for e in reversed(self.entries) if e["event"] == event), None)


def _key(reply: Utterance) -> tuple[str, str, int]:
    """Where a reply stands: topic, user and how many messages came before it."""
    return reply.topic_id, reply.user_id, len(reply.history)


class Converse:
    """One live run: the config's stages for one turn at a time, the client, the journal."""

    def __init__(self, config: ExperimentConfig, client: SimulationClient, out: Path, *, run_id: str,
                 description: str = "apcir", track_persona: bool = False, debug: bool = False,
                 ptkb: dict[str, dict[str, str]] | None = None, progress: bool = False,
                 turn_budget: float | None = None):
        if config.fusion.weights.source == "cv":
            raise ApcirError("a live run cannot cross-validate its weights: set [fusion.weights] source = \"file\" "
                             "(a weights.json) or \"tune\" (tuned on other topics before the first utterance)")
        self.config, self.client, self.out = config, client, Path(out)
        self.run_id, self.description, self.track_persona, self.debug = run_id, description, track_persona, debug
        self.ptkb = ptkb or {}
        self.progress = progress
        self.turn_budget = turn_budget
        self._rerankers: dict[str, Any] = {}
        self._skipped: list[str] = []
        self._current_user = ""
        from apcir.io import check_writable_dir

        check_writable_dir(self.out, "run directory")  # one line, before anything is asked or sent
        self.out.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(self.out / JOURNAL)
        self.summary = ConverseSummary(run_id)
        self.run: Run = {}
        self.pairs: dict[str, str] = {}  # topic -> the first user it came with
        self._backend: Any = None
        self._index: Path | None = None
        self._weights: WeightsFile | None = None

    # ---- what the stages need, once ---------------------------------------------------------------------
    def prepare(self) -> None:
        from apcir.retrieval.stage import ensure_index, open_backend

        index, _ = ensure_index(self.config.retrieval, progress=self.progress)
        self._index = index
        self._backend = open_backend(self.config.retrieval, index)
        weights = self.config.fusion.weights
        if weights.source == "file":
            if not weights.file:
                raise ApcirError("fusion.weights.source = 'file' needs fusion.weights.file (a weights.json)")
            self._weights = load_weights(weights.file)
        else:  # tune on other topics before the first utterance: the tuning leg of apcir run
            from rich.console import Console

            from apcir.experiment.pipeline import Experiment

            exp = Experiment(self.config.model_copy(update={"output_dir": str(self.out / "tuning")}),
                             Console(quiet=True), self.progress)
            exp.index()
            self._weights = exp.tune(index, self.config.fusion.baseline_names())["apcir"]
        if self.journal.path.exists():
            for entry in self.journal.entries:
                if entry["event"] == "answer":
                    self.run[entry["turn_id"]] = dict(entry["ranking"])
            for entry in self.journal.entries:
                if entry["event"] == "utterance":
                    self.pairs.setdefault(entry["reply"]["topic_id"], entry["reply"]["user_id"])

    # ---- one turn -----------------------------------------------------------------------------------------
    def turn_of(self, reply: Utterance) -> Turn:
        first_user = self.pairs.setdefault(reply.topic_id, reply.user_id)
        conversation = reply.topic_id if first_user == reply.user_id else f"{reply.topic_id}-u{reply.user_id}"
        asked = [m.content for m in reply.history if m.role == "user"]
        answered = [m.content for m in reply.history if m.role != "user"]
        history = [HistoryEntry(turn_id=f"{conversation}_{i}", utterance=u, response=answered[i - 1]
                                if i - 1 < len(answered) else "") for i, u in enumerate(asked, 1)]
        ptkb = reply.ptkb() or self.ptkb.get(reply.user_id, {})
        if not ptkb and self.track_persona:  # what the user said about themself so far, in this run
            ptkb = {str(i): s for i, s in enumerate(self.memory(reply.user_id), 1)}
        return Turn(turn_id=f"{conversation}_{len(asked) + 1}", conversation_id=conversation,
                    turn_number=len(asked) + 1, utterance=reply.utterance, ptkb=ptkb, history=history)

    def answer(self, turn: Turn) -> Answer:
        """The same functions as ``apcir run``, for one turn."""
        from apcir.fusion.linear import fuse_linear
        from apcir.reformulation.stage import reformulate
        from apcir.responses.job import build_jobs, needed_passages
        from apcir.responses.ptkb import rank_statements, similarity_for
        from apcir.responses.stage import respond
        from apcir.retrieval.registry import BACKENDS
        from apcir.retrieval.stage import list_queries, passage_texts_for, retrieve_lists

        config, seconds = self.config, {}
        started = time.perf_counter()
        options = config.reformulator
        asks_model = not self._offline_reformulator(options.method)
        if self.track_persona and asks_model:  # the persona's new statements: a field of the same LLM answer
            options = options.model_copy(update={"prompt": options.prompt.model_copy(update={"track_persona": True})})
        reformulate([turn], options, self.out / "reformulations.jsonl", progress=False)
        records: dict[str, ReformulationRecord] = with_fallbacks(
            {k: v for k, v in load_reformulations(self.out / "reformulations.jsonl").items()
             if k == turn.turn_id}, [turn])
        seconds["reformulate"] = time.perf_counter() - started
        mark = time.perf_counter()
        queries = {name: list_queries(records, name) for name in LIST_NAMES}
        lists = retrieve_lists(self._backend, queries, {n: self.out / f"{n}.run" for n in LIST_NAMES},
                               dict.fromkeys(LIST_NAMES, "live"), k=config.retrieval.k, progress=False,
                               write=lambda *_: None)
        seconds["retrieve"] = time.perf_counter() - mark
        mark = time.perf_counter()
        assert self._weights is not None
        output = records[turn.turn_id].output
        level = output.level if output is not None else "a"
        if self.track_persona:
            learned = list(output.persona) if asks_model and output is not None else first_person_facts(
                turn.utterance)
            self.remember(self._current_user, learned)
        fused = fuse_linear([lists[n] for n in LIST_NAMES], {turn.turn_id: level}, self._weights,
                            config.fusion.norm, config.fusion.depth, missing_level="a")
        seconds["fuse"] = time.perf_counter() - mark
        assert self._index is not None
        store = passage_texts_for(config.retrieval, self._index)
        skipped: list[str] = []
        for settings in [r for r in config.rerank if r.submit]:  # the re-ranked run is what a submission holds
            if self._over_budget(started, "rerank"):
                skipped.append(f"rerank:{settings.label}")
                continue
            mark = time.perf_counter()
            fused = self._rerank(settings, turn, records, fused, store)
            seconds["rerank"] = time.perf_counter() - mark
        mark = time.perf_counter()
        texts = store.texts(needed_passages(fused, [turn], config.respond.top_k)) if store is not None else {}
        encoder = config.retrieval.encoder if config.retrieval.uses_encoder else None
        ptkb = rank_statements([turn], records, similarity_for(encoder, BACKENDS.get(config.retrieval.backend).encoder,
                                                               config.retrieval.dtype))
        jobs = build_jobs([turn], records, fused, texts, ptkb, config.respond.top_k)
        responder = config.respond
        if not self._offline(responder.responder) and self._over_budget(started, "respond"):
            skipped.append(f"respond:{responder.responder}")  # the extractive responder answers instead
            from apcir.responses.registry import EXTRACTIVE

            responder = responder.model_validate({"responder": EXTRACTIVE, "top_k": responder.top_k,
                                                  "max_words": responder.max_words})
        respond(jobs, responder, self.out / ("responses.jsonl" if responder is config.respond
                                             else "responses-fallback.jsonl"), progress=False)
        record = load_responses(self.out / ("responses.jsonl" if responder is config.respond
                                            else "responses-fallback.jsonl")).get(turn.turn_id)
        seconds["respond"] = time.perf_counter() - mark
        self._skipped = skipped
        text = record.text if record is not None and record.status == "ok" else ""
        if not text:
            text = output.response if output is not None else ""
        response, trimmed = fit_tokens(text, self.client.protocol.response_tokens)
        used = (record.ptkb_used if record is not None else []) or (
            list(output.ptkb_used) if output is not None else [])
        provenance = [turn.ptkb[s] for s in used if s in turn.ptkb]  # the current user's statements only
        top = ranking(fused.get(turn.turn_id, {}), self.client.protocol.citations)
        seconds["turn"] = time.perf_counter() - started
        self.run[turn.turn_id] = fused.get(turn.turn_id, {})
        return Answer(turn.turn_id, response, dict(top), provenance, trimmed, seconds)

    def _rerank(self, settings: Any, turn: Turn, records: dict[str, ReformulationRecord], fused: Run,
                store: Any) -> Run:
        """The fused ranking re-ranked by one ``[[rerank]]`` entry (its model loaded once for the run)."""
        from apcir.reranking.stage import candidate_ids, load_reranker, record_queries, rerank_run

        if settings.label not in self._rerankers:
            self._rerankers[settings.label] = load_reranker(settings)
        texts = store.texts(candidate_ids(fused, settings.depth)) if store is not None else {}
        result, summary = rerank_run(fused, record_queries(records, settings.field), texts, settings,
                                     reranker=self._rerankers[settings.label], progress=False)
        return result

    # ---- the persona memory (--track-persona) -------------------------------------------------------------
    def _memory_file(self, user_id: str) -> Path:
        return self.out / "persona" / f"{user_id}.json"

    def memory(self, user_id: str) -> list[str]:
        """The statements about ``user_id`` learned so far in this run (kept in the run directory)."""
        path = self._memory_file(user_id)
        return list(json.loads(path.read_text(encoding="utf-8"))) if path.exists() else []

    def remember(self, user_id: str, statements: list[str]) -> None:
        from apcir.io import write_json

        known = self.memory(user_id)
        seen = {s.casefold() for s in known}
        new = [s for s in statements if s.strip() and s.casefold() not in seen]
        if new:
            self._memory_file(user_id).parent.mkdir(parents=True, exist_ok=True)
            write_json(self._memory_file(user_id), known + new)

    @staticmethod
    def _offline_reformulator(method: str) -> bool:
        from apcir.reformulation.registry import is_offline

        return is_offline(method)

    @staticmethod
    def _offline(responder: str) -> bool:
        from apcir.responses.registry import responder_for

        return responder_for(responder).offline

    def _over_budget(self, started: float, stage: str) -> bool:
        """Whether running ``stage`` now would take the turn over ``--turn-budget`` (its time on earlier turns as
        the estimate; with none yet, it runs)."""
        if self.turn_budget is None:
            return False
        before = self.summary.seconds.get(stage)
        expected = statistics.median(before) if before else 0.0
        return time.perf_counter() - started + expected > self.turn_budget

    # ---- the conversation ---------------------------------------------------------------------------------
    def _opening(self) -> Utterance:
        """The first utterance (run/start), or, resuming, where the conversation stands (run/session)."""
        if self.journal.last("start") is None:
            self.journal.add("start", run_id=self.run_id)  # before the request: never two run/start
            reply = self.client.start(self.run_id, self.description, track_persona=self.track_persona,
                                      debug=self.debug)
            self.journal.add("utterance", reply=reply.model_dump(mode="json"))
            return reply
        return self._where_now()

    def _where_now(self) -> Utterance:
        """The server's current utterance (``run/session``). Right after a session ended it has none (500), and
        after the run's last words none at all (428): the run's status and the journal then say which closing
        words are current."""
        try:
            return self.client.session(self.run_id)
        except LiveError as exc:
            if exc.status in (404, 405):
                raise SessionUnknown("the server cannot say where the run stands (no run/session): stopping, "
                                     "nothing sent") from None
            if exc.status not in (428, 500):
                raise
            status = exc.status
        completed = str(self.client.status(self.run_id).get("status", "")) == "completed"
        last = self.journal.last("utterance")
        if last is None or (status == 428 and not completed):
            raise SessionUnknown("the server has no active run of this id and the journal cannot say where it "
                                 "stands: stopping, nothing sent")
        previous = Utterance.model_validate(last["reply"])
        history = list(previous.history)
        if not previous.last_response_of_session:  # its answer was recorded: the user's closing words are current
            answered = self._answer_for(previous)
            history += [HistoryMessage(role="user", content=previous.utterance),
                        HistoryMessage(role="assistant", content=answered.response if answered else "")]
        return previous.model_copy(update={"utterance": "", "last_response_of_session": True,
                                           "last_response_of_run": completed, "history": history})

    def play(self) -> ConverseSummary:
        self.prepare()
        reply = self._opening()
        while True:
            last = self.journal.last("utterance")
            if last is None or _key(Utterance.model_validate(last["reply"])) != _key(reply):
                self.journal.add("utterance", reply=reply.model_dump(mode="json"))
            if reply.last_response_of_session:
                if reply.last_response_of_run:
                    self.journal.add("end")
                    break
                reply = self._send(reply, Answer("", "", {}, [], False, {}))  # the closing words: ignored
                continue
            done = self._answer_for(reply)
            if done is not None:
                self.summary.resent += 1
            answer = done or self._compute(reply)
            reply = self._send(reply, answer)
        self._write_outputs()
        return self.summary

    def _answer_for(self, reply: Utterance) -> Answer | None:
        """An answer already computed for this utterance (sent or not): it is sent again, never recomputed."""
        key = _key(reply)
        for entry in reversed(self.journal.entries):
            if entry["event"] == "answer" and tuple(entry["key"]) == key:
                return Answer(entry["turn_id"], entry["response"], entry["citations"], entry["provenance"],
                              entry["trimmed"], entry["seconds"])
        return None

    def _compute(self, reply: Utterance) -> Answer:
        self._current_user = reply.user_id
        turn = self.turn_of(reply)
        answer = self.answer(turn)
        ranked = dict(ranking(self.run.get(turn.turn_id, {}), self.config.fusion.depth))
        skipped = self._skipped
        self.journal.add("answer", key=list(_key(reply)), turn_id=answer.turn_id, response=answer.response,
                         citations=answer.citations, provenance=answer.ptkb_provenance, trimmed=answer.trimmed,
                         seconds=answer.seconds, ranking=ranked, skipped=skipped)
        if skipped:
            warn(f"turn {answer.turn_id}: over the turn budget, skipped {', '.join(skipped)} (said in the journal)")
            self.summary.skipped.extend(f"{answer.turn_id}:{s}" for s in skipped)
        if answer.trimmed:
            note(f"turn {answer.turn_id}: the response was cut to {self.client.protocol.response_tokens} tokens "
                 "at a sentence end (said in the journal)")
        self.summary.answered += 1
        self.summary.trimmed += answer.trimmed
        for stage, value in answer.seconds.items():
            self.summary.seconds.setdefault(stage, []).append(value)
        if reply.topic_id not in self.summary.topics:
            self.summary.topics.append(reply.topic_id)
        return answer

    def _send(self, reply: Utterance, answer: Answer) -> Utterance:
        try:
            following = self.client.send(self.run_id, answer.response, answer.citations, answer.ptkb_provenance,
                                         debug=self.debug)
        except LostReply:
            warn("the reply to an answer was lost: asking the server where the run stands before sending again")
            following = self._where_now()
            if _key(following) == _key(reply):
                return self._send(reply, answer)  # not recorded: the same answer again
        self.journal.add("sent", turn_id=answer.turn_id, key=list(_key(reply)))
        return following

    def _write_outputs(self) -> None:
        write_run({t: hits for t, hits in self.run.items() if hits}, self.out / RUN_FILE, tag=self.run_id,
                  depth=self.config.fusion.depth)
