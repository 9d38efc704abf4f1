import pytest

from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id, check_run_id, dashed_turn_id, split_turn_id


@pytest.mark.parametrize(
    "given, canonical, dashed",
    [("9-1_3", "9-1_3", "9-1-3"), ("9-1-3", "9-1_3", "9-1-3"), ("0_8", "0_8", "0-8"), ("0-8", "0_8", "0-8"),
     ("10-2_12", "10-2_12", "10-2-12")],
)
def test_turn_ids_map_both_ways(given, canonical, dashed):
    assert canonical_turn_id(given) == canonical
    assert dashed_turn_id(given) == dashed
    assert canonical_turn_id(dashed_turn_id(given)) == canonical


def test_split_turn_id():
    assert split_turn_id("9-1_3") == ("9-1", 3)
    assert split_turn_id("12-3") == ("12", 3)


@pytest.mark.parametrize("bad", ["", "abc", "9-1_x", "9_1_"])
def test_bad_turn_id_is_a_user_error(bad):
    with pytest.raises(ApcirError, match="turn id"):
        canonical_turn_id(bad)


@pytest.mark.parametrize("bad, problem", [("", "is empty"), ("a b", "contains whitespace"), ("a\tb", "whitespace"),
                                          (" a", "whitespace"), ("a\u00a0b", "whitespace")])
def test_an_id_a_run_file_cannot_hold_is_a_user_error(bad, problem):
    with pytest.raises(ApcirError, match=problem) as info:
        check_run_id(bad, "turn id", "q.jsonl", 3)
    assert str(info.value).startswith(f"q.jsonl:3: turn id {bad!r} ")
    assert check_run_id("9-1_3", "turn id") == "9-1_3"
