"""Stage 5, respond: PTKB statement ranking and one grounded, cited response per turn.

- :mod:`~apcir.respond.ptkb`: every turn's profile statements ranked, written as a TREC run over statement ids;
- :mod:`~apcir.respond.registry`: the responders (``extractive``, an offline baseline; any model name);
- :mod:`~apcir.respond.stage`: the resumable stage writing one response record per turn.
"""
