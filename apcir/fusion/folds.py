"""Folds of a cross-validation by conversation (the outer one of ``cv``, and the inner one that chooses λ)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from apcir.errors import ApcirError
from apcir.ids import split_turn_id


def conversation_folds(turns: Sequence[str], k: int, seed: int = 0) -> list[list[str]]:
    """Conversations split into ``k`` folds, shuffled deterministically by ``seed``."""
    conversations = sorted({split_turn_id(t)[0] for t in turns})
    if k < 2:
        raise ApcirError(f"cross-validation needs at least 2 folds (--cv, folds), got {k}")
    if k > len(conversations):
        raise ApcirError(f"cannot make {k} cross-validation folds (--cv, folds): the turns come from only "
                         f"{len(conversations)} conversation(s), and folds are split by conversation")
    order = np.random.default_rng(seed).permutation(len(conversations))
    folds: list[list[str]] = [[] for _ in range(k)]
    for position, index in enumerate(order):
        folds[position % k].append(conversations[index])
    return [sorted(f) for f in folds]
