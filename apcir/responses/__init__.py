"""Stage 5, respond: PTKB statement ranking and one grounded, cited response per turn.

- :mod:`~apcir.responses.ptkb`: every turn's profile statements ranked, written as a TREC run over statement ids;
- :mod:`~apcir.responses.registry`: the responders (``extractive``, an offline baseline; any model name);
- :mod:`~apcir.responses.stage`: the resumable stage writing one response record per turn.
"""
