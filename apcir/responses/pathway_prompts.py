"""The prompts, schemas and checks of the Pathways of Thoughts responder (:mod:`apcir.responses.pathways`).

A pathway's state is a chat: the system message (the task, the action definitions of the paper's appendix
A.1), the initial user message (the utterance, the conversation so far, the profile statements numbered by
their ids, the top passages numbered [1]..[k]), then, per step, the choice of an action and its result.
Nothing in the messages names the step budget T, so a pathway's first steps are the same requests
whatever T is (lowering T reuses them from the cache); only the allowed actions of the last step differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from apcir.llm.answers import InvalidAnswer, extract_json
from apcir.responses.job import ResponseJob
from apcir.responses.prompt import ParsedResponse, output_schema, parse_answer, user_message

Message = dict[str, str]

ACTIONS: dict[str, str] = {
    "plan": "outline, in a few numbered steps, how you will answer this user's question",
    "check_personalization": "check which of the user's profile statements matter for this question, and whether "
                             "what you have so far respects them",
    "personalize": "say how the answer should be adapted to this user, naming the ids of the profile statements "
                   "it relies on",
    "reason": "reason step by step about the question with the passages",
    "clarify": "note what is ambiguous in the question and choose the most likely interpretation for this user",
    "summarize": "summarise what the passages say that bears on the question",
    "answer": "write an answer to the user, citing the passages",
    "revise": "improve the last answer: fix what is wrong, missing or not personalised, citing the passages",
    "finalize": "give the final answer to the user, citing the passages; this ends your work",
}
ANSWERING = ("answer", "revise", "finalize")
"""Actions whose result is an answer (checked as the llm responder's: citations, word budget, statement ids)."""


def allowed_actions(step: int, max_actions: int, answered: bool) -> list[str]:
    """The actions allowed at ``step`` (0-based) of a pathway of at most ``max_actions`` steps.

    The first step is plan. Revise needs an earlier answer. The last step allows only answer, revise (after an
    answer) and finalize, so that a model that keeps reasoning still answers. Otherwise: any but plan.
    """
    if step == 0:
        return ["plan"]
    last = step == max_actions - 1
    names = list(ANSWERING) if last else [a for a in ACTIONS if a != "plan"]
    return [a for a in names if a != "revise" or answered]


def system_message(max_words: int) -> str:
    listed = "\n".join(f"- {name}: {text}" for name, text in ACTIONS.items())
    return (
        "You answer a user's question in a conversation, for this user, by working in steps. At each step you "
        "first choose one action among those offered, then perform it. The actions:\n" + listed + "\n\n"
        "An answer (answer, revise, finalize) is grounded in the numbered passages only, cites them inline with "
        "their numbers in square brackets, e.g. [1] or [2][4], right after what they support (cite only numbers "
        f"that were given, at least one), respects the user's profile, and has at most {max_words} words in all."
    )


def initial_messages(job: ResponseJob, statements: Sequence[tuple[str, str]], max_words: int) -> list[Message]:
    """The pathway's initial state (``statements``: the profile it sees, all or a subset)."""
    shown = ResponseJob(turn=job.turn, level=job.level, rewrite=job.rewrite, statements=list(statements),
                        used=job.used, passages=job.passages)
    return [{"role": "system", "content": system_message(max_words)},
            {"role": "user", "content": user_message(shown)}]


def choose_message(allowed: Sequence[str]) -> Message:
    return {"role": "user", "content": "Choose the next action among: " + ", ".join(allowed) + '. Reply with JSON '
                                       'only: {"action": "<one of them>"}.'}


def choose_schema(allowed: Sequence[str]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": ["action"],
            "properties": {"action": {"type": "string", "enum": list(allowed)}}}


def parse_choice(raw: str, allowed: Sequence[str]) -> str:
    data = extract_json(raw)
    action = data.get("action") if isinstance(data, dict) else None
    if not isinstance(action, str) or action.strip() not in allowed:
        raise InvalidAnswer(f"the action must be one of {', '.join(allowed)}; got {action!r}")
    return action.strip()


def perform_message(action: str) -> Message:
    if action in ANSWERING:
        reply = '{"response": "<the answer with inline citations>", "ptkb_used": ["<statement id>", ...]}'
    elif action == "personalize":
        reply = '{"text": "<how to adapt the answer>", "statements": ["<statement id>", ...]}'
    else:
        reply = '{"text": "<the result>"}'
    return {"role": "user", "content": f"Perform {action}: {ACTIONS[action]}. Reply with JSON only: {reply}."}


def perform_schema(action: str, job: ResponseJob) -> dict[str, Any]:
    if action in ANSWERING:
        return output_schema()
    properties: dict[str, Any] = {"text": {"type": "string"}}
    if action == "personalize":
        ids: dict[str, Any] = {"type": "string"}
        if job.turn.ptkb:
            ids["enum"] = sorted(job.turn.ptkb)
        properties["statements"] = {"type": "array", "items": ids}
    return {"type": "object", "additionalProperties": False, "required": list(properties), "properties": properties}


class StepResult:
    """What a performed action gave: its text (as it enters the state), an answer, the statements it named."""

    def __init__(self, text: str, answer: ParsedResponse | None = None, statements: Sequence[str] = ()) -> None:
        self.text = text
        self.answer = answer
        self.statements = list(statements)


def parse_step(raw: str, action: str, job: ResponseJob, max_words: int) -> StepResult:
    if action in ANSWERING:
        answer = parse_answer(raw, job, max_words)
        return StepResult(answer.text, answer, answer.ptkb_used)
    data = extract_json(raw)
    if not isinstance(data, dict) or not isinstance(data.get("text"), str) or not data["text"].strip():
        raise InvalidAnswer('expected {"text": "<non-empty text>"}')
    named: list[str] = []
    if action == "personalize":
        ids = data.get("statements", [])
        if not isinstance(ids, list):
            raise InvalidAnswer("'statements' must be a list of statement ids")
        named = [str(i).strip() for i in ids]
        unknown = [i for i in named if i not in job.turn.ptkb]
        if unknown:
            raise InvalidAnswer(f"statements {unknown} are not in the profile (ids {', '.join(job.turn.ptkb) or 'none'})")
    return StepResult(data["text"].strip(), None, list(dict.fromkeys(named)))


# ---- aggregation -----------------------------------------------------------------------------------------------
def aspects_messages(job: ResponseJob) -> list[Message]:
    statements = "\n".join(f"({sid}) {text}" for sid, text in job.statements) or "(none)"
    return [{"role": "system", "content": "You find what matters to a user in an answer to their question."},
            {"role": "user", "content": f"Question: {job.rewrite}\n\nThe user's profile statements:\n{statements}\n\n"
                                        "List the aspects of an answer that are important to this user, 1 to 6 short "
                                        'phrases. Reply with JSON only: {"aspects": ["...", ...]}.'}]


ASPECTS_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["aspects"],
                  "properties": {"aspects": {"type": "array", "items": {"type": "string"}}}}


