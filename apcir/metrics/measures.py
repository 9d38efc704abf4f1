"""Measure names and their trec_eval equivalents.

Names follow ir-measures' spelling (``nDCG@3``, ``P@20``, ``R@100``), with the
APCIR paper's ``Recall@k`` and ``MRR`` accepted too. Each maps to one
trec_eval measure that pytrec_eval computes, so every number is trec_eval's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from apcir.errors import ApcirError


@dataclass(frozen=True)
class Measure:
    """A measure as apcir names it and as trec_eval computes it."""

    name: str
    family: str  # trec_eval measure family, e.g. ndcg_cut
    cutoff: int | None = None

    @property
    def trec_key(self) -> str:
        """The key under which pytrec_eval reports this measure."""
        return self.family if self.cutoff is None else f"{self.family}_{self.cutoff}"


# name prefix (lower case) -> (canonical display prefix, trec_eval family with cutoff, without cutoff)
_FAMILIES: dict[str, tuple[str, str | None, str | None]] = {
    "ndcg": ("nDCG", "ndcg_cut", "ndcg"),
    "p": ("P", "P", None),
    "precision": ("P", "P", None),
    "r": ("Recall", "recall", None),
    "recall": ("Recall", "recall", None),
    "map": ("MAP", "map_cut", "map"),
    "ap": ("MAP", "map_cut", "map"),
    "mrr": ("MRR", None, "recip_rank"),
    "rr": ("MRR", None, "recip_rank"),
    "recip_rank": ("MRR", None, "recip_rank"),
}

MEASURE_SETS: dict[str, list[str]] = {
    # The APCIR paper's tables.
    "paper": ["MRR", "nDCG@3", "Recall@10", "Recall@100"],
    # The iKAT overview's passage-ranking measures.
    "ikat": ["nDCG@3", "nDCG@5", "nDCG@1000", "P@20", "MAP@1000", "Recall@1000", "MRR"],
    # PTKB statement ranking (iKAT 2023): the 2023 guidelines name "Precision, Recall, P@k, and MAP"; the overview's
    # exact list could not be confirmed (see the README), so apcir reports these, at the cut-off 3.
    "ptkb": ["nDCG@3", "P@3", "Recall@3", "MRR", "MAP"],
}

_NAME = re.compile(r"^(?P<prefix>[A-Za-z_]+)(?:@(?P<cutoff>\d+))?$")


def parse_measure(text: str) -> Measure:
    """``nDCG@3`` -> Measure('nDCG@3', 'ndcg_cut', 3); unknown names are a user error."""
    match = _NAME.match(text.strip())
    family = _FAMILIES.get(match["prefix"].lower()) if match else None
    if match is None or family is None:
        raise ApcirError(
            f"unknown measure {text!r}: expected MRR, nDCG@k, P@k, Recall@k, MAP@k, MAP or nDCG, "
            f"or a set name ({', '.join(MEASURE_SETS)})"
        )
    display, with_cutoff, without_cutoff = family
    if match["cutoff"] is None:
        if without_cutoff is None:
            raise ApcirError(f"measure {text!r} needs a cutoff, e.g. {display}@10")
        return Measure(display, without_cutoff)
    if with_cutoff is None:
        raise ApcirError(f"measure {text!r} takes no cutoff")
    cutoff = int(match["cutoff"])
    if cutoff < 1:
        raise ApcirError(f"measure {text!r}: the cutoff must be at least 1")
    return Measure(f"{display}@{cutoff}", with_cutoff, cutoff)


def parse_measures(specs: list[str] | str) -> list[Measure]:
    """Measures from names and set names (``paper``, ``ikat``), comma-separated or listed; no repeats."""
    items = [specs] if isinstance(specs, str) else list(specs)
    names: list[str] = []
    for item in items:
        for part in item.split(","):
            part = part.strip()
            if part:
                names.extend(MEASURE_SETS.get(part, [part]))
    measures: list[Measure] = []
    for name in names:
        measure = parse_measure(name)
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
        if measure.cutoff is None:
            plain.add(measure.family)
        else:
            cutoffs.setdefault(measure.family, []).append(measure.cutoff)
    return plain | {f"{family}.{','.join(str(c) for c in sorted(set(cs)))}" for family, cs in cutoffs.items()}
