"""A third-party retrieval backend with an option of its own (``min_overlap``), as a package outside apcir would
ship it: its spec names its options model, so ``[retrieval] min_overlap = 2`` and ``apcir retrieve --min-overlap 2``
reach its ``open``, and the reference pages list the key, with no edit to apcir (see
tally_apcir_plugin-0.1.dist-info/entry_points.txt)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field

from apcir.retrieval.options import BackendOptions
from apcir.retrieval.registry import BackendSpec


class TallyOptions(BackendOptions):
    min_overlap: int = Field(1, ge=1, description="passages sharing fewer query words are left out")


def build(out, passages, *, threads, work, options):
    texts = {p.id: p.contents for p in passages}
    (Path(out) / "tally.json").write_text(json.dumps(texts))
    return {"passages": len(texts)}


class TallyIndex:
    """Scores a passage by the number of distinct query words it holds (lower-cased, split on white space)."""

    def __init__(self, folder, manifest, options: TallyOptions):
        self.manifest = manifest
        self.options = options
        self.words = {pid: set(text.lower().split())
                      for pid, text in json.loads((Path(folder) / "tally.json").read_text()).items()}

    def search(self, queries, k=1000, *, progress=True):
        run = {}
        for turn, query in queries.items():
            text = query if isinstance(query, str) else f"{query[0]} {query[1] or ''}"
            asked = set(text.lower().split())
            scored = {pid: float(len(asked & words)) for pid, words in self.words.items()}
            kept = {pid: s for pid, s in scored.items() if s >= self.options.min_overlap}
            run[turn] = dict(sorted(kept.items(), key=lambda x: (-x[1], x[0]))[:k])
        return run


def open_index(folder, manifest, encoder, *, threads, options):
    return TallyIndex(folder, manifest, options)


BACKEND = BackendSpec("tally", "distinct query words a passage holds (a plugin with an option)", None,
                      build="tally_apcir_plugin:build", open="tally_apcir_plugin:open_index", options=TallyOptions)
