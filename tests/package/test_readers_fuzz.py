"""Every reader, fed mutated and random input: a valid record or apcir's user error naming the source, nothing else.

Mutations start from a valid file of each kind (delete a key, change a value's
type, repeat an element, cut the text, flip bytes) and are mixed with random
text and bytes. Any exception other than :class:`ApcirError` (or, for an LLM
answer, the answer's own ``InvalidAnswer``) fails the test.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apcir import datasets
from apcir.errors import ApcirError

# APCIR_FUZZ_EXAMPLES=2000 (and a random seed) for a longer hunt; the suite's run is short and repeatable.
_EXAMPLES = int(os.environ.get("APCIR_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                derandomize=_EXAMPLES <= 60)
PID = "clueweb22-en0000-00-00001:1"

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(allow_nan=True),
                      st.text(max_size=12), st.sampled_from(["", "a", "1", "9-1_3", "9-1-3", PID, "NaN"]))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                              st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                          max_leaves=6)


def mutate(data: st.DataObject, value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` with a few random changes somewhere inside."""
    choice = data.draw(st.integers(0, 9))
    if choice == 0 or depth > 6:
        return data.draw(json_value)
    if isinstance(value, dict) and value:
        key = data.draw(st.sampled_from(sorted(value, key=str)))
        copy = dict(value)
        action = data.draw(st.integers(0, 3))
        if action == 0:
            del copy[key]
        elif action == 1:
            copy[key] = data.draw(json_value)
        else:
            copy[key] = mutate(data, value[key], depth + 1)
        return copy
    if isinstance(value, list) and value:
        index = data.draw(st.integers(0, len(value) - 1))
        copy = list(value)
        action = data.draw(st.integers(0, 3))
        if action == 0:
            copy.pop(index)
        elif action == 1:
            copy.append(copy[index])
        else:
            copy[index] = mutate(data, value[index], depth + 1)
        return copy
    return data.draw(json_value)


def text_variant(data: st.DataObject, text: str) -> bytes:
    """``text`` cut, with a line repeated, a field changed, or random bytes spliced in."""
    raw = text.encode("utf-8")
    action = data.draw(st.integers(0, 5))
    if action == 0:
        return raw[: data.draw(st.integers(0, len(raw)))]
    if action == 1:
        return data.draw(st.binary(max_size=200))
    if action == 2:
        at = data.draw(st.integers(0, len(raw)))
        return raw[:at] + data.draw(st.binary(min_size=1, max_size=8)) + raw[at:]
    lines = text.splitlines(keepends=True) or [""]
    index = data.draw(st.integers(0, len(lines) - 1))
    if action == 3:
        lines.insert(index, lines[index])
    else:
        words = lines[index].split()
        if words:
            words[data.draw(st.integers(0, len(words) - 1))] = data.draw(
                st.sampled_from(["", "x", "-1", "1e309", "nan", "9-1-3", "two", "\t", "a b"]))
        lines[index] = " ".join(words) + "\n"
    return "".join(lines).encode("utf-8")


