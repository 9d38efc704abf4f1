import json

import pytest

from apcir import datasets
from apcir.datasets.collection import load_collection
from apcir.datasets.qrels import load_qrels
from apcir.datasets.topics import load_topics
from apcir.errors import ApcirError


@pytest.mark.parametrize(
    "name, conversations, turns",
    [("ikat23-train", 11, 95), ("ikat23-test", 25, 332), ("ikat24-test", 17, 218), ("ikat25-test", 17, 188)],
)
def test_bundled_topic_counts(name, conversations, turns):
    loaded = datasets.topics(name)
    assert len(loaded) == turns
    assert len({t.conversation_id for t in loaded}) == conversations
    assert len({t.turn_id for t in loaded}) == turns


def test_turn_record_2023():
    turn = {t.turn_id: t for t in datasets.topics("ikat23-test")}["9-1_3"]
    assert turn.conversation_id == "9-1" and turn.turn_number == 3
    assert turn.title == "Finding a diet"
    assert [h.turn_id for h in turn.history] == ["9-1_1", "9-1_2"]
    assert turn.history[0].utterance == "Can you help me find a diet for myself?"
    assert turn.history[0].response.startswith("Sure, these diets fit")
    assert list(turn.ptkb)[:3] == ["1", "2", "3"] and turn.ptkb["5"] == "I'm vegetarian."
    assert all(p in turn.ptkb for p in turn.ptkb_provenance)
    assert turn.manual_rewrite and turn.response


def test_turn_record_2024_integer_conversation_number():
    turns = datasets.topics("ikat24-test")
    assert turns[0].turn_id == "0_1" and turns[0].conversation_id == "0"
    assert turns[0].response_provenance == ["clueweb22-en0017-23-13494:0"]


def test_turn_record_2025_maps_ptkb_texts_to_positions():
    turns = {t.turn_id: t for t in datasets.topics("ikat25-test")}
    turn = turns["1-1_3"]
    assert turn.utterance  # from user_utterance
    assert turn.ptkb_provenance, "relevant_ptkbs texts map to 1-based statement ids"
    for statement_id in turn.ptkb_provenance:
        assert turn.ptkb[statement_id]
    assert turns["1-1_4"].response_provenance[0] == "clueweb22-en0034-09-00524:2"


@pytest.mark.parametrize("name", ["ikat23-test", "ikat24-test", "ikat25-test"])
def test_history_is_exactly_the_earlier_turns_of_the_conversation(name):
    turns = datasets.topics(name)
    for turn in turns:
        earlier = [t for t in turns if t.conversation_id == turn.conversation_id and t.turn_number < turn.turn_number]
        assert [h.turn_id for h in turn.history] == [t.turn_id for t in earlier]
        assert [h.response for h in turn.history] == [t.response for t in earlier]


@pytest.mark.parametrize("name, judged", [("ikat23-test", 176), ("ikat24-test", 116), ("ikat23-test-ptkb", 98)])
def test_bundled_qrels_counts(name, judged):
    assert len(datasets.qrels(name)) == judged


def test_qrels_any_whitespace_and_dashed_ids(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text("9-1-3\t0  p1 2\n9-1_3 0 p2\t0\n\n0_8 Q0 p3 4\n")
    assert load_qrels(path) == {"9-1_3": {"p1": 2, "p2": 0}, "0_8": {"p3": 4}}


def test_qrels_with_three_fields_names_file_and_line(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text("9-1_3 0 p1 2\n9-1_3 p2 1\n")
    with pytest.raises(ApcirError) as info:
        load_qrels(path)
    message = str(info.value)
    assert f"{path}:2" in message and "4 fields" in message and "found 3" in message


def test_qrels_non_integer_grade(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text("9-1_3 0 p1 high\n")
    with pytest.raises(ApcirError, match="not an integer"):
        load_qrels(path)


def test_malformed_topics_json_names_line(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('[\n{"number": "1",\n "turns": [}\n]')
    with pytest.raises(ApcirError) as info:
        load_topics(path)
    assert f"{path}:3" in str(info.value) and "malformed JSON" in str(info.value)


def test_unknown_topic_schema(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"number": "1", "title": "x", "dialogue": []}]))
    with pytest.raises(ApcirError, match="unknown topic schema"):
        load_topics(path)


def test_unknown_dataset_name():
    with pytest.raises(ApcirError, match="unknown topic set 'ikat99'.*ikat23-test"):
        datasets.topics("ikat99")
    with pytest.raises(ApcirError, match="unknown qrels"):
        datasets.qrels("nope")


def test_collection_both_layouts(tmp_path):
    pyserini = tmp_path / "a.jsonl"
    pyserini.write_text('{"id": "d1", "contents": "hello"}\n\n{"id": "d2", "contents": " world "}\n')
    assert [(p.id, p.contents) for p in load_collection(pyserini)] == [("d1", "hello"), ("d2", "world")]
    ikat = tmp_path / "b.jsonl"
    ikat.write_text('{"doc_id": "clueweb22-en0000-32-08101", "passage_id": "4", "passage_text": "x"}\n')
    assert load_collection(ikat)[0].id == "clueweb22-en0000-32-08101:4"


def test_bundled_collection():
    passages = load_collection(datasets.collection_path("ikat23-provenance"))
    assert len(passages) == 894
    assert all(":" in p.id and p.contents for p in passages)


@pytest.mark.parametrize(
    "line, expected",
    [('{"id": "d1"}', "without id or text"), ('{"contents": "x"}', "without id or text"),
     ('{"title": "x"}', "needs"), ("[1, 2]", "expected a JSON object"), ('{"id": "d1", "contents": ', "malformed"),
     ('{"id": "d 1", "contents": "x"}', "passage id 'd 1' contains whitespace"),
     ('{"doc_id": "d\\t1", "passage_id": 2, "passage_text": "x"}', "contains whitespace")],
)
def test_collection_bad_lines(tmp_path, line, expected):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "d0", "contents": "ok"}\n' + line + "\n")
    with pytest.raises(ApcirError) as info:
        load_collection(path)
    assert expected in str(info.value) and f"{path}:2" in str(info.value)


def test_collection_duplicate_ids(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "d0", "contents": "a"}\n{"id": "d0", "contents": "b"}\n')
    with pytest.raises(ApcirError, match="duplicate passage id 'd0'"):
        load_collection(path)


def test_the_2025_ptkb_qrels_number_statements_as_apcir_does():
    """NIST's 0-based ``ptkb-<conversation>-<i>`` becomes apcir's 1-based statement number; the bundled file is
    the conversion of NIST's (same turns, grades and order)."""
    from apcir.datasets.ikat25_ptkb import convert_line

    assert convert_line("1-1_3 0 ptkb-1-1-16 2\n") == "1-1_3 0 17 2\n"
    assert convert_line("12-2_1 Q0 ptkb-12-2-0 0") == "12-2_1 Q0 1 0\n"
    with pytest.raises(ApcirError, match="is not ptkb-1-1-<i> for turn 1-1_3"):
        convert_line("1-1_3 0 ptkb-1-2-4 1")
    qrels = datasets.qrels("ikat25-test-ptkb")
    assert qrels and all(statement.isdigit() and int(statement) >= 1 for turn in qrels for statement in qrels[turn])
