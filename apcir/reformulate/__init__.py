"""Stage 1, reformulation: every turn's personalisation level and its three retrieval inputs.

* :func:`apcir.reformulate.stage.reformulate`: turns -> reformulations JSONL (resumable, cached);
* :class:`apcir.reformulate.options.ReformulatorOptions`: the ``[reformulator]`` section / the command's options;
* :data:`apcir.reformulate.registry.REFORMULATORS`: ``heuristic``, ``manual``, ``file:PATH`` and LLMs;
* :mod:`apcir.reformulate.prompt`: the one-call prompt, its ablations and the answer's validation.
"""
