"""The tutorials, and the guides that use what the tutorials made."""

# How the examples run: tests/docs/doc_examples.py.

from __future__ import annotations

import pytest
from doc_examples import Block, check_example, examples_of, make_sandbox

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory, demo):
    return make_sandbox(demo, tmp_path_factory.mktemp("docs-tutorials"))


@pytest.mark.parametrize("block", examples_of("tutorials"), ids=lambda b: b.id)
def test_example_runs(block: Block, sandbox):
    check_example(block, sandbox)
