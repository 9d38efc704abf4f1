import pytest

from apcir.errors import ApcirError
from apcir.ids import canonical_turn_id, dashed_turn_id, split_turn_id


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
