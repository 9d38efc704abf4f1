"""The systems an experiment compares: APCIR fusion and the paper's baselines and ablations.

:data:`SYSTEMS` is the single source of their names (``apcir baseline NAME``,
``fusion.baselines = [...]``, the tables of ``apcir run`` and the report).
Each system is a fused run built from the three per-turn lists (q', q'+r',
third) and the turns' levels. Three kinds:

* ``tuned``: weights from the experiment's protocol (k-fold cross-validation,
  tuning on another dataset, or a file), one :class:`Variant` each: APCIR, no
  personalisation (w3 held at 0), no levels (one vector for every turn);
* ``fixed``: weights that need no tuning (single lists, equal, random, RRF,
  round-robin, entropy and DEPS, the last two with a text encoder);
* ``retrieved``: a run of its own, not a fusion (the manual rewrites);
* ``representation``: one search per turn with a fused query (query-representation
  fusion, paper Table 4): the turn's three query vectors summed with APCIR's
  weights for the turn's level. It needs the index, so ``apcir run`` builds it
  (:func:`apcir.retrieval.representation.search_fused_representation`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from apcir.console import warn
from apcir.contract.records import Run
from apcir.contract.reformulations import LIST_NAMES
from apcir.contract.runs import ranking
from apcir.fusion import baselines
from apcir.fusion.linear import fuse_per_turn
from apcir.fusion.tuning import Constraint, no_third
from apcir.registry import Registry

Encoder = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class Variant:
    """How a tuned system's weights differ from APCIR's: a constraint on the grid, or one vector for all turns."""

    constraint: Constraint = None
    pooled: bool = False
    rule: tuple[tuple[str, Any], ...] = ()
    """Overrides of the experiment's selection rule (:meth:`TuningSettings.rule`), e.g. ``(("shrinkage", "cv"),)``."""


class VectorSource(Protocol):
    """Vectors a retrieval stage already computed: DEPS reads them instead of encoding texts again."""

    def personalised(self, turns: Sequence[str]) -> Mapping[str, np.ndarray]: ...

    def passages(self, ids: list[str]) -> np.ndarray: ...


@dataclass
class SystemInputs:
    """Everything the fixed systems may use; entropy and DEPS need an encoder and texts."""

    lists: list[Run]
    norm: str = "minmax"
    depth: int = 1000
    seed: int = 0
    rrf_k: int = 60
    profiles: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """turn -> its PTKB statements (entropy)."""
    personalised: Mapping[str, str] = field(default_factory=dict)
    """turn -> the personalised input as one text (DEPS)."""
    passages: Mapping[str, str] = field(default_factory=dict)
    """passage id -> text, for the passages DEPS reads (the top 10 of list 2)."""
    encode: Encoder | None = None
    vectors: VectorSource | None = None
    """Stored vectors for DEPS (the personalised queries as retrieved, the passages as indexed): no re-encoding."""

    def turns(self) -> list[str]:
        return sorted(set().union(*(set(r) for r in self.lists)))


@dataclass(frozen=True)
class SystemSpec:
    name: str
    label: str
    groups: tuple[str, ...]
    description: str
    kind: Literal["tuned", "fixed", "retrieved", "representation"]
    build: Callable[[SystemInputs], Run] | None = None
    reformulator: str | None = None
    """A ``retrieved`` system: the reformulator whose rewrites it searches (``manual``)."""
    stored_as: str | None = None
    """A system that is one list's ranking (``list-rewrite``, ``manual``): the list, whose run file it refers
    to in a run directory instead of a copy."""
    in_figures: bool = False
    """Drawn in the report's per-level figure beside APCIR and the baseline."""
    variant: Variant | None = None
    needs: tuple[tuple[str, ...], ...] = ()
    """Inputs a fixed system cannot do without: any one of these groups of ``SystemInputs`` fields."""

    def missing(self, inputs: SystemInputs) -> list[str]:
        """The inputs this system lacks (empty when some group of its ``needs`` is complete)."""
        if not self.needs:
            return []
        lacking = [[need for need in group if not getattr(inputs, need)] for group in self.needs]
        return [] if any(not group for group in lacking) else min(lacking, key=len)


