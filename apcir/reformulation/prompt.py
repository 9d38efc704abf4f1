"""The reformulation prompt: one chat request per turn.

Messages: a system message (task, level definitions with short examples, the
JSON contract), then one user/assistant pair per few-shot demonstration, then
the target turn (numbered PTKB, history of utterances and canonical responses,
current utterance). :class:`PromptOptions` holds the paper's ablation
switches: without chain of thought (no ``reasoning`` key is asked for), without
level examples, without demonstrations.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from apcir.contract.records import Turn
from apcir.contract.reformulations import ReformulationOutput
from apcir.llm.answers import InvalidAnswer, extract_json
from apcir.reformulation.demonstrations import Demonstration, select_demonstrations

Message = dict[str, str]


class PromptOptions(BaseModel):
    """What goes into the prompt (the ablation switches of the paper, Fig. 4)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cot: bool = Field(
        default=True, description="ask for a short reasoning before the answer (chain of thought)"
    )
    level_examples: bool = Field(
        default=True, description="illustrate each level with short examples"
    )
    demonstrations: int = Field(
        default=3, ge=0, le=6, description="few-shot demonstrations (0 disables them)"
    )
    history_turns: int | None = Field(
        default=None, ge=0, description="keep only the last N history turns (None: all)"
    )
    history_response_chars: int | None = Field(
        default=None,
        ge=0,
        description="cut each history response to N characters (None: keep whole)",
    )
    track_persona: bool = Field(
        default=False, description="also ask for the statements about the user the utterance reveals (a live run "
        "that keeps a persona memory: apcir converse --track-persona)")

    def snapshot(self) -> dict[str, Any]:
        """The options as records and summaries keep them (``track_persona`` only when on, so that files written
        before it existed still resume)."""
        data = self.model_dump(mode="json")
        if not self.track_persona:
            data.pop("track_persona")
        return data


# --- instructions ------------------------------------------------------------------------------

_TASK = """\
You help a search engine answer a user in a conversation. For the user's current utterance you \
decide how much the user's profile matters, and you write queries a retrieval system can run \
without seeing the conversation.

The profile (PTKB) is a numbered list of statements the user made about themselves. The history \
holds the earlier utterances with the system's answers. The current utterance may depend on the \
history (pronouns, ellipsis, "the first one") and may or may not depend on the profile."""

_LEVELS = """\
Personalisation levels:
(a) not needed: the utterance, made stand-alone with the history, can be answered well without \
the profile; every user would want the same results.
(b) a bonus: a general answer exists, but some profile statements make the results better \
(preferences, circumstances that re-rank good answers).
(c) indispensable: the profile supplies information or a constraint without which the answer is \
wrong or impossible (where the user lives, their health condition, their budget, their degree)."""

_LEVEL_EXAMPLES = """\
Short examples (profile statement -> utterance -> level):
(a) "I like jazz." -> "How long does a passport renewal take?" -> a: the profile is unrelated.
(a) "I am vegetarian." -> "Who invented the printing press?" -> a: a factual question.
(b) "I enjoy photography." -> "What can I do on a weekend in Lisbon?" -> b: any list of sights \
helps; photo spots would help more.
(b) "I have two young children." -> "Which laptop is good for office work?" -> b: the statement \
is only weakly related; general advice works.
(c) "I am a Canadian citizen." -> "Do I need a visa for this trip?" -> c: the answer depends on \
the nationality.
(c) "I am allergic to nuts." -> "Which of these desserts can I eat?" -> c: the allergy decides."""


def _contract(cot: bool, persona: bool = False) -> str:
    keys = []
    if cot:
        keys.append(
            '"reasoning": two to four sentences: what the utterance refers to, which statements matter, why this level'
        )
    keys += [
        '"level": "a", "b" or "c"',
        '"rewrite": the utterance rewritten to stand alone, using the history but NOT the profile',
        '"response": a short plausible answer (2-4 sentences) to "rewrite", without the profile',
        (
            '"third_rewrite": for level a, a second stand-alone rewrite that phrases the need differently; '
            "for levels b and c, the rewrite personalised with the relevant profile statements"
        ),
        '"third_response": a short plausible answer to "third_rewrite"',
        '"ptkb_used": the numbers (as strings) of the profile statements "third_rewrite" used; [] for level a',
    ]
    if persona:
        keys.append('"persona": short first-person facts about the user that the current utterance reveals '
                    '(e.g. "I am vegetarian."), not already in the profile; [] when there are none')
    lines = "\n".join(f"- {k}" for k in keys)
    return (
        "Answer with one JSON object and nothing else, with exactly these keys:\n"
        f"{lines}\n"
        "Write rewrites as natural questions or requests a search engine can take as they are."
    )


