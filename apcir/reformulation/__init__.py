"""Stage 1, reformulation: every turn's personalisation level and its three retrieval inputs.

* :func:`apcir.reformulation.stage.reformulate`: turns -> reformulations JSONL (resumable, cached);
* :class:`apcir.reformulation.settings.ReformulatorOptions`: the ``[reformulator]`` section / the command's options;
* :data:`apcir.reformulation.registry.REFORMULATORS`: ``heuristic``, ``manual``, ``file:PATH`` and LLMs;
* :mod:`apcir.reformulation.prompt`: the one-call prompt, its ablations and the answer's validation.
"""
