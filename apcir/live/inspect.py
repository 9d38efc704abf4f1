"""The run inspector's page for live run directories of ``apcir converse`` (``apcir inspect LIVE_DIR``).

The page is :mod:`apcir.evaluation.inspector`'s, with the data of a live run: per answered turn (the journal's
order), the utterance and the history the server sent, the level and reformulations (``reformulations.jsonl``),
the fused top 10 the journal kept (the citations sent are its top passages), the response as sent, with the
passages the responder gave it (``responses.jsonl``), and the simulated user's verdict on it: the rubric the
user pursued, its try, and the user's 0-5 score (:mod:`apcir.live.verdicts`: from ``dump.jsonl``, else the
journal's replies). Reading a live directory is live knowledge (the journal), so it lives here, above the
inspector, which it calls; the inspector's own reading of ``apcir run`` directories is unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from apcir.contract.reformulations import load_reformulations
from apcir.contract.responses import load_responses
from apcir.contract.runs import ranking
from apcir.errors import ApcirError
from apcir.evaluation.inspector import TOP, passage_texts, trimmed, write_page
from apcir.io import iter_jsonl
from apcir.live.protocol import Utterance
from apcir.live.verdicts import JOURNAL, THRESHOLD, RunVerdicts, read_live, rubric_key

SYSTEM = "live"
"""The one ranking of a live run: the fused one, whose top passages were sent as citations."""


def is_live_dir(folder: Path) -> bool:
    """A live run directory of ``apcir converse`` (its journal), not one of ``apcir run`` (config.json)."""
    return (folder / JOURNAL).exists() and not (folder / "config.json").exists()


def _journal(folder: Path) -> tuple[dict[str, Utterance], dict[str, dict[str, Any]], list[str]]:
    """The journal's utterances and latest answers by turn id, and the turn ids in the order answered."""
    replies: dict[tuple[str, str, int], Utterance] = {}
    answers: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for _, entry in iter_jsonl(folder / JOURNAL, "journal", skip_malformed=True):
        if entry.get("event") == "utterance":
            reply = Utterance.model_validate(entry["reply"])
            replies.setdefault((reply.topic_id, reply.user_id, len(reply.history)), reply)
        elif entry.get("event") == "answer" and entry.get("turn_id"):
            answers[entry["turn_id"]] = entry
            if entry["turn_id"] not in order:
                order.append(entry["turn_id"])
    by_turn = {turn: replies[key] for turn, entry in answers.items()
               if (key := tuple(entry.get("key") or ())) in replies}
    return by_turn, answers, order


def _verdicts(verdicts: RunVerdicts, threshold: int) -> dict[str, dict[str, Any]]:
    """Each answered turn's verdict: rubric, score, which try of that rubric, whether it covered it."""
    out: dict[str, dict[str, Any]] = {}
    for topic in verdicts.topics:
        tries: dict[str, int] = {}
        for answer in topic.answers:
            key = rubric_key(answer.rubric) if answer.rubric is not None else ""
            tries[key] = tries.get(key, 0) + 1
            out[f"{answer.topic}_{answer.number}"] = {
                "rubric": answer.rubric, "score": answer.score, "try": tries[key] if answer.rubric else None,
                "covered": answer.score is not None and answer.score > threshold, "threshold": threshold}
    return out


def gather_live(run_dirs: list[Path], rubrics: dict[str, list[str]], *, config: dict[str, Any] | None = None,
                threshold: int = THRESHOLD) -> dict[str, Any]:
    """The page's data for live run directories (``config``: the experiment's, for the passages' texts)."""
    if not run_dirs:
        raise ApcirError("give at least one live run directory")
    runs: list[dict[str, Any]] = []
    turns: dict[str, dict[str, Any]] = {}
    passages: dict[str, int] = {}
    for folder in run_dirs:
        if not is_live_dir(folder):
            raise ApcirError(f"not a live run directory of apcir converse (no {JOURNAL})", path=folder)
        name = folder.name if all(r["name"] != folder.name for r in runs) else str(folder)
        verdicts = read_live(folder, rubrics, name)
        judged = _verdicts(verdicts, threshold) if verdicts.scored else {}
        replies, answers, order = _journal(folder)
        records = load_reformulations(folder / "reformulations.jsonl") \
            if (folder / "reformulations.jsonl").exists() else {}
        responses = load_responses(folder / "responses.jsonl") if (folder / "responses.jsonl").exists() else {}
        runs.append({"name": name, "measures": [], "systems": [SYSTEM], "labels": {SYSTEM: "live (fused)"},
                     "live": True, "scored": verdicts.scored, "source": verdicts.source})
        for turn_id in order:
            answer, reply = answers[turn_id], replies.get(turn_id)
            earlier = reply.earlier() if reply is not None else []
            asked = [m.content for m in earlier if m.role == "user"]
            answered = [m.content for m in earlier if m.role != "user"]
            entry = turns.setdefault(turn_id, {
                "id": turn_id, "conversation": turn_id.rpartition("_")[0],
                "utterance": reply.utterance if reply is not None else "",
                "history": [[u, answered[i] if i < len(answered) else ""] for i, u in enumerate(asked)],
                "ptkb": (reply.ptkb() or {}) if reply is not None else {}, "judged": False, "runs": {}})
            record = records.get(turn_id)
            output = record.output if record is not None else None
            top: list[list[Any]] = [[passages.setdefault(pid, len(passages)), round(score, 4)]
                   for pid, score in ranking(answer.get("ranking") or {}, TOP)]
            given = responses.get(turn_id)
            cited = [passages.setdefault(p, len(passages)) for p in (given.citations if given else [])]
            entry["runs"][name] = {
                "level": output.level if output else None,
                "rewrites": ({"reasoning": output.reasoning, "rewrite": output.rewrite, "response": output.response,
                              "third_rewrite": output.third_rewrite, "third_response": output.third_response}
                             if output else {}),
                "used": list(output.ptkb_used) if output else [], "error": None, "lists": {}, "fused": top,
                "reranked": {}, "systems": {SYSTEM: top}, "metrics": {},
                "response": {"text": answer.get("response", ""), "status": "sent", "error": None,
                             "passages": [passages.setdefault(p, len(passages)) for p in
                                          (given.passages if given else [])] or [int(i) for i, _ in top],
                             "cited": cited, "ptkb_used": list(given.ptkb_used) if given else [],
                             "sent": len(answer.get("citations") or {})},
                "verdict": judged.get(turn_id), "scored": verdicts.scored}
    ids = {index: pid for pid, index in passages.items()}
    texts = passage_texts(config, ids.values()) if config else {}
    return {"runs": runs, "turns": list(turns.values()), "passages": [ids[i] for i in range(len(ids))],
            "texts": {index: trimmed(texts[pid]) for index, pid in sorted(ids.items()) if pid in texts},
            "grades": {}}


def write_live_inspector(run_dirs: list[Path], out: Path, rubrics: dict[str, list[str]], *,
                         config: dict[str, Any] | None = None, threshold: int = THRESHOLD) -> Path:
    """Write the inspector's page for live run directories to ``out``; returns it."""
    return write_page(gather_live(run_dirs, rubrics, config=config, threshold=threshold), out)