def system_message(options: PromptOptions) -> str:
    parts = [_TASK, _LEVELS]
    if options.level_examples:
        parts.append(_LEVEL_EXAMPLES)
    parts.append(_contract(options.cot, options.track_persona))
    return "\n\n".join(parts)


# --- rendering a turn --------------------------------------------------------------------------


def render_turn(
    turn: Turn, *, history_turns: int | None = None, history_response_chars: int | None = None
) -> str:
    """The numbered PTKB, the history and the current utterance of ``turn`` as prompt text."""
    lines = ["User profile (PTKB):"]
    if turn.ptkb:
        lines += [f"{sid}. {text}" for sid, text in turn.ptkb.items()]
    else:
        lines.append("(empty)")
    lines.append("")
    lines.append("Conversation history:")
    history = turn.history
    skipped = 0
    if history_turns is not None and len(history) > history_turns:
        skipped = len(history) - history_turns
        history = history[skipped:]
    if skipped:
        lines.append(f"(the first {skipped} turns are omitted)")
    if not history:
        lines.append("(none: this is the first turn)")
    for number, entry in enumerate(history, start=skipped + 1):
        response = entry.response
        if history_response_chars is not None and len(response) > history_response_chars:
            response = response[:history_response_chars].rstrip() + " ..."
        lines.append(f"Turn {number} user: {entry.utterance}")
        lines.append(f"Turn {number} system: {response or '(no response)'}")
    lines.append("")
    lines.append(f"Current utterance (turn {len(turn.history) + 1}): {turn.utterance}")
    return "\n".join(lines)


# Demonstrations are shown compactly whatever the options say for the target turn.
_DEMO_HISTORY_TURNS = 3
_DEMO_RESPONSE_CHARS = 400


def demonstration_answer(demo: Demonstration, cot: bool) -> str:
    data = demo.output.model_dump()
    if not cot:
        data.pop("reasoning")
    return json.dumps(data, ensure_ascii=False)


@dataclass(frozen=True)
class Prompt:
    """The messages of one turn's request and the demonstrations they contain."""

    turn_id: str
    messages: list[Message]
    demonstrations: list[str] = field(default_factory=list)

    @property
    def hash(self) -> str:
        return prompt_hash(self.messages)

    @property
    def characters(self) -> int:
        return sum(len(m["content"]) for m in self.messages)


def build_prompt(turn: Turn, options: PromptOptions | None = None) -> Prompt:
    """The chat messages asking for ``turn``'s level and reformulations."""
    options = options or PromptOptions()
    messages: list[Message] = [{"role": "system", "content": system_message(options)}]
    demos = select_demonstrations(turn, options.demonstrations)
    for demo in demos:
        shown = render_turn(
            demo.turn,
            history_turns=_DEMO_HISTORY_TURNS,
            history_response_chars=_DEMO_RESPONSE_CHARS,
        )
        messages.append({"role": "user", "content": f"Example.\n\n{shown}"})
        messages.append({"role": "assistant", "content": demonstration_answer(demo, options.cot)})
    target = render_turn(
        turn,
        history_turns=options.history_turns,
        history_response_chars=options.history_response_chars,
    )
    messages.append({"role": "user", "content": target})
    return Prompt(
        turn_id=turn.turn_id, messages=messages, demonstrations=[d.turn_id for d in demos]
    )


KEPT_HISTORY = 2
"""History turns kept while the demonstrations and history responses are cut (dropped only after them)."""


def fit_prompt(turn: Turn, options: PromptOptions, budget: int,
               count: Callable[[list[Message]], int]) -> tuple[Prompt, list[str]]:
    """``turn``'s prompt within ``budget`` tokens (``count`` counts messages), and notes on what was cut.

    The cuts, in order, each only as far as needed: the oldest history turns (down to the last
    :data:`KEPT_HISTORY`), the demonstrations (down to none), the canonical responses of the history
    turns kept, then the last history turns. A prompt still over the budget is returned as it is, with a
    note saying so (the stage then fails the turn without sending it)."""
    prompt = build_prompt(turn, options)
    start = tokens = count(prompt.messages)
    if tokens <= budget:
        return prompt, []
    shown = len(turn.history) if options.history_turns is None else min(len(turn.history), options.history_turns)
    demos = len(prompt.demonstrations)

    def cut(**update: Any) -> None:
        nonlocal options, prompt, tokens
        options = options.model_copy(update=update)
        prompt = build_prompt(turn, options)
        tokens = count(prompt.messages)

    kept = shown
    while tokens > budget and kept > KEPT_HISTORY:
        kept -= 1
        cut(history_turns=kept)
    while tokens > budget and len(prompt.demonstrations) > 0:
        cut(demonstrations=len(prompt.demonstrations) - 1)
    responses_cut = tokens > budget and options.history_response_chars != 0
    if responses_cut:
        cut(history_response_chars=0)
    while tokens > budget and kept > 0:
        kept -= 1
        cut(history_turns=kept)
    notes = [f"prompt fitted to {budget} tokens ({start} -> {tokens})"]
    if kept < shown:
        notes.append(f"cut: the oldest {shown - kept} of {shown} history turns")
    if len(prompt.demonstrations) < demos:
        notes.append(f"cut: {demos - len(prompt.demonstrations)} of {demos} demonstrations")
    if responses_cut:
        notes.append("cut: the canonical responses of the history")
    if tokens > budget:
        notes.append(f"still over the budget after every cut ({tokens} > {budget})")
    return prompt, notes


