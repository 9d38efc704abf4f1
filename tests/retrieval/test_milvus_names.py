"""apcir's limit on a Milvus collection name's length is Milvus's own: checked against Milvus Lite, which takes a
name of 255 characters and refuses one of 256 as too long."""

from __future__ import annotations

import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from apcir.errors import ApcirError
from apcir.retrieval.location import MAX_NAME, parse_milvus
from apcir.retrieval.milvus.client import connect


@pytest.mark.slow
def test_milvus_lite_takes_the_longest_name_apcir_takes_and_refuses_the_next(tmp_path):
    from pymilvus import DataType
    from pymilvus.exceptions import MilvusException

    longest = parse_milvus(f"milvus:{tmp_path / 'n.db'}#{'a' * MAX_NAME}")
    with pytest.raises(ApcirError, match=f"is {MAX_NAME + 1} characters long; Milvus allows at most {MAX_NAME}"):
        parse_milvus(f"milvus:{tmp_path / 'n.db'}#{'a' * (MAX_NAME + 1)}")
    client = connect(longest)
    try:
        schema = client.create_schema(auto_id=True)
        schema.add_field("pk", DataType.INT64, is_primary=True)
        schema.add_field("v", DataType.FLOAT_VECTOR, dim=4)
        client.create_collection(longest.collection, schema=schema)
        assert client.has_collection(longest.collection)
        with pytest.raises(MilvusException, match="too long"):
            client.create_collection("a" * (MAX_NAME + 1), schema=schema)
    finally:
        client.close()