def check(reader: Callable[[Path], Any], content: bytes, suffix: str, *, names_source: bool = True) -> None:
    """``reader`` on ``content`` returns, or raises ApcirError naming the file."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"input{suffix}"
        path.write_bytes(content)
        try:
            reader(path)
        except ApcirError as exc:
            if names_source:
                assert path.name in str(exc), f"the error does not name the file: {exc}"


def json_bytes(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode("utf-8")


# ---- the readers ------------------------------------------------------------------------------------
TOPICS = json.loads((datasets.topics_path("ikat23-test")).read_text())[:2]
TOPICS_2025 = json.loads((datasets.topics_path("ikat25-test")).read_text())[:1]


@FUZZ
@given(st.data())
def test_topics(data):
    base = data.draw(st.sampled_from([TOPICS, TOPICS_2025]))
    content = json_bytes(mutate(data, base)) if data.draw(st.booleans()) else text_variant(data, json.dumps(base))
    check(datasets.load_topics, content, ".json")


QRELS = "10-1_1 0 clueweb22-en0000-00-00001:1 2\n10-1_1 0 clueweb22-en0000-00-00002:1 0\n10-1_2 Q0 x 4\n"


@FUZZ
@given(st.data())
def test_qrels(data):
    check(datasets.load_qrels, text_variant(data, QRELS), ".qrels")


RUN = f"10-1_1 Q0 {PID} 1 2.5 t\n10-1_1 Q0 b 2 1.0 t\n10-1_2 Q0 {PID} 1 0.5 t\n"


@FUZZ
@given(st.data())
def test_runs(data):
    from apcir.contract.runs import read_run_file

    check(read_run_file, text_variant(data, RUN), ".run")


COLLECTION = [{"id": "a:1", "contents": "tea"}, {"doc_id": "d", "passage_id": 2, "passage_text": "coffee"}]


@FUZZ
@given(st.data())
def test_collections(data):
    from apcir.retrieval.shards import iter_shard

    rows = mutate(data, COLLECTION)
    content = "".join(json.dumps(r) + "\n" for r in rows) if isinstance(rows, list) else json.dumps(rows)
    raw = text_variant(data, content) if data.draw(st.booleans()) else content.encode()
    check(lambda p: list(datasets.iter_collection(p)), raw, ".jsonl")
    check(lambda p: list(iter_shard(p, 0, 1)), raw, ".jsonl")


CONFIG = {"name": "x", "topics": "ikat23-test", "reformulator": {"method": "heuristic", "prompt": {"cot": False}},
          "retrieval": {"backend": "embedded", "k": 10}, "fusion": {"norm": "minmax", "weights": {"source": "cv"}},
          "evaluation": {"qrels": "ikat23-test", "measures": ["paper"]}, "export": {"format": "ikat24"}}


@FUZZ
@given(st.data())
def test_configs(data):
    import tomllib

    import yaml

    from apcir.experiment.config import load_config

    value = mutate(data, CONFIG)
    if data.draw(st.booleans()):
        content = yaml.safe_dump(value).encode() if isinstance(value, dict) else json_bytes(value)
        check(load_config, content, ".yaml")
    else:
        text = "\n".join(f"{k} = {json.dumps(v)}" for k, v in value.items() if not isinstance(v, dict)) \
            if isinstance(value, dict) else "x"
        content = text_variant(data, text)
        try:
            tomllib.loads(content.decode("utf-8", "replace"))
        except tomllib.TOMLDecodeError:
            pass
        check(load_config, content, ".toml")


WEIGHTS = {"step": 0.5, "divisions": 2, "objective": ["MRR"], "levels": {lv: {"weights": [0.5, 0.5]} for lv in "abc"},
           "all_turns": {"weights": [0.5, 0.5]}}


@FUZZ
@given(st.data())
def test_weights(data):
    from apcir.contract.weights import load_weights

    check(load_weights, json_bytes(mutate(data, WEIGHTS)), ".json")


LEVELS_TSV = "turn_id\tlevel\n10-1_1\ta\n10-1_2\tc\n"


@FUZZ
@given(st.data())
def test_levels(data):
    from apcir.contract.levels import load_levels

    check(load_levels, text_variant(data, LEVELS_TSV), ".tsv")


RECORD = {"turn_id": "10-1_1", "model": "m", "status": "ok", "output": {
    "reasoning": "r", "level": "b", "rewrite": "q", "response": "r", "third_rewrite": "q2", "third_response": "r2",
    "ptkb_used": ["1"]}}


@FUZZ
@given(st.data())
def test_reformulations(data):
    from apcir.contract.reformulations import load_reformulations
    from apcir.reformulation.file import read_fields

    rows = [mutate(data, RECORD), RECORD]
    content = "".join(json.dumps(r) + "\n" for r in rows)
    check(load_reformulations, content.encode(), ".jsonl")
    check(lambda p: read_fields(p, {}), content.encode(), ".jsonl")
    check(lambda p: read_fields(p, {}), text_variant(data, "10-1_1\trewrite\tresponse\n10-1-2\tq\n"), ".tsv")


@FUZZ
@given(st.data())
def test_queries(data):
    from apcir.retrieval.queries import load_queries

    check(lambda p: load_queries(p), text_variant(data, "10-1_1\tquery\n10-1_2\tq\tresponse\n"), ".tsv")
    check(lambda p: load_queries(p, "rewrite"), json_bytes(mutate(data, RECORD)), ".jsonl")


TURNS = [t for t in datasets.topics("ikat24-test") if t.conversation_id == "0"]


@pytest.fixture(scope="module")
def submissions():
    from apcir.contract.reformulations import ReformulationOutput, ReformulationRecord
    from apcir.submission.common import SubmissionInputs
    from apcir.submission.stage import build_submission

    run = {t.turn_id: {PID: 2.0, "clueweb22-en0000-00-00002:1": 1.0} for t in TURNS}
    output = ReformulationOutput(reasoning="", level="b", rewrite="q", response="r", third_rewrite="q",
                                 third_response="r", ptkb_used=["1"])
    records = {t.turn_id: ReformulationRecord(turn_id=t.turn_id, model="m", output=output) for t in TURNS}
    inputs = SubmissionInputs(run=run, turns=TURNS, run_name="x", reformulations=records, passages={PID: "t"})
    return {fmt: build_submission(inputs, fmt) for fmt in ("ikat23", "ikat24", "ikat25")}


@FUZZ
@given(data=st.data())
def test_submissions(data, submissions):
    from apcir.submission.stage import detect_format, validate_submission

    fmt = data.draw(st.sampled_from(sorted(submissions)))
    value = mutate(data, submissions[fmt])
    if isinstance(value, list) and fmt == "ikat25":
        content = "".join(json.dumps(v, allow_nan=True) + "\n" for v in value).encode()
    else:
        content = json_bytes(value)
    forced = data.draw(st.sampled_from([None, fmt]))

    def read(path: Path) -> None:
        problems = validate_submission(path, TURNS, forced)
        assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
        detect_format(path)

    check(read, content, ".jsonl" if fmt == "ikat25" else ".json")


ANSWER = {"reasoning": "r", "level": "b", "rewrite": "q", "response": "r", "third_rewrite": "q2",
          "third_response": "r2", "ptkb_used": ["1"]}


@FUZZ
@given(st.data())
def test_llm_answers(data):
    from apcir.reformulation.prompt import InvalidAnswer, parse_answer

    turn = TURNS[2]
    raw = json.dumps(mutate(data, ANSWER), allow_nan=True)
    if data.draw(st.booleans()):
        raw = text_variant(data, raw).decode("utf-8", "replace")
    try:
        output = parse_answer(raw, turn, cot=data.draw(st.booleans()))
    except InvalidAnswer:
        return
    assert output.rewrite.strip() and output.third_rewrite.strip() and output.level in "abc"
    assert all(sid in turn.ptkb for sid in output.ptkb_used)
    assert not any(isinstance(v, float) and math.isnan(v) for v in output.model_dump().values())