def repair_messages(prompt: Prompt, raw: str, problem: str, cot: bool, persona: bool = False) -> list[Message]:
    """The follow-up asking the model to fix an answer that did not parse or validate."""
    return [
        *prompt.messages,
        {"role": "assistant", "content": raw},
        {
            "role": "user",
            "content": (
                f"Your answer could not be used: {problem}. Reply again with only the JSON object, "
                "with exactly the keys asked for and no other text.\n\n" + _contract(cot, persona)
            ),
        },
    ]


# --- the JSON contract as a schema -------------------------------------------------------------


def output_schema(cot: bool, persona: bool = False) -> dict[str, Any]:
    """JSON schema of the answer (strict-mode compatible: all keys required, no extras)."""
    properties: dict[str, Any] = {}
    if cot:
        properties["reasoning"] = {"type": "string"}
    properties.update(
        {
            "level": {"type": "string", "enum": ["a", "b", "c"]},
            "rewrite": {"type": "string"},
            "response": {"type": "string"},
            "third_rewrite": {"type": "string"},
            "third_response": {"type": "string"},
            "ptkb_used": {"type": "array", "items": {"type": "string"}},
        }
    )
    if persona:
        properties["persona"] = {"type": "array", "items": {"type": "string"}}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def grammar_schema(cot: bool, turn: Turn, persona: bool = False) -> dict[str, Any]:
    """:func:`output_schema` with what constrained decoding (llama.cpp) can enforce beyond strict mode: texts that
    are not empty (and a reasoning of bounded length), statement ids of this turn's profile only."""
    schema = output_schema(cot, persona)
    properties = schema["properties"]
    for name in ("rewrite", "response", "third_rewrite", "third_response"):
        properties[name] = {"type": "string", "minLength": 3}
    if cot:
        properties["reasoning"] = {"type": "string", "minLength": 1}
    if turn.ptkb:
        properties["ptkb_used"] = {"type": "array", "items": {"type": "string", "enum": sorted(turn.ptkb)},
                                   "maxItems": len(turn.ptkb)}
    return schema


def prompt_hash(messages: list[Message]) -> str:
    """Short content hash of the messages (identifies the exact prompt a record came from)."""
    text = json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def estimate_tokens(text: str) -> int:
    """Token estimate used for prompt sizes: characters / 4, rounded up.

    tiktoken is installed but downloads its encodings on first use, which an
    offline machine cannot do, so the estimate is the usual 4 characters per
    token of English text (GPT-4o's tokenizer is within about 10% of it).
    """
    return (len(text) + 3) // 4


def parse_answer(raw: str, turn: Turn, cot: bool, persona: bool = False) -> ReformulationOutput:
    """Parse and validate an answer; raises :class:`InvalidAnswer` naming what is wrong."""
    data = extract_json(raw)
    if not isinstance(data, dict):
        raise InvalidAnswer(f"expected a JSON object, got {type(data).__name__}")
    if not cot:
        data.setdefault("reasoning", "")
    if isinstance(data.get("ptkb_used"), list):
        data["ptkb_used"] = [str(x).strip() for x in data["ptkb_used"]]
    if not persona:
        data.pop("persona", None)  # not asked for: never kept
    elif isinstance(data.get("persona"), list):
        data["persona"] = [str(x).strip() for x in data["persona"] if str(x).strip()]
    if isinstance(data.get("level"), str):
        data["level"] = data["level"].strip().strip("()").lower()
    try:
        output = ReformulationOutput.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidAnswer(f"{where}: {first['msg']}") from None
    for key in ("rewrite", "third_rewrite"):
        if not getattr(output, key).strip():
            raise InvalidAnswer(f"{key} is empty")
    unknown = [sid for sid in output.ptkb_used if sid not in turn.ptkb]
    if unknown:
        raise InvalidAnswer(f"ptkb_used names statements {unknown} that are not in the profile")
    return output
