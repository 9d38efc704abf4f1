import numpy as np
import pytest

from apcir.contract.runs import trec_order
from apcir.errors import ApcirError
from apcir.fusion.linear import fuse_scores, turn_matrix
from apcir.fusion.normalise import normalise


def test_minmax_maps_to_unit_interval():
    assert normalise({"a": 3.0, "b": 1.0, "c": 2.0}) == {"a": 1.0, "b": 0.0, "c": 0.5}


@pytest.mark.parametrize(
    ("method", "one", "equal"),
    [("minmax", 1.0, 1.0), ("max", 1.0, 1.0), ("zscore", 0.0, 0.0), ("none", 5.0, 5.0)],
)
def test_edge_cases(method, one, equal):
    assert normalise({}, method) == {}
    assert normalise({"a": 5.0}, method) == {"a": one}
    assert normalise({"a": 5.0, "b": 5.0}, method) == {"a": equal, "b": equal}


def test_max_and_zscore():
    assert normalise({"a": 4.0, "b": 2.0}, "max") == {"a": 1.0, "b": 0.5}
    z = normalise({"a": 1.0, "b": 3.0}, "zscore")
    assert z == {"a": -1.0, "b": 1.0}


def test_unknown_method_is_a_user_error():
    with pytest.raises(ApcirError, match="unknown normalisation"):
        normalise({"a": 1.0}, "softmax")


def test_missing_passage_contributes_zero():
    runs = [{"t_1": {"a": 2.0, "b": 1.0}}, {"t_1": {"c": 7.0}}]
    ids, matrix = turn_matrix(runs, "t_1")
    assert ids == ["a", "b", "c"]
    assert matrix.tolist() == [[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]
    assert fuse_scores(matrix, (0.3, 0.7)).tolist() == [0.3, 0.0, 0.7]


def test_trec_order_breaks_ties_by_id_descending_at_float32_precision():
    scores = np.array(
        [1.0, 1.0 + 2**-30, 0.5, 1.0]
    )  # index 1 ties with 0 and 3 once rounded to float32
    assert trec_order(scores).tolist() == [3, 1, 0, 2]
