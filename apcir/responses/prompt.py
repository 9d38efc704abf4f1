"""The response prompt: one chat request per turn, answered with a JSON object.

Messages: a system message (the task, the citation rule, the word budget, the
JSON contract) and one user message with the profile statements (best first,
with their ids), the conversation so far (utterances and the canonical
responses iKAT gives), the current utterance, the personalised rewrite and
level, and the top passages numbered [1]..[k]. The answer is
``{"response": "... [1] ... [3].", "ptkb_used": ["2"]}``; it is checked:
every citation must be one of the given numbers, at least one passage must be
cited, the response must fit the word budget, and the statement ids must be in
the profile. A failed check gets one repair request (see :mod:`apcir.llm.jobs`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from apcir.contract.responses import cited_numbers
from apcir.llm.answers import InvalidAnswer, extract_json
from apcir.responses.job import ResponseJob
from apcir.responses.text import count_words, normalise_citations

Message = dict[str, str]
SCHEMA_NAME = "apcir_response"

LEVELS = {
    "a": "a (the profile is not needed for this question)",
    "b": "b (the profile is a bonus: use the statements that make the answer better)",
    "c": "c (the profile is indispensable: the answer must respect the relevant statements)",
}


def system_message(max_words: int) -> str:
    return (
        "You are a conversational search assistant. Answer the user's current utterance in the conversation, "
        "for this user, from the numbered passages given, and from nothing else.\n\n"
        "Rules:\n"
        "- Ground every statement in the passages and cite them inline with their numbers in square brackets, "
        "e.g. [1] or [2][4], right after what they support. Cite only numbers that were given; cite at least one "
        "passage.\n"
        "- Personalise the answer with the user's profile statements that matter for this question (the level "
        "says how much the profile matters); never contradict them.\n"
        f"- At most {max_words} words in all (citations count as words). Be direct; no preamble.\n\n"
        'Reply with a JSON object only: {"response": "<the answer with inline citations>", '
        '"ptkb_used": ["<id of each profile statement the answer relies on>"]}. ptkb_used may be empty.'
    )


def user_message(job: ResponseJob) -> str:
    turn = job.turn
    parts = ["Profile statements of the user (most relevant first):"]
    parts += [f"({sid}) {text}" for sid, text in job.statements] or ["(none)"]
    parts += ["", "Conversation so far:"]
    if turn.history:
        for entry in turn.history:
            parts += [f"User: {entry.utterance}", f"System: {entry.response}"]
    else:
        parts.append("(this is the first turn)")
    parts += [
        "",
        f"Current utterance: {turn.utterance}",
        f"Stand-alone personalised rewrite: {job.rewrite}",
        f"Personalisation level: {LEVELS.get(job.level, job.level)}",
    ]
    if not job.retrieval:
        return "\n".join(parts)
    parts += ["", "Passages:"]
    parts += [f"[{n}] {text or '(no text available)'}" for n, (_, text) in enumerate(job.passages, start=1)]
    return "\n".join(parts)


@dataclass(frozen=True)
class ResponsePrompt:
    turn_id: str
    messages: list[Message]

    @property
    def hash(self) -> str:
        text = json.dumps(self.messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


COT_RULE = ("\n- Before answering, reason briefly over the user's profile: which statements and aspects matter for "
            "this question. Put that reasoning in \"reasoning\" and the answer in \"response\".")


def without_profile(job: ResponseJob) -> ResponseJob:
    """The job as the no-personalisation baseline sees it: no profile, the non-personalised rewrite."""
    from dataclasses import replace

    return replace(job, statements=[], rewrite=job.neutral_rewrite or job.turn.utterance, level="a")


NO_PASSAGES = ("Answer the user's question for this user from what you know (no passages are given), without "
               "citations.")


def build_prompt(job: ResponseJob, max_words: int, personalisation: str = "in-context") -> ResponsePrompt:
    system = system_message(max_words)
    if not job.retrieval:
        system = system.replace(system[:system.index("\n\nRules:")], "You are a conversational assistant. "
                                + NO_PASSAGES, 1)
        system = system.replace(
            "- Ground every statement in the passages and cite them inline with their numbers in square brackets, "
            "e.g. [1] or [2][4], right after what they support. Cite only numbers that were given; cite at least one "
            "passage.\n", "").replace("<the answer with inline citations>", "<the answer>").replace(
            " (citations count as words)", "")
    if personalisation == "cot":
        system = system.replace("\n\nReply with a JSON object only: {", COT_RULE + "\n\nReply with a JSON object only: "
                                "{\"reasoning\": \"<your reasoning>\", ", 1)
    shown = without_profile(job) if personalisation == "none" else job
    return ResponsePrompt(job.turn.turn_id, [
        {"role": "system", "content": system},
        {"role": "user", "content": user_message(shown)},
    ])


def output_schema(cot: bool = False) -> dict[str, Any]:
    """JSON schema of the answer (strict-mode compatible); with chain of thought, a ``reasoning`` first."""
    properties: dict[str, Any] = {"reasoning": {"type": "string"}} if cot else {}
    properties |= {"response": {"type": "string"}, "ptkb_used": {"type": "array", "items": {"type": "string"}}}
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


GRAMMAR_SENTENCES = 5


def grammar_schema(job: ResponseJob, max_words: int, cot: bool = False) -> dict[str, Any]:
    """:func:`output_schema` with what constrained decoding (llama.cpp) can enforce beyond strict mode: a response
    of sentences that each end with a citation [n] of a given passage (and hold no other bracket), at most
    :data:`GRAMMAR_SENTENCES` of them, and statement ids of the profile only. A small model that would ramble
    past ``max_tokens`` without citing anything is made to cite at its first full stop."""
    if not job.retrieval:  # no passages: plain sentences, no citation
        schema = output_schema(cot)
        word = '[^\\[\\]"\\\\\\n\\r\\t.!? ]+'
        schema["properties"]["response"] = {"type": "string", "pattern": f"^(({word} ){{0,39}}{word}[.!?] ?){{1,5}}$"}
        return _profile_ids(schema, job)
    numbers = "|".join(str(n) for n in range(1, len(job.passages) + 1)) or "1"
    cite = f"\\[({numbers})\\]"
    word = '[^\\[\\]"\\\\\\n\\r\\t.!? ]+'  # no bracket but a citation's, nothing JSON must escape, no stop
    sentences = max(1, min(GRAMMAR_SENTENCES, max_words // 20))
    per_sentence = max(1, max_words // sentences - 2)  # its words, and its citation, within the word budget
    pattern = f"^(({word} ){{0,{per_sentence - 1}}}{word}[.!?] ?{cite} ?){{1,{sentences}}}$"
    schema = output_schema(cot)
    schema["properties"]["response"] = {"type": "string", "pattern": pattern}
    if cot:  # a short reasoning, so that a small model reaches the answer within max_tokens
        schema["properties"]["reasoning"] = {"type": "string", "pattern": f"^({word} ){{0,29}}{word}$"}
    return _profile_ids(schema, job)


def _profile_ids(schema: dict[str, Any], job: ResponseJob) -> dict[str, Any]:
    """``ptkb_used`` restricted to the profile's statement ids (when it has any)."""
    if job.turn.ptkb:
        schema["properties"]["ptkb_used"] = {"type": "array", "items": {"type": "string", "enum": sorted(job.turn.ptkb)},
                                             "maxItems": len(job.turn.ptkb)}
    return schema


