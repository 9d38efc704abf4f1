"""Talking to an OpenAI-compatible server: the client, the answer cache, accounting and batch jobs.

A service shared by every stage that asks a model something (reformulation
today; re-ranking, responses and judging build on the same pieces):

* :mod:`apcir.llm.settings`: :class:`~apcir.llm.settings.LLMSettings`, one config section / set of options;
* :mod:`apcir.llm.jobs`: :func:`~apcir.llm.jobs.ask_all`, many questions with cache, concurrency,
  retries, one repair and accounting;
* :mod:`apcir.llm.client`, :mod:`apcir.llm.cache`, :mod:`apcir.llm.accounting`: the parts.

Nothing here needs the openai package or an API key until a request is sent.
"""