def _list(index: int) -> Callable[[SystemInputs], Run]:
    return lambda x: baselines.single_list(x.lists, index, norm=x.norm, depth=x.depth)


def _entropy(x: SystemInputs) -> Run:
    assert x.encode is not None
    turns = x.turns()
    weights = baselines.entropy_weights({t: list(x.profiles.get(t, ())) for t in turns}, x.encode, len(x.lists))
    return fuse_per_turn(x.lists, weights, norm=x.norm, depth=x.depth)


def _deps(x: SystemInputs) -> Run:
    turns = x.turns()
    if x.vectors is not None:
        weights = baselines.deps_weights_from_vectors(x.vectors.personalised(turns), x.lists, x.vectors.passages)
    else:
        assert x.encode is not None
        weights = baselines.deps_weights({t: x.personalised[t] for t in turns if t in x.personalised}, x.lists,
                                         x.passages, x.encode)
    return fuse_per_turn(x.lists, weights, norm=x.norm, depth=x.depth)


SYSTEMS: Registry[SystemSpec] = Registry("system")
PRIMARY = "apcir"
"""The system every other is compared with and whose run is submitted: APCIR's level-aware fusion."""
SYSTEMS.add(SystemSpec(PRIMARY, "APCIR", ("overall", "weights", "fusion"),
                       "personalisation-aware linear fusion, weights per level", "tuned", variant=Variant()))
SYSTEMS.add(SystemSpec("apcir-shrunk", "APCIR, shrunk to pooled (λ by inner CV)", ("fusion",),
                       "per-level weights shrunk toward the pooled ones: level ℓ maximises mean_ℓ(w) + λ·mean_all(w), "
                       "λ chosen by an inner cross-validation by conversation", "tuned",
                       variant=Variant(rule=(("shrinkage", "cv"),))))
SYSTEMS.add(SystemSpec("apcir-plateau", "APCIR, plateau optimum", ("fusion",),
                       "per-level weights at the centroid of the grid points within ε of the maximum "
                       "(ε: the bootstrap standard error at the argmax)", "tuned",
                       variant=Variant(rule=(("select", "plateau"),))))
SYSTEMS.add(SystemSpec("manual", "Manual rewrite (HumanQR)", ("overall",),
                       "the annotators' rewrite, retrieved alone", "retrieved", reformulator="manual", in_figures=True,
                       stored_as="manual"))
for _index, _name in enumerate(LIST_NAMES):
    _labels = {"rewrite": ("q' alone", "the non-personalised rewrite, retrieved alone"),
               "rewrite_response": ("q'+r' alone", "rewrite plus pseudo-response alone"),
               "third": ("third alone", "q^u+r^u (levels b/c) or q''+r'' (level a) alone")}
    SYSTEMS.add(SystemSpec(f"list-{_name}", _labels[_name][0], ("overall",), _labels[_name][1], "fixed",
                           build=_list(_index), stored_as=_name))
SYSTEMS.add(SystemSpec("no-personalisation", "No personalisation", ("weights",),
                       "w3 = 0; w1, w2 tuned per level with the same protocol", "tuned",
                       variant=Variant(constraint=no_third)))
SYSTEMS.add(SystemSpec("random", "Random personalisation", ("weights",), "seeded random weights per turn", "fixed",
                       build=lambda x: baselines.random_fusion(x.lists, x.seed, norm=x.norm, depth=x.depth)))
EQUAL = "equal"
"""Equal weights: the report's "tuned vs equal" figure compares APCIR with it."""
SYSTEMS.add(SystemSpec(EQUAL, "Equal personalisation", ("weights",), "w1 = w2 = w3 = 1/3", "fixed",
                       build=lambda x: baselines.equal_weights(x.lists, norm=x.norm, depth=x.depth), in_figures=True))
