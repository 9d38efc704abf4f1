"""Measure names, parsed by ir-measures, and how each is computed.

Any name ir-measures parses is accepted (``nDCG@10``, ``RR@10``, ``P(rel=2)@10``,
``Judged@10``, ``R@100``, ``AP(rel=2)``), as are trec_eval's names
(``ndcg_cut_3``, ``recip_rank``, ``map``) and the APCIR paper's spellings
(``MRR``, ``Recall@10``, ``MAP``). Parsing is ir-measures' own: apcir only maps
the paper's spellings onto its names first.

A measure that trec_eval computes (nDCG, P, R, AP, RR without a cut-off) is
computed by pytrec_eval, so its number is trec_eval's; its ``rel`` parameter,
when given, is trec_eval's ``-l`` for that measure alone. Any other measure
(``Judged@10``, ``RR@10``, ``ERR@20``, ...) is computed by ir-measures itself.
Names shown keep the paper's spelling for the paper's measures (``MRR``,
``Recall@100``, ``MAP``) and ir-measures' for the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from apcir.errors import ApcirError


@dataclass(frozen=True)
class Measure:
    """A measure as apcir names it and as it is computed.

    ``family`` is the trec_eval measure family (``ndcg_cut``) when trec_eval computes it, else ``None`` and
    ``ir_name`` (ir-measures' spelling) says what ir-measures computes. ``rel`` is the measure's own relevance
    threshold (``P(rel=2)@10``); ``None`` takes the evaluation's.
    """

    name: str
    family: str | None
    cutoff: int | None = None
    rel: int | None = None
    ir_name: str = ""

    @property
    def trec_key(self) -> str:
        """The key under which pytrec_eval reports this measure."""
        if self.family is None:
            raise ApcirError(f"{self.name} is not a trec_eval measure")
        return self.family if self.cutoff is None else f"{self.family}_{self.cutoff}"

    @property
    def by_trec_eval(self) -> bool:
        return self.family is not None

    def ir_measure(self, rel_threshold: int = 1) -> Any:
        """The ir-measures object computing this measure (the evaluation's threshold where it takes one)."""
        import ir_measures

        measure = ir_measures.parse_measure(self.ir_name)
        if "rel" in measure.SUPPORTED_PARAMS and "rel" not in measure.params and rel_threshold != 1:
            measure = measure(rel=rel_threshold)
        return measure


MEASURE_SETS: dict[str, list[str]] = {
    # The APCIR paper's tables.
    "paper": ["MRR", "nDCG@3", "Recall@10", "Recall@100"],
    # The iKAT overview's passage-ranking measures.
    "ikat": ["nDCG@3", "nDCG@5", "nDCG@1000", "P@20", "MAP@1000", "Recall@1000", "MRR"],
    # PTKB statement ranking (iKAT 2023): the 2023 guidelines name "Precision, Recall, P@k, and MAP"; the overview's
    # exact list could not be confirmed (see docs/guide/responses.md), so apcir reports these, at the cut-off 3.
    "ptkb": ["nDCG@3", "P@3", "Recall@3", "MRR", "MAP"],
}

# The paper's spellings -> ir-measures' names (case-insensitive prefix before '@' or '(').
_PAPER_NAMES = {"mrr": "RR", "recall": "R", "precision": "P", "map": "AP", "ndcg": "nDCG", "p": "P", "r": "R",
                "ap": "AP", "rr": "RR"}
# ir-measures name -> (shown name, trec_eval family with a cut-off, without one, parameters trec_eval can take)
_TREC = {
    "nDCG": ("nDCG", "ndcg_cut", "ndcg", {"cutoff"}),
    "P": ("P", "P", None, {"cutoff", "rel"}),
    "R": ("Recall", "recall", None, {"cutoff", "rel"}),
    "AP": ("MAP", "map_cut", "map", {"cutoff", "rel"}),
    "RR": ("MRR", None, "recip_rank", {"rel"}),
}
_PREFIX = re.compile(r"^(?P<prefix>[A-Za-z]+)(?P<rest>[@(].*)?$")
_NEEDS_CUTOFF = {"P", "R", "Judged"}


def _ir_parse(text: str) -> list[Any]:
    """ir-measures' objects for ``text``: its own syntax, the paper's spellings, or trec_eval's names."""
    import ir_measures

    match = _PREFIX.match(text)
    candidates = [text]
    if match and match["prefix"].lower() in _PAPER_NAMES:
        candidates.insert(0, _PAPER_NAMES[match["prefix"].lower()] + (match["rest"] or ""))
    for candidate in candidates:
        try:
            return [ir_measures.parse_measure(candidate)]
        except (NameError, ValueError, SyntaxError, TypeError, AttributeError):
            continue
    try:
        found = ir_measures.parse_trec_measure(text)
    except (NameError, ValueError, SyntaxError, TypeError, AttributeError, KeyError):
        found = []
    return list(found)


def _from_ir(measure: Any, text: str) -> Measure:
    name, params = measure.NAME, dict(measure.params)
    cutoff = params.get("cutoff")
    if cutoff is not None and int(cutoff) < 1:
        raise ApcirError(f"measure {text!r}: the cut-off must be at least 1")
    if cutoff is None and name in _NEEDS_CUTOFF:
        raise ApcirError(f"measure {text!r} needs a cut-off, e.g. {name}@10")
    rel = params.get("rel")
    trec = _TREC.get(name)
    if trec is not None and set(params) <= trec[3] and (cutoff is None or trec[1] is not None):
        shown, with_cutoff, without_cutoff, _ = trec
        family = with_cutoff if cutoff is not None else without_cutoff
        if family is not None:
            plain = shown if cutoff is None else f"{shown}@{cutoff}"
            return Measure(plain if rel is None else str(measure), family, cutoff, rel, str(measure))
    return Measure(str(measure), None, cutoff, rel, str(measure))


def parse_measure(text: str) -> Measure:
    """``nDCG@3`` -> Measure('nDCG@3', 'ndcg_cut', 3); a name ir-measures does not know is a user error."""
    found = parse_names(text)
    if len(found) != 1:
        raise ApcirError(f"{text!r} names {len(found)} measures; give one")
    return found[0]


def parse_names(text: str) -> list[Measure]:
    """The measures one name stands for (a trec_eval name such as ``ndcg_cut.3,5`` may stand for several)."""
    text = text.strip()
    found = _ir_parse(text) if text else []
    if not found:
        guess = _guess(text)
        raise ApcirError(
            f"unknown measure {text!r}: {guess}(expected an ir-measures name (nDCG@10, RR, P(rel=2)@10, Judged@10, "
            f"R@100, AP), a trec_eval name (ndcg_cut_3, recip_rank), MRR / Recall@k / MAP, or a set name "
            f"({', '.join(MEASURE_SETS)}))"
        )
    return [_from_ir(m, text) for m in found]


def _guess(text: str) -> str:
    """``did you mean 'nDCG@3'? `` for ``nDGC@3``: the closest measure or set names, with the text's cut-off and
    parameters kept ("" when none is close)."""
    import ir_measures

    from apcir.registry import closest

    match = _PREFIX.match(text)
    prefix, rest = (match["prefix"], match["rest"] or "") if match else (text, "")
    names = [n for n in ir_measures.measures.registry if n.isascii()] + ["Recall", "MRR", "MAP"]
    near = [name + rest for name in closest(prefix, names)] + closest(text, MEASURE_SETS)
    return f"did you mean {' or '.join(repr(n) for n in dict.fromkeys(near))}? " if near else ""


def _split(item: str) -> list[str]:
    """Comma-separated names, keeping commas inside parentheses (``nDCG(gains={0:0,1:1})``) and trec_eval cut-off
    lists (``ndcg_cut.3,5``) whole."""
    parts, depth, current = [], 0, ""
    for i, char in enumerate(item):
        depth += (char == "(") - (char == ")")
        in_cutoffs = re.search(r"\.\d+(,\d+)*$", current) and item[i + 1:i + 2].isdigit()
        if char == "," and depth == 0 and not in_cutoffs:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_measures(specs: list[str] | str) -> list[Measure]:
    """Measures from names and set names (``paper``, ``ikat``), comma-separated or listed; no repeats."""
    items = [specs] if isinstance(specs, str) else list(specs)
    names: list[str] = []
    for item in items:
        for part in _split(item):
            names.extend(MEASURE_SETS.get(part, [part]))
    measures: list[Measure] = []
    for name in names:
        for measure in parse_names(name):
            if measure not in measures:
                measures.append(measure)
    if not measures:
        raise ApcirError("no measure given")
    return measures


def pytrec_eval_spec(measures: list[Measure]) -> set[str]:
    """The measure set to hand pytrec_eval: cutoffs grouped per family (``ndcg_cut.3,5``)."""
    cutoffs: dict[str, list[int]] = {}
    plain: set[str] = set()
    for measure in measures:
        if measure.family is None:
            continue
        if measure.cutoff is None:
            plain.add(measure.family)
        else:
            cutoffs.setdefault(measure.family, []).append(measure.cutoff)
    return plain | {f"{family}.{','.join(str(c) for c in sorted(set(cs)))}" for family, cs in cutoffs.items()}
