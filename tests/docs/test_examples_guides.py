"""The other guides, the how-to pages and the reference.

How the examples run: tests/docs/doc_examples.py."""

from doc_examples import group_tests

sandbox, test_example_runs = group_tests("guides")