SYSTEMS.add(SystemSpec("entropy", "User-profile entropy", ("weights",),
                       "w3 = normalised topic entropy of the profile; w1 = w2 = (1-w3)/2", "fixed",
                       build=_entropy, needs=(("encode", "profiles"),)))
SYSTEMS.add(SystemSpec("deps", "DEPS", ("weights",),
                       "w3 = sigmoid(||E(q^u+r^u) - E(top-10 of q'+r')||); w1 = w2 = (1-w3)/2", "fixed",
                       build=_deps, needs=(("vectors",), ("encode", "personalised", "passages"))))
SYSTEMS.add(SystemSpec("no-levels", "No levels", ("fusion",),
                       "one weight vector for every turn, tuned with the same protocol", "tuned",
                       variant=Variant(pooled=True), in_figures=True))
SYSTEMS.add(SystemSpec("rrf", "Reciprocal rank fusion", ("fusion",), "RRF, k = 60", "fixed",
                       build=lambda x: baselines.rrf(x.lists, x.rrf_k, x.depth)))
SYSTEMS.add(SystemSpec("round-robin", "Round-robin", ("fusion",), "rank 1 of each list, then rank 2, ...", "fixed",
                       build=lambda x: baselines.round_robin(x.lists, x.depth)))
SYSTEMS.add(SystemSpec("qr-fusion", "Query representation fusion", ("fusion",),
                       "one query per turn: w1*E(q') + w2*E(q'+r') + w3*E(third) with APCIR's level weights, "
                       "searched once", "representation"))


def uses_levels(name: str) -> bool:
    """Does this system's run depend on the turns' levels (a per-level tuned system, or qr-fusion, which sums
    the query vectors with APCIR's level weights)?"""
    spec = SYSTEMS.get(name) if name in SYSTEMS else None
    if spec is None:
        return False
    return (spec.kind == "tuned" and spec.variant is not None and not spec.variant.pooled) \
        or spec.kind == "representation"


def tuned_names(names: Sequence[str]) -> list[str]:
    return [n for n in names if SYSTEMS.get(n).kind == "tuned"]


def of_kind(names: Sequence[str], kind: str) -> list[str]:
    """The systems among ``names`` of one kind (tuned, fixed, retrieved, representation)."""
    return [n for n in names if SYSTEMS.get(n).kind == kind]


def needed_inputs(names: Sequence[str]) -> set[str]:
    """Every ``SystemInputs`` field some system among ``names`` may need (entropy's encoder, DEPS's vectors)."""
    return {need for n in names for group in SYSTEMS.get(n).needs for need in group}


def deps_passage_ids(lists: Sequence[Run], top: int = 10) -> set[str]:
    """The passages DEPS reads: the top ``top`` of list 2 (q'+r') of every turn."""
    if len(lists) < 2:
        return set()
    return {p for hits in lists[1].values() for p, _ in ranking(hits, top)}


def fixed_systems(inputs: SystemInputs, names: Sequence[str]) -> dict[str, Run]:
    """The fixed systems among ``names`` whose inputs are at hand; the others are named in a warning."""
    runs: dict[str, Run] = {}
    skipped: list[str] = []
    wanted = [n for n in names if SYSTEMS.get(n).kind == "fixed"]
    prime = getattr(inputs.encode, "prime", None)
    if prime is not None and any(SYSTEMS.get(n).needs for n in wanted):
        # one batch for every text entropy (and DEPS, without stored vectors) will ask for
        texts = [s for statements in inputs.profiles.values() for s in statements]
        if inputs.vectors is None:
            texts += list(inputs.personalised.values())
            texts += [inputs.passages[p] for p in deps_passage_ids(inputs.lists) if p in inputs.passages]
        prime(texts)
    for name in wanted:
        spec = SYSTEMS.get(name)
        missing = spec.missing(inputs)
        if missing:
            skipped.append(f"{name} (needs {', '.join(missing)})")
            continue
        assert spec.build is not None
        runs[name] = spec.build(inputs)
    if skipped:
        warn(f"not built: {'; '.join(skipped)}")
    return runs