def parse_aspects(raw: str) -> list[str]:
    data = extract_json(raw)
    items = data.get("aspects") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(a, str) for a in items):
        raise InvalidAnswer('expected {"aspects": ["...", ...]}')
    aspects = [a.strip() for a in items if a.strip()]
    if not aspects:
        raise InvalidAnswer("give at least one aspect")
    return aspects[:6]


def _candidates(responses: Sequence[str]) -> str:
    return "\n\n".join(f"Candidate {i}: {text}" for i, text in enumerate(responses, start=1))


def mixture_messages(job: ResponseJob, responses: Sequence[str], aspects: Sequence[str],
                     max_words: int) -> list[Message]:
    from apcir.responses.prompt import system_message as answer_system

    user = (user_message(job) + "\n\nAspects important to this user: " + "; ".join(aspects) + "\n\n"
            + _candidates(responses) + "\n\nMerge the candidates into one answer for this user that covers these "
            "aspects, keeping their citations to the passages.")
    return [{"role": "system", "content": answer_system(max_words)}, {"role": "user", "content": user}]


def best_messages(job: ResponseJob, responses: Sequence[str], aspects: Sequence[str]) -> list[Message]:
    user = (f"Question: {job.rewrite}\n\nAspects important to this user: " + "; ".join(aspects) + "\n\n"
            + _candidates(responses) + '\n\nWhich candidate answers this user best? Reply with JSON only: '
            '{"choice": <its number>}.')
    return [{"role": "system", "content": "You choose the best answer for a user."}, {"role": "user", "content": user}]


def best_schema(count: int) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "required": ["choice"],
            "properties": {"choice": {"type": "integer", "enum": list(range(1, count + 1))}}}


def parse_best(raw: str, count: int) -> int:
    data = extract_json(raw)
    choice = data.get("choice") if isinstance(data, dict) else None
    if isinstance(choice, bool) or not isinstance(choice, int) or not 1 <= choice <= count:
        raise InvalidAnswer(f"the choice must be a candidate's number, 1 to {count}; got {choice!r}")
    return choice
