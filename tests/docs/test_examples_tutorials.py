"""The tutorials, and the guides that use what the tutorials made.

How the examples run: tests/docs/doc_examples.py."""

from doc_examples import group_tests

sandbox, test_example_runs = group_tests("tutorials")
