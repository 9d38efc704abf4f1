import math

import numpy as np
import pytest
from fusion_cases import random_case

from apcir.fusion import baselines as b
from apcir.fusion.linear import fuse_linear

RUNS = [
    {"t_1": {"a": 3.0, "b": 2.0, "c": 1.0}},
    {"t_1": {"c": 9.0, "d": 8.0}},
    {"t_1": {"b": 5.0, "a": 5.0}},
]


def hashing_encoder(texts):
    """Deterministic bag-of-characters encoder for tests."""
    out = np.zeros((len(texts), 26))
    for i, text in enumerate(texts):
        for ch in text.lower():
            if "a" <= ch <= "z":
                out[i, ord(ch) - 97] += 1
    return out


def test_rrf_sums_reciprocal_ranks():
    fused = b.rrf(RUNS, k=60)["t_1"]
    # list 3 ranks the tie a/b as b, a (id descending)
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert list(fused) == ["b", "a", "c", "d"]  # a and b tie: larger id first


def test_round_robin_interleaves_without_duplicates():
    fused = b.round_robin(RUNS, depth=10)["t_1"]
    assert list(fused) == ["a", "c", "b", "d"]
    assert len(set(fused.values())) == 4


def test_single_list_and_equal_are_linear_fusion():
    runs, _, levels = random_case(1)
    assert b.single_list(runs, 1) == fuse_linear(
        runs, levels, dict.fromkeys("abc", (0.0, 1.0, 0.0))
    )
    assert b.equal_weights(runs) == fuse_linear(
        runs, levels, dict.fromkeys("abc", (1 / 3, 1 / 3, 1 / 3))
    )


def test_random_weights_are_seeded_and_sum_to_one():
    runs, _, _ = random_case(2)
    first, again, other = (
        b.random_weights(runs, 3),
        b.random_weights(runs, 3),
        b.random_weights(runs, 4),
    )
    assert first == again and first != other
    assert all(math.isclose(sum(w), 1.0) for w in first.values())


def test_profile_entropy():
    assert b.profile_entropy(["only one"], hashing_encoder) == 0.0
    assert b.profile_entropy(["same", "same", "same"], hashing_encoder) == pytest.approx(1.0)
    spread = b.profile_entropy(["aaaa", "bbbb", "cccc"], hashing_encoder)  # orthogonal: uniform p
    assert spread == pytest.approx(1.0)
    skewed = b.profile_entropy(["aaaa", "aaab", "zzzz"], hashing_encoder)
    assert 0.0 < skewed < 1.0
    weights = b.entropy_weights({"t_1": ["aaaa", "aaab", "zzzz"]}, hashing_encoder)
    assert weights["t_1"] == pytest.approx(((1 - skewed) / 2, (1 - skewed) / 2, skewed))


def test_deps_weight_grows_with_distance():
    near = b.deps_weight("abc", ["abc", "abc"], hashing_encoder)
    far = b.deps_weight("xyz", ["abc", "abd"], hashing_encoder)
    assert near == pytest.approx(0.5)
    assert 0.5 < far < 1 / (1 + math.exp(-2)) + 1e-12
    weights = b.deps_weights(
        {"t_1": "xyz"},
        RUNS,
        {"a": "abc", "b": "abd", "c": "zzz", "d": "ddd"},
        hashing_encoder,
        top=1,
    )
    # top passage of the second list is c ('zzz')
    assert weights["t_1"][2] == pytest.approx(b.deps_weight("xyz", ["zzz"], hashing_encoder))


def test_tfidf_encoder_shape():
    enc = b.tfidf_encoder()
    matrix = enc(["hiking boots", "boots for hiking in rain"])
    assert matrix.shape[0] == 2 and matrix.shape[1] >= 4


def test_text_encoders_tfidf_and_a_memo_that_encodes_each_text_once():
    from apcir.fusion.encoders import MemoEncoder, text_encoder

    texts = ["hiking boots", "boots for hiking in rain"]
    assert np.array_equal(text_encoder("tfidf")(texts), b.tfidf_encoder()(texts))
    batches: list[list[str]] = []

    def encode(batch):
        batches.append(batch)
        return [np.array([len(t), t.count("o")], dtype=float) for t in batch]

    memo = MemoEncoder(encode)
    memo.prime(["b", "a", "b"])
    rows = memo(["a", "c", "a"])
    assert batches == [["a", "b"], ["c"]]  # sorted, each text once, only the new ones
    assert rows.tolist() == [[1, 0], [1, 0], [1, 0]] and memo(["boo"]).tolist() == [[3, 2]]
