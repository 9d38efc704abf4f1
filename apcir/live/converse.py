"""``apcir converse``: apcir as the agent of a live run, one utterance at a time, through the per-turn pipeline
(:mod:`apcir.experiment.turns`: reformulation, retrieval of the three lists, level-weighted fusion, the submitted
re-rankers, the response; the same stage functions as ``apcir run``), with a journal that makes a killed run
resumable. This module keeps only what is live: the turn built from the server's reply, recovery, the turn
budget and the fitting of an answer to the server's limits; the journal is :mod:`apcir.live.journal`, the check
of the server's record against it :mod:`apcir.live.record`.

Per utterance: the turn is built from the reply (``{topic_id}_{n}``, n the 1-based user turn, the current
utterance being the last entry of the server's ``history``; the earlier turns are the entries before it, the
user's utterances and apcir's own answers; the PTKB is the reply's ``user_meta.ptkb`` where a server sends one,
else ``--ptkb``'s statements for the user), reformulated, its three lists retrieved and fused with the level's
weights, answered; the response is fitted to the server's token limit (counted as it counts), the fused
ranking's top passages are sent as citations and the statements the answer used as PTKB provenance.

The token limit in force is the year's (2025: 250; 2026: 512), or ``--response-tokens``. A server that refuses an
answer for its length (422) and names a lower limit ("exceeds limit of N tokens") is followed: the limit is
journaled (a ``limit`` line), the answer cut to it at a sentence end and sent again, once, within the same
command, and every later answer (a resumed command's too: the journal is read back) is cut to it. A refusal that
names no lower limit, or a second refusal of the fitted answer, stops the command (exit 7), the answer kept.

One command at a time per run directory: it holds the directory's lock (``.apcir.lock``, as ``apcir run`` does)
while it plays; a second one is refused at once, before it reads the journal or asks the server anything.

The journal (``conversation.jsonl``, every line flushed to disk before the next request) records the intent to
start, the start once the server accepted it, each utterance received, each answer computed and each answer
sent. A refused start leaves nothing that the next command would take for a run. A second invocation with the
same run id asks ``run/session`` (``debug/session`` for a debug run) where the conversation stands: it resends
an answer the server has not recorded (fitted again to the limit in force, so that one refused for its length
goes through), and answers the next utterance otherwise. With no session open (the server answers 500) the
run is between topics or finished: ``run/status`` says which (a debug run has no status: the next ``continue``
says it). LLM answers come from the resumable reformulation and response files and the cache, so a resumed run
repeats no request. At the end (run mode) the server's record (``run/dump``, saved as ``dump.jsonl``) is
compared with the journal, answer by answer.

Turn ids: ``{topic_id}_{n}``; when a topic comes back with another user in the same run, its turns are
``{topic_id}-u{user_id}_{n}`` (the qrels judge the first pairing's ids).
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apcir.console import note, warn
from apcir.contract.records import HistoryEntry, Run, Turn
from apcir.contract.runs import ranking, write_run
from apcir.errors import ApcirError
from apcir.experiment.config import ExperimentConfig
from apcir.experiment.turns import TurnPipeline
from apcir.live.client import SimulationClient
from apcir.live.errors import AnswerRefused, LiveError, LostReply, SessionUnknown
from apcir.live.journal import JOURNAL, Answer, Journal, utterance_key
from apcir.live.protocol import HistoryMessage, Utterance, count_tokens, fit_tokens, named_limit
from apcir.live.record import DUMP_FILE, RecordCheck, check_record

RUN_FILE = "live.run"
__all__ = ["Converse", "ConverseSummary", "RecordCheck", "SessionUnknown", "JOURNAL", "RUN_FILE", "DUMP_FILE"]


_FIRST_PERSON = re.compile(r"^(I|I'm|I am|I've|I have|My|We|Our)\b")


def first_person_facts(utterance: str) -> list[str]:
    """The statements about the user an utterance makes (its first-person sentences that are not questions): the
    persona memory of an offline reformulator, which has no model to ask."""
    sentences = re.split(r"(?<=[.!?])\s+", utterance.strip())
    return [s if s.endswith((".", "!")) else s + "." for s in (x.strip() for x in sentences)
            if s and not s.endswith("?") and _FIRST_PERSON.match(s)]


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
    refitted: int = 0
    """Journaled answers cut again to the limit in force before they were sent."""
    record: RecordCheck | None = None
    """The server's record against the journal (run mode; None for a debug run, which has no dump)."""
    already_complete: bool = False
    """The journal had ended the run before this command: nothing was left to answer."""
    earlier: int = 0
    """Utterances answered by earlier commands in this directory (the journal's distinct answers)."""
    earlier_topics: list[str] = field(default_factory=list)
    response_tokens: int = 0
    """The response limit in force at the end (the year's, ``--response-tokens``, or the server's learned one)."""
    learned_limit: int | None = None
    """The lower limit a server named when it refused an answer for its length (in this command or an earlier
    one in this directory: the journal's), which the answers were then cut to; None when none was."""

    def latency(self) -> dict[str, dict[str, float]]:
        """p50/p95/max seconds per stage and for the whole turn."""
        out = {}
        for stage, values in self.seconds.items():
            ordered = sorted(values)
            p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
            out[stage] = {"p50": statistics.median(ordered), "p95": p95, "max": ordered[-1]}
        return out


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
        self._skipped: list[str] = []
        self._current_user = ""
        from apcir.io import check_writable_dir

        check_writable_dir(self.out, "run directory")  # one line, before anything is asked or sent
        self.out.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(self.out / JOURNAL)
        self.summary = ConverseSummary(run_id, response_tokens=client.protocol.response_tokens)
        self._held = False
        self.run: Run = {}
        self.pairs: dict[str, str] = {}  # topic -> the first user it came with
        self.pipeline: TurnPipeline

    # ---- one writer per run directory ---------------------------------------------------------------------
    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the run directory's lock (``.apcir.lock``, :func:`apcir.io.exclusive`, as ``apcir run`` does); a
        second holder is refused at once in one line, naming the first. :meth:`play` takes it; a caller that asks
        the server something first (``apcir converse --debug``: the budget) takes it around both. The journal is
        read again once held (another command may have written it meanwhile)."""
        if self._held:
            yield
            return
        from apcir.contract.layout import RunLayout
        from apcir.io import exclusive

        with exclusive(RunLayout(self.out).lock, f"run directory {self.out}"):
            self._held = True
            try:
                self.journal = Journal(self.journal.path)
                yield
            finally:
                self._held = False

    @property
    def response_tokens(self) -> int:
        """The response limit in force: the year's (or ``--response-tokens``), or a lower one the server named."""
        return self.summary.response_tokens

    def _learn(self, limit: int, turn_id: str, detail: str) -> None:
        """The server named a lower limit: journaled (read back by a resumed command), in force from now on."""
        self.journal.add("limit", response_tokens=limit, turn_id=turn_id, detail=detail,
                         was=self.summary.response_tokens)
        self.summary.response_tokens = limit
        self.summary.learned_limit = limit

    # ---- what the stages need, once ---------------------------------------------------------------------
    def prepare(self) -> None:
        from apcir.experiment.turns import open_turn_pipeline

        options = self.config.reformulator
        prompt = getattr(options.options, "prompt", None)  # a model's reformulator's own key
        if self.track_persona and prompt is not None and not self._offline_reformulator(options.method):
            # the persona's new statements: a field of the same LLM answer
            own = options.options.model_copy(update={"prompt": prompt.model_copy(update={"track_persona": True})})
            options = options.model_copy(update={"options": own})
        self.pipeline = open_turn_pipeline(self.config, self.out, progress=self.progress, reformulator=options)
        if self.journal.path.exists():
            for entry in self.journal.entries:
                if entry["event"] == "answer":
                    self.run[entry["turn_id"]] = dict(entry["ranking"])
            for entry in self.journal.entries:
                if entry["event"] == "utterance":
                    self.pairs.setdefault(entry["reply"]["topic_id"], entry["reply"]["user_id"])
            learned = self.journal.last("limit")
            if learned is not None and int(learned["response_tokens"]) < self.summary.response_tokens:
                self.summary.response_tokens = self.summary.learned_limit = int(learned["response_tokens"])
                note(f"run {self.run_id}: responses are cut to {self.response_tokens} tokens, the limit the server "
                     f"named when it refused an answer to {learned.get('turn_id') or 'an utterance'} (in "
                     f"{self.journal.path.name})")

    # ---- one turn -----------------------------------------------------------------------------------------
    def turn_of(self, reply: Utterance) -> Turn:
        first_user = self.pairs.setdefault(reply.topic_id, reply.user_id)
        conversation = reply.topic_id if first_user == reply.user_id else f"{reply.topic_id}-u{reply.user_id}"
        earlier = reply.earlier()  # the server's history ends with the current utterance
        asked = [m.content for m in earlier if m.role == "user"]
        answered = [m.content for m in earlier if m.role != "user"]
        history = [HistoryEntry(turn_id=f"{conversation}_{i}", utterance=u, response=answered[i - 1]
                                if i - 1 < len(answered) else "") for i, u in enumerate(asked, 1)]
        ptkb = reply.ptkb() or self.ptkb.get(reply.user_id, {})
        if not ptkb and self.track_persona:  # what the user said about themself so far, in this run
            ptkb = {str(i): s for i, s in enumerate(self.memory(reply.user_id), 1)}
        return Turn(turn_id=f"{conversation}_{len(asked) + 1}", conversation_id=conversation,
                    turn_number=len(asked) + 1, utterance=reply.utterance, ptkb=ptkb, history=history)

    def answer(self, turn: Turn) -> Answer:
        """The turn through the per-turn pipeline (:mod:`apcir.experiment.turns`), its optional stages skipped when
        they would overrun the turn budget; the answer fitted to the server's limits."""
        done = self.pipeline.answer([turn], skip=self._over_budget)[turn.turn_id]
        if self.track_persona:
            output = done.record.output
            asks_model = not self._offline_reformulator(self.config.reformulator.method)
            learned = list(output.persona) if asks_model and output is not None else first_person_facts(
                turn.utterance)
            self.remember(self._current_user, learned)
        self._skipped = done.skipped
        response, trimmed = fit_tokens(done.text, self.response_tokens)
        provenance = [turn.ptkb[s] for s in done.ptkb_used if s in turn.ptkb]  # the current user's statements only
        top = ranking(done.ranking, self.client.protocol.citations)
        self.run[turn.turn_id] = done.ranking
        return Answer(turn.turn_id, response, dict(top), provenance, trimmed, done.seconds)

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
        started = self.journal.last("start")
        if started is not None:
            if started.get("run_id") != self.run_id or bool(started.get("debug")) != self.debug:
                was = f"{'debug ' if started.get('debug') else ''}run {started.get('run_id')}"
                raise ApcirError(f"{self.out} holds the journal of {was}: resume it with the same --run-id "
                                 f"{'and --debug ' if started.get('debug') else ''}or use another directory")
            return self._where_now()
        tried = any(e["event"] == "starting" and e.get("run_id") == self.run_id and bool(e.get("debug")) == self.debug
                    for e in self.journal.entries)
        self.journal.add("starting", run_id=self.run_id, debug=self.debug)  # the intent: not yet a run
        try:
            reply = self.client.start(self.run_id, self.description, track_persona=self.track_persona,
                                      debug=self.debug)
        except LiveError as exc:
            if exc.status != 412 or not tried:
                raise
            reply = self._adopt(exc)  # an earlier start from here may have reached the server, its reply lost
        self.journal.add("start", run_id=self.run_id, debug=self.debug)  # accepted: from now on, a run to resume
        self.journal.add("utterance", reply=reply.model_dump(mode="json"))
        return reply

    def _adopt(self, taken: LiveError) -> Utterance:
        """After a 412, when this directory tried to start the same run before: the run is this directory's own
        (its start reached the server, the reply was lost) when the server's session is still at the run's first
        utterance, with nothing answered; else the 412 stands."""
        try:
            current = self.client.session(self.run_id, debug=self.debug)
            if len(current.history) != 1:
                raise taken
            if not self.debug and len(self.client.status(self.run_id).done_topics) != 1:
                raise taken
        except LiveError:
            raise taken from None
        note(f"run {self.run_id}: an earlier run/start from {self.out} reached the server (its reply was lost); "
             "going on with that run")
        return current

    def _where_now(self) -> Utterance:
        """The server's current utterance (``run/session``; ``debug/session`` for a debug run). With no session
        open (500) the last answer was recorded and the user's closing words are current: the run is between
        topics, or finished, which ``run/status`` says (a debug run has no status: the next ``continue`` says
        it). A run the server does not hold (428) is finished when its status says ``complete``."""
        try:
            return self.client.session(self.run_id, debug=self.debug)
        except LiveError as exc:
            if exc.status in (404, 405):
                raise SessionUnknown("the server cannot say where the run stands (no run/session): stopping, "
                                     "nothing sent") from None
            if exc.status not in (428, 500):
                raise
            answered = exc.status
        last = self.journal.last("utterance")
        if last is None:
            raise SessionUnknown("the server has no open session of this run and the journal holds no utterance: "
                                 "stopping, nothing sent")
        previous = Utterance.model_validate(last["reply"])
        if self.debug:
            if answered == 428:
                raise SessionUnknown(f"the server holds no debug run {self.run_id} (restarted?): a debug run "
                                     "cannot be resumed then; start another with a new --run-id")
            return self._closing(previous, finished=previous.last_response_of_session
                                 and previous.last_response_of_run)
        try:
            status = self.client.status(self.run_id)
        except LiveError as exc:
            if exc.status == 404:
                raise SessionUnknown(f"the server does not know run {self.run_id} (run/status: 404): stopping, "
                                     "nothing sent") from None
            raise
        if answered == 428 and not status.complete:
            raise SessionUnknown(f"the server holds no active run {self.run_id} and its status is "
                                 f"{status.status!r}: stopping, nothing sent")
        return self._closing(previous, finished=status.complete)

    def _closing(self, previous: Utterance, *, finished: bool) -> Utterance:
        """The user's closing words after ``previous`` (whose answer the server recorded), as the journal knows
        them: the text itself may not have arrived."""
        history = list(previous.history)
        if not previous.last_response_of_session:
            done = self.journal.answer_for(previous)
            history += [HistoryMessage(role="assistant", content=done[0].response if done else ""),
                        HistoryMessage(role="user", content="")]
        return previous.model_copy(update={"utterance": "" if not previous.last_response_of_session
                                           else previous.utterance, "last_response_of_session": True,
                                           "last_response_of_run": finished, "history": history})

    def play(self) -> ConverseSummary:
        """The run, from its start or from where the journal and the server say it stands, to its end (the outputs
        written, the server's record checked); under the run directory's lock (:meth:`exclusive`)."""
        with self.exclusive():
            return self._play()

    def _play(self) -> ConverseSummary:
        self.prepare()
        self._count_earlier()
        reply = self._opening()
        while True:
            last = self.journal.last("utterance")
            if last is None or utterance_key(Utterance.model_validate(last["reply"])) != utterance_key(reply):
                self.journal.add("utterance", reply=reply.model_dump(mode="json"))
            if reply.last_response_of_session:
                if reply.last_response_of_run:
                    self.journal.add("end")
                    break
                reply = self._send(reply, Answer("", "", {}, [], False, {}))  # the closing words: ignored
                continue
            done = self.journal.answer_for(reply)
            if done is not None:
                self.summary.resent += 1
                answer = self._refit(*done)
            else:
                answer = self._compute(reply)
            reply = self._send(reply, answer)
        self._write_outputs()
        if not self.debug:  # a debug run has no dump
            self.summary.record = self.check_record()
        return self.summary

    def _count_earlier(self) -> None:
        """What the journal says was answered before this command, and whether it had ended the run."""
        keys = {tuple(e["key"]) for e in self.journal.entries if e["event"] == "answer"}
        self.summary.earlier = len(keys)
        self.summary.earlier_topics = list(dict.fromkeys(str(key[0]) for key in keys))
        self.summary.already_complete = self.journal.last("end") is not None

    def _refit(self, answer: Answer, entry: dict[str, Any]) -> Answer:
        """A journaled answer fitted to the limit in force (a refused one was over it): the cut one is journaled
        before it is sent."""
        limit = self.response_tokens
        response, cut = fit_tokens(answer.response, limit)
        if not cut:
            return answer
        fitted = Answer(answer.turn_id, response, answer.citations, answer.ptkb_provenance, True, answer.seconds)
        self.journal.add("answer", **{**{k: v for k, v in entry.items() if k not in ("event", "time")},
                                      "response": response, "trimmed": True, "refitted": limit})
        note(f"turn {answer.turn_id}: the journaled response was cut to {limit} tokens at a sentence end before "
             "it was sent again (said in the journal)")
        self.summary.refitted += 1
        return fitted

    def _compute(self, reply: Utterance) -> Answer:
        self._current_user = reply.user_id
        turn = self.turn_of(reply)
        answer = self.answer(turn)
        ranked = dict(ranking(self.run.get(turn.turn_id, {}), self.config.fusion.depth))
        skipped = self._skipped
        self.journal.add("answer", key=list(utterance_key(reply)), turn_id=answer.turn_id, response=answer.response,
                         citations=answer.citations, provenance=answer.ptkb_provenance, trimmed=answer.trimmed,
                         seconds=answer.seconds, ranking=ranked, skipped=skipped)
        if skipped:
            warn(f"turn {answer.turn_id}: over the turn budget, skipped {', '.join(skipped)} (said in the journal)")
            self.summary.skipped.extend(f"{answer.turn_id}:{s}" for s in skipped)
        if answer.trimmed:
            note(f"turn {answer.turn_id}: the response was cut to {self.response_tokens} tokens "
                 "at a sentence end (said in the journal)")
        self.summary.answered += 1
        self.summary.trimmed += answer.trimmed
        for stage, value in answer.seconds.items():
            self.summary.seconds.setdefault(stage, []).append(value)
        if reply.topic_id not in self.summary.topics:
            self.summary.topics.append(reply.topic_id)
        return answer

    def _send(self, reply: Utterance, answer: Answer, *, refitted: bool = False) -> Utterance:
        try:
            following = self.client.send(self.run_id, answer.response, answer.citations, answer.ptkb_provenance,
                                         debug=self.debug)
        except LostReply:
            warn("the reply to an answer was lost: asking the server where the run stands before sending again")
            following = self._where_now()
            if utterance_key(following) == utterance_key(reply) and not following.last_response_of_session:
                return self._send(reply, answer, refitted=refitted)  # not recorded: the same answer again
            # else recorded; or, for the closing words' empty answer, still between topics (the loop sends it again)
        except LiveError as exc:
            if not answer.turn_id and exc.status == 400 and "No more open topics" in exc.detail:
                following = self._closing(reply, finished=True)  # the closing words were the run's last
            elif exc.status == 422 and answer.turn_id:
                return self._refused(reply, answer, exc, refitted=refitted)
            else:
                raise
        self.journal.add("sent", turn_id=answer.turn_id, key=list(utterance_key(reply)))
        return following

    def _refused(self, reply: Utterance, answer: Answer, refusal: LiveError, *, refitted: bool) -> Utterance:
        """A 422 for an answer. When it names a limit below the one in force (and this answer was not already
        fitted after a refusal), the limit is learned, the journaled answer cut to it and sent again; otherwise
        the command stops (exit 7), the answer kept in the journal."""
        limit = named_limit(refusal.detail)
        where = f"it stays in {self.journal.path.name}"
        if refitted:
            raise AnswerRefused(f"the server refused the answer to {answer.turn_id} again after it was cut to its "
                                f"limit of {self.response_tokens} tokens (422: {refusal.detail}); {where}, "
                                "nothing more is sent") from None
        if limit is None or limit >= self.response_tokens:
            named = ("names no limit" if limit is None else
                     f"names {limit} tokens, not below the {self.response_tokens} in force (this answer has "
                     f"{count_tokens(answer.response)} as apcir counts)")
            raise AnswerRefused(
                f"the server refused the answer to {answer.turn_id} (422: {refusal.detail}), and its refusal "
                f"{named}; {where}: the same command with a lower --response-tokens cuts it to that limit and "
                "sends it") from None
        self._learn(limit, answer.turn_id, refusal.detail)
        note(f"turn {answer.turn_id}: the server refused the answer for its length and named its limit, "
             f"{limit} tokens (422: {refusal.detail}); it holds for this run from now on (said in the journal)")
        done = self.journal.answer_for(reply)
        if done is None:  # pragma: no cover - every answer is journaled before it is sent
            raise AnswerRefused(f"the answer to {answer.turn_id} is not in the journal: nothing more is sent")
        tokens = count_tokens(done[0].response)
        if tokens <= limit:  # cutting changes nothing: the server counts otherwise
            raise AnswerRefused(f"the server refused the answer to {answer.turn_id} for a limit of {limit} tokens "
                                f"(422: {refusal.detail}), but it has {tokens} as apcir counts them (spaCy's blank "
                                f"English tokenizer); {where}: the same command with a lower --response-tokens "
                                "cuts it to that limit and sends it") from None
        return self._send(reply, self._refit(*done), refitted=True)

    # ---- the server's record -------------------------------------------------------------------------------
    def check_record(self) -> RecordCheck:
        """The server's record (``run/dump``, saved as ``dump.jsonl``) against the journal
        (:func:`apcir.live.record.check_record`)."""
        return check_record(self.client, self.run_id, self.out, self.journal, self.track_persona)

    def _write_outputs(self) -> None:
        write_run({t: hits for t, hits in self.run.items() if hits}, self.out / RUN_FILE, tag=self.run_id,
                  depth=self.config.fusion.depth)