@dataclass(frozen=True)
class ParsedResponse:
    text: str
    numbers: list[int]
    """Cited passage numbers, ascending."""
    ptkb_used: list[str]


def parse_answer(raw: str, job: ResponseJob, max_words: int) -> ParsedResponse:
    """Parse and check an answer; raises :class:`InvalidAnswer` naming every problem found."""
    data = extract_json(raw)
    if not isinstance(data, dict):
        raise InvalidAnswer(f"expected a JSON object, got {type(data).__name__}")
    text = data.get("response")
    if not isinstance(text, str) or not text.strip():
        raise InvalidAnswer("'response' must be a non-empty string")
    used = data.get("ptkb_used", [])
    if not isinstance(used, list):
        raise InvalidAnswer("'ptkb_used' must be a list of statement ids")
    text = normalise_citations(text.strip())
    numbers = cited_numbers(text)
    problems = []
    outside = [n for n in numbers if not 1 <= n <= len(job.passages)]
    if outside:
        problems.append(f"citation(s) {', '.join(f'[{n}]' for n in outside)} point at no passage "
                        f"(only [1]..[{len(job.passages)}] were given)")
    if not job.retrieval:
        if numbers:
            problems.append("no passages were given: the response must not cite any")
    elif not numbers:
        problems.append("the response cites no passage")
    words = count_words(text)
    if words > max_words:
        problems.append(f"the response has {words} words, more than the {max_words} allowed")
    ids = [str(x).strip() for x in used]
    unknown = [sid for sid in ids if sid not in job.turn.ptkb]
    if unknown:
        problems.append(f"ptkb_used names statements {unknown} that are not in the profile "
                        f"(ids {', '.join(job.turn.ptkb) or 'none'})")
    if problems:
        raise InvalidAnswer("; ".join(problems))
    return ParsedResponse(text, sorted(numbers), list(dict.fromkeys(ids)))


def repair_messages(prompt: ResponsePrompt, raw: str, problem: str) -> list[Message]:
    """The follow-up asking the model to fix an answer that failed a check."""
    return [
        *prompt.messages,
        {"role": "assistant", "content": raw},
        {"role": "user", "content": f"Your answer could not be used: {problem}. Reply again with only the JSON "
                                    'object {"response": ..., "ptkb_used": [...]}, following every rule.'},
    ]
