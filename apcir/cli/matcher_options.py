"""The nugget matchers' own options, generated once from their options models (:func:`apcir.options.option_fields`
over :data:`~apcir.evaluation.nuggets.registry.MATCHERS`, plugins included) for ``apcir evaluate-responses
--nuggets`` and ``apcir nuggets agreement``, and the settings of each matcher a command uses from them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from apcir.cli.common import EntryOptions, entry_flag, entry_options, llm_values, settings
from apcir.errors import ApcirError
from apcir.evaluation.nuggets.registry import MATCHERS
from apcir.evaluation.nuggets.settings import MatcherSettings
from apcir.llm.settings import LLMSettings
from apcir.options import not_used, reads, unread


def matcher_options(command: Callable[..., Any]) -> EntryOptions:
    """Give a command every matcher's own options (``--tau``, ``--encoder``, ``--matcher-model``, ``--per-nugget``,
    ``--learned-model``, a plugin's), collected into its ``options`` argument."""
    return entry_options(MATCHERS)(command)


def _flags(given: Mapping[str, Any], llm: Mapping[str, Any]) -> dict[str, str]:
    """Each given key as the command line named it (the LLM settings: the LLM options given)."""
    shown = {key: entry_flag(MATCHERS, key, value) for key, value in given.items() if key != "llm"}
    shown["llm"] = ", ".join("--" + k.replace("_", "-") for k, v in llm.items() if v not in (None, False)) or "llm"
    return shown


def matcher_settings(names: Sequence[str], options: Mapping[str, Any] | None, llm: Mapping[str, Any] | None, *,
                     tau_of: str | None = None) -> dict[str, MatcherSettings]:
    """The settings of each matcher ``names`` from a command's matcher options (and LLM options, the llm
    matcher's client): every option given must be read by one of them, else one line naming the option, the
    matchers and those that read it; each matcher takes the options it reads. With ``tau_of``, ``--tau`` is that
    matcher's only (a second matcher, compared, keeps its own τ)."""
    names = list(dict.fromkeys(names))
    for name in names:
        MATCHERS.check(name)
    given = dict(options or {})
    asking = settings(LLMSettings, **llm_values(dict(llm or {})))
    if asking.model_fields_set:
        given["llm"] = asking
    shown = _flags(given, llm or {})
    checks = [(names, given)]
    if tau_of is not None:  # τ is the first matcher's (a second matcher, compared, keeps its own)
        checks = [([tau_of], {k: v for k, v in given.items() if k == "tau"}),
                  (names, {k: v for k, v in given.items() if k != "tau"})]
    for chosen, keys in checks:
        foreign = unread(MATCHERS, chosen, keys)
        if foreign:
            raise ApcirError(not_used(MATCHERS, chosen, foreign, lambda key: shown.get(key, key)))
    out = {}
    for name in names:
        own = reads(MATCHERS, name, given)
        if tau_of is not None and name != tau_of:
            own = [k for k in own if k != "tau"]
        out[name] = settings(MatcherSettings, matcher=name, **{k: given[k] for k in own})
    return out
