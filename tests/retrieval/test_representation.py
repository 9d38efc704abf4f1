"""Query-representation fusion (qr-fusion) from the query vectors the lists' retrieval saved: the same run as
encoding the three inputs again, without encoding them."""

from __future__ import annotations

import pytest

from apcir import datasets
from apcir.retrieval import open_index
from apcir.retrieval.representation import search_fused_representation
from apcir.retrieval.stage import load_query_vectors, save_query_vectors

pytestmark = pytest.mark.slow


def test_stored_query_vectors_give_the_run_encoding_gives_and_a_missing_turn_is_encoded(small, tmp_path):
    _, _, index_dir, chosen = small
    index = open_index(index_dir)
    turns = {t.turn_id: t for t in datasets.topics("ikat23-test") if t.turn_id in set(chosen)}
    inputs = {t: [turn.utterance, (turn.utterance, turn.response or None), (turn.manual_rewrite or turn.utterance, None)]
              for t, turn in list(turns.items())[:12]}
    weights = {t: [0.5, 0.3, 0.2] for t in inputs}
    expected = search_fused_representation(index, inputs, weights, k=20, progress=False)

    ids = list(inputs)
    stored = []
    for i in range(3):
        path = tmp_path / f"{i}.qvec.npz"
        save_query_vectors(path, ids, index.encoder.encode_queries([inputs[t][i] for t in ids], progress=False))
        stored.append(load_query_vectors(path))
    del stored[1][ids[0]]  # input 2 lacks a turn: encoded again, the other two are summed as stored

    encoded: list[int] = []
    encode = index.encoder.encode_queries

    def counting(queries, **options):
        encoded.append(len(queries))
        return encode(queries, **options)

    index.encoder.encode_queries = counting
    try:
        run = search_fused_representation(index, inputs, weights, k=20, progress=False, stored=stored)
    finally:
        index.encoder.encode_queries = encode
    assert run == expected and len(run) == len(inputs)
    assert encoded == [len(inputs)]  # only input 2
