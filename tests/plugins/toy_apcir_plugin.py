"""A third-party apcir plugin, as a package outside apcir would ship it: a backend, a re-ranker, a format and a
reformulator, registered through entry points (see toy_apcir_plugin-0.1.dist-info/entry_points.txt)."""

from __future__ import annotations

import json
from pathlib import Path

from apcir.contract.reformulations import ReformulationOutput, ReformulationRecord, Usage
from apcir.reformulation.registry import ReformulatorSpec
from apcir.reranking.base import Ranked, RerankStats
from apcir.reranking.registry import RerankerSpec
from apcir.retrieval.registry import BackendSpec
from apcir.submission.formats import FormatSpec


# ---- a backend: word overlap over the passages' texts ------------------------------------------------
def build(out, passages, *, threads, work):
    texts = {p.id: p.contents for p in passages}
    (Path(out) / "toy.json").write_text(json.dumps(texts))
    return {"passages": len(texts)}


class OverlapIndex:
    def __init__(self, folder, manifest):
        self.manifest = manifest
        self.texts = json.loads((Path(folder) / "toy.json").read_text())

    def search(self, queries, k=1000, *, progress=True):
        run = {}
        for turn, query in queries.items():
            text = query if isinstance(query, str) else f"{query[0]} {query[1] or ''}"
            words = set(text.lower().split())
            scored = {pid: float(len(words & set(body.lower().split()))) for pid, body in self.texts.items()}
            run[turn] = dict(sorted(scored.items(), key=lambda x: (-x[1], x[0]))[:k])
        return run


def open_index(folder, manifest, encoder, *, threads):
    return OverlapIndex(folder, manifest)


BACKEND = BackendSpec("toy-overlap", "word overlap (a plugin)", None, build="toy_apcir_plugin:build",
                      open="toy_apcir_plugin:open_index")


# ---- a re-ranker: shorter passages first ---------------------------------------------------------
class ShortestFirst:
    name = "shortest"
    model = "none"

    def rank(self, candidates, *, progress=True):
        ranked = {}
        stats = RerankStats()
        for c in candidates:
            order = sorted(range(len(c.ids)), key=lambda i: (len(c.texts[i]), c.ids[i]))
            ranked[c.turn] = Ranked([c.ids[i] for i in order], [float(len(order) - n) for n in range(len(order))])
            stats.pairs_scored += len(order)
        return ranked, stats


def load_reranker(settings):
    return ShortestFirst()


RERANKER = RerankerSpec("shortest", "+shortest", "shorter passages first (a plugin)", "pointwise", "none",
                        "toy_apcir_plugin:load_reranker")


# ---- a submission format: one line per turn, its top passage ----------------------------------------
def build_tops(inputs):
    return "".join(f"{turn}\t{max(hits, key=hits.get)}\n" for turn, hits in sorted(inputs.run.items()) if hits)


def check_tops(path, turns):
    known = {t.turn_id for t in turns}
    lines = [line.split("\t") for line in Path(path).read_text().splitlines() if line]
    problems = [f"line {n}: not 'turn<TAB>passage'" for n, parts in enumerate(lines, 1) if len(parts) != 2]
    problems += [f"unknown turn {parts[0]}" for parts in lines if len(parts) == 2 and parts[0] not in known]
    return problems


def formats():
    return [FormatSpec("tops", "the top passage of every turn, tab-separated (a plugin)", ".tsv", None,
                       build="toy_apcir_plugin:build_tops", check="toy_apcir_plugin:check_tops",
                       run_types=("automatic", "manual"), passage_text=False)]


# ---- a reformulator: the utterance, upper-cased ------------------------------------------------------
def produce(turns, options, emit, **_):
    for turn in turns:
        text = turn.utterance.upper()
        emit(ReformulationRecord(turn_id=turn.turn_id, model="shout", prompt_hash="shout-v1", status="ok",
                                 output=ReformulationOutput(level="a", rewrite=text, response="", third_rewrite=text,
                                                            third_response="", ptkb_used=[], reasoning=""),
                                 usage=Usage()))


REFORMULATOR = ReformulatorSpec("shout", "the utterance in capitals (a plugin)", "shout", True,
                                lambda turns, options: {"code": "shout-v1"}, produce)
