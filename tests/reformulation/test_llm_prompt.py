"""The reformulation prompt: content, demonstrations never from the same conversation, ablations, parsing."""

from __future__ import annotations

import json

import pytest

from apcir import datasets
from apcir.reformulation.demonstrations import (
    builtin_demonstrations,
    same_conversation,
    select_demonstrations,
)
from apcir.reformulation.prompt import PromptOptions, build_prompt, output_schema, parse_answer, prompt_hash


@pytest.fixture(scope="module")
def train():
    return datasets.topics("ikat23-train")


@pytest.fixture(scope="module")
def test23():
    return datasets.topics("ikat23-test")


def _text(prompt) -> str:
    return "\n".join(m["content"] for m in prompt.messages)


def test_prompt_holds_numbered_ptkb_history_and_utterance(test23):
    turn = next(t for t in test23 if len(t.history) >= 3)
    prompt = build_prompt(turn)
    target = prompt.messages[-1]["content"]
    for sid, statement in turn.ptkb.items():
        assert f"{sid}. {statement}" in target
    for entry in turn.history:
        assert entry.utterance in target and entry.response in target
    assert turn.utterance in target
    assert (
        turn.response not in target
    )  # the turn's own canonical response is the answer searched for
    assert prompt.messages[0]["role"] == "system" and '"ptkb_used"' in prompt.messages[0]["content"]


def test_demonstrations_cover_three_levels_and_are_recorded(test23):
    prompt = build_prompt(test23[0])
    assert len(prompt.demonstrations) == 3
    demos = {d.turn_id: d for d in builtin_demonstrations()}
    assert {demos[t].output.level for t in prompt.demonstrations} == {"a", "b", "c"}
    assert [m["role"] for m in prompt.messages] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    for turn_id in prompt.demonstrations:
        assert (
            json.loads(prompt.messages[2 + 2 * prompt.demonstrations.index(turn_id)]["content"])
            == demos[turn_id].output.model_dump()
        )


def test_no_text_from_demonstrations_of_the_same_conversation(train):
    """Reformulating the train topics themselves: a demonstration never comes from the target's conversation."""
    demo_convs = {d.turn.conversation_id for d in builtin_demonstrations()}
    by_conv: dict[str, list] = {}
    for turn in train:
        by_conv.setdefault(turn.conversation_id, []).append(turn)
    checked = 0
    for turn in train:
        prompt = build_prompt(turn, PromptOptions(demonstrations=6))
        levels = {
            d.output.level for d in builtin_demonstrations() if d.turn_id in prompt.demonstrations
        }
        assert levels == {"a", "b", "c"}, turn.turn_id
        text = _text(prompt)
        for demo_id in prompt.demonstrations:
            demo = next(d for d in builtin_demonstrations() if d.turn_id == demo_id)
            assert not same_conversation(demo.turn, turn)
        # No utterance or response of a later turn of the same conversation (not in the history) may appear.
        for other in by_conv[turn.conversation_id]:
            if other.turn_number > turn.turn_number:
                assert other.utterance not in text, (turn.turn_id, other.turn_id)
                if len(other.response) > 40:
                    assert other.response not in text, (turn.turn_id, other.turn_id)
        if turn.conversation_id in demo_convs:
            checked += 1
    assert checked > 0  # the check above ran on conversations that hold demonstrations


def test_same_topic_other_persona_is_excluded(train):
    """1-1 and 1-2 open with the same utterance: a 1-2 target gets no 1-1 demonstration."""
    target = next(t for t in train if t.turn_id == "1-2_3")
    chosen = select_demonstrations(target, 6)
    assert all(not d.turn_id.startswith("1-1_") for d in chosen)
    assert {d.output.level for d in chosen} == {"a", "b", "c"}


def test_ablation_switches(test23):
    turn = test23[3]
    full = build_prompt(turn)
    no_cot = build_prompt(turn, PromptOptions(cot=False))
    no_examples = build_prompt(turn, PromptOptions(level_examples=False))
    no_demos = build_prompt(turn, PromptOptions(demonstrations=0))
    assert (
        '"reasoning"' in full.messages[0]["content"]
        and '"reasoning"' not in no_cot.messages[0]["content"]
    )
    assert all(
        "reasoning" not in json.loads(m["content"])
        for m in no_cot.messages
        if m["role"] == "assistant"
    )
    assert (
        "reasoning" not in output_schema(False)["properties"]
        and "reasoning" in output_schema(True)["required"]
    )
    assert "Short examples" in full.messages[0]["content"]
    assert "Short examples" not in no_examples.messages[0]["content"]
    assert no_demos.demonstrations == [] and len(no_demos.messages) == 2
    hashes = {p.hash for p in (full, no_cot, no_examples, no_demos)}
    assert len(hashes) == 4 and full.hash == build_prompt(turn).hash == prompt_hash(full.messages)


def test_history_window_and_response_cut(test23):
    turn = next(t for t in test23 if len(t.history) >= 5)
    prompt = build_prompt(turn, PromptOptions(history_turns=2, history_response_chars=50))
    target = prompt.messages[-1]["content"]
    assert turn.history[0].utterance not in target and turn.history[-1].utterance in target
    assert f"(the first {len(turn.history) - 2} turns are omitted)" in target


def _answer(**changes):
    data = {
        "reasoning": "r",
        "level": "c",
        "rewrite": "q",
        "response": "r",
        "third_rewrite": "q u",
        "third_response": "r u",
        "ptkb_used": ["1"],
    }
    data.update(changes)
    return json.dumps(data)


def test_parse_answer_accepts_fences_and_loose_level(test23):
    turn = test23[0]
    assert parse_answer("```json\n" + _answer(level="(C)") + "\n```", turn, True).level == "c"
    assert parse_answer(
        "Sure! " + _answer(ptkb_used=[1]) + " Hope it helps", turn, True
    ).ptkb_used == ["1"]
    no_reasoning = json.loads(_answer())
    no_reasoning.pop("reasoning")
    assert parse_answer(json.dumps(no_reasoning), turn, cot=False).reasoning == ""


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("not json at all", "no JSON object"),
        ("{broken", "no JSON object"),
        (_answer(level="d"), "level"),
        (_answer(rewrite="  "), "rewrite is empty"),
        (_answer(ptkb_used=["99"]), "not in the profile"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_parse_answer_rejects(test23, raw, message):
    with pytest.raises(ValueError, match=message):
        parse_answer(raw, test23[0], True)
