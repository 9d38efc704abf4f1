"""Few-shot demonstrations for the reformulation prompt.

Six turns of the iKAT 2023 *train* conversations, two per personalisation
level, each from a different conversation. The utterance, history and PTKB of
a demonstration are read from the bundled ``ikat23-train`` topics at run time;
only the answer (reasoning, level, pseudo-responses, the other rewrite) is
written here, by this project. Where the annotators' manual rewrite exists it
is the demonstration's rewrite: the stand-alone rewrite for levels a/b, the
personalised one for level c (the manual rewrite of a level-c turn carries the
profile, so its de-personalised twin is written by hand). ``ptkb_used`` is the
annotators' ``ptkb_provenance``.

A demonstration is never taken from the conversation being reformulated:
:func:`select_demonstrations` skips any demonstration whose conversation has
the same id or opens with the same utterance as the target's (iKAT reuses a
topic's opening for several personas, e.g. ``1-1`` and ``1-2``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from apcir import datasets
from apcir.contract.records import Turn
from apcir.contract.reformulations import ReformulationOutput

DEMONSTRATION_SOURCE = "ikat23-train"

# "MANUAL" is replaced by the turn's manual rewrite from the topics file.
_MANUAL = "MANUAL"

_ANNOTATIONS: dict[str, dict[str, object]] = {
    # level a: the history resolves everything; the profile adds nothing.
    "5-1_2": {
        "reasoning": (
            "'it' refers to water resource management, the subject of the first turn. Why it matters is "
            "general knowledge; no statement of the profile changes what a good answer contains, so no "
            "personalisation is needed."
        ),
        "level": "a",
        "rewrite": _MANUAL,
        "response": (
            "Water resource management matters because fresh water is scarce and unevenly distributed: it "
            "secures drinking water and sanitation, supports agriculture and industry, protects ecosystems, "
            "and reduces the damage of droughts and floods."
        ),
        "third_rewrite": "What are the benefits of managing water resources sustainably?",
        "third_response": (
            "Sustainable water management keeps supply and demand in balance, prevents over-extraction of "
            "groundwater, limits pollution and makes communities more resilient to climate change."
        ),
    },
    "3-2_6": {
        "reasoning": (
            "'the first one' is the first hotel the system listed in its last answer, Hotel Navona. The "
            "question asks for facts about that hotel; the profile (jazz, classics, shopping) is not needed "
            "to answer it."
        ),
        "level": "a",
        "rewrite": _MANUAL,
        "response": (
            "Hotel Navona is a small family-run hotel in a historic building a few steps from Piazza Navona "
            "in central Rome, with simple rooms and breakfast included."
        ),
        "third_rewrite": "Hotel Navona Rome location, rooms, breakfast and reviews",
        "third_response": (
            "Hotel Navona sits on Via dei Sediari near Piazza Navona and the Pantheon; guests praise its "
            "location and friendly staff, while rooms are compact."
        ),
    },
    # level b: a general answer exists; the profile sharpens it.
    "2-1_1": {
        "reasoning": (
            "The question is already stand-alone and a general list of things to do in Doha answers it. The "
            "profile adds useful preferences (sightseeing, culture and history, shopping) that can rank "
            "some activities higher, so the profile is a bonus rather than a necessity."
        ),
        "level": "b",
        "rewrite": _MANUAL,
        "response": (
            "With 48 hours in Doha you can walk the Corniche, visit the Museum of Islamic Art, explore Souq "
            "Waqif, see the Katara Cultural Village and take a desert safari to the Inland Sea."
        ),
        "third_rewrite": (
            "What sightseeing, cultural and historical attractions and shopping can I enjoy during a "
            "48-hour layover in Doha?"
        ),
        "third_response": (
            "For culture and history: the Museum of Islamic Art, the National Museum of Qatar and Al Zubarah "
            "Fort; for shopping: Souq Waqif and Villaggio Mall; for sightseeing: the Corniche and The Pearl."
        ),
    },
    "7-1_4": {
        "reasoning": (
            "'talk about' refers to the first date discussed since the first turn. Conversation topics for "
            "a first date can be suggested for anyone; knowing the user is a nervous 25-year-old man from a "
            "culture where dating is uncommon helps tailor them but is not required."
        ),
        "level": "b",
        "rewrite": _MANUAL,
        "response": (
            "Good first-date topics are hobbies, travel, favourite books, films and music, food, and light "
            "questions about goals; avoid heavy subjects such as past relationships."
        ),
        "third_rewrite": (
            "What can a nervous 25-year-old man with little dating experience talk about on his first date?"
        ),
        "third_response": (
            "Prepare a few open questions about hobbies and travel, share stories about your own culture, "
            "listen actively and let pauses happen; simple topics reduce the pressure."
        ),
    },
    # level c: without the profile the query cannot be answered correctly.
    "1-1_3": {
        "reasoning": (
            "'here' is where the user lives; the conversation does not say it but statement 2 does: the "
            "Netherlands. Statement 5 gives the field (computer science). Without the profile the location "
            "of the universities is unknown, so personalisation is indispensable."
        ),
        "level": "c",
        "rewrite": "Which universities offer a master's degree in computer science in my home country?",
        "response": (
            "Many countries have universities with strong computer science master's programmes; the best "
            "choice depends on the country, tuition and admission requirements."
        ),
        "third_rewrite": (
            "Which universities in the Netherlands offer a master's degree in computer science?"
        ),
        "third_response": (
            "Dutch universities with computer science master's programmes include Delft University of "
            "Technology, Eindhoven University of Technology, the University of Amsterdam, Vrije Universiteit "
            "Amsterdam, Leiden, Utrecht, Radboud and Twente."
        ),
    },
    "8-1_10": {
        "reasoning": (
            "The user asks which permits and licences their new business needs. These depend on the "
            "jurisdiction, and statement 7 says the business will be in the UK; the earlier turns say it is "
            "an event planning business. Without the profile the answer would be about the wrong country, "
            "so the profile is indispensable."
        ),
        "level": "c",
        "rewrite": "What permits and licences do I need to start an event planning business?",
        "response": (
            "Event planning businesses typically need a business registration, liability insurance, and "
            "event-specific permits such as alcohol, music and venue licences from the local authority."
        ),
        "third_rewrite": _MANUAL,
        "third_response": (
            "In the UK you register with Companies House or as a sole trader with HMRC, get public liability "
            "insurance, and apply to the local council for temporary event notices, premises and music "
            "licences (PRS/PPL)."
        ),
    },
}

# The order demonstrations are offered in: one of each level first.
DEMONSTRATION_ORDER: tuple[str, ...] = ("5-1_2", "2-1_1", "1-1_3", "3-2_6", "7-1_4", "8-1_10")


@dataclass(frozen=True)
class Demonstration:
    """A worked example: a train turn and the answer the model should give for it."""

    turn: Turn
    output: ReformulationOutput

    @property
    def turn_id(self) -> str:
        return self.turn.turn_id


@lru_cache(maxsize=1)
def builtin_demonstrations() -> tuple[Demonstration, ...]:
    """The six curated demonstrations, in :data:`DEMONSTRATION_ORDER`."""
    by_id = {turn.turn_id: turn for turn in datasets.topics(DEMONSTRATION_SOURCE)}
    demos: list[Demonstration] = []
    for turn_id in DEMONSTRATION_ORDER:
        turn = by_id[turn_id]
        fields = dict(_ANNOTATIONS[turn_id])
        for key, value in fields.items():
            if value == _MANUAL:
                fields[key] = turn.manual_rewrite or turn.utterance
        fields["ptkb_used"] = list(turn.ptkb_provenance)
        demos.append(Demonstration(turn=turn, output=ReformulationOutput.model_validate(fields)))
    return tuple(demos)


def conversation_opening(turn: Turn) -> str:
    """The first utterance of the turn's conversation (normalised), which identifies a topic."""
    first = turn.history[0].utterance if turn.history else turn.utterance
    return " ".join(first.lower().split())


def same_conversation(demo: Turn, target: Turn) -> bool:
    """True when ``demo`` may come from the target's conversation (same id or same opening)."""
    return demo.conversation_id == target.conversation_id or conversation_opening(
        demo
    ) == conversation_opening(target)


def select_demonstrations(
    target: Turn, count: int, pool: tuple[Demonstration, ...] | None = None
) -> list[Demonstration]:
    """Up to ``count`` demonstrations from conversations other than the target's, levels interleaved.

    Round robin over the levels (a, b, c, a, b, c), each level's demonstrations
    in :data:`DEMONSTRATION_ORDER`, so three demonstrations cover all levels
    whenever the pool allows it.
    """
    if count <= 0:
        return []
    candidates = builtin_demonstrations() if pool is None else pool
    by_level: dict[str, list[Demonstration]] = {}
    for demo in candidates:
        if not same_conversation(demo.turn, target):
            by_level.setdefault(demo.output.level, []).append(demo)
    chosen: list[Demonstration] = []
    queues = [by_level[level] for level in sorted(by_level)]
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(queue.pop(0))
    return chosen
