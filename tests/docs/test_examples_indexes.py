"""The index-building pages (retrieval guide, sharding, GPUs): they encode the demo collection several times.

How the examples run: tests/docs/doc_examples.py."""

from doc_examples import group_tests

sandbox, test_example_runs = group_tests("indexes")
