"""Requests, tokens, latency and estimated cost of a reformulation run, per model.

Costs come from :data:`DEFAULT_PRICES` (US dollars per million input / output
tokens, OpenAI's list prices for standard requests as of 2025; check them
before quoting a number) or from a JSON file given with ``--prices``
(``{"model": {"input": 2.5, "output": 10.0}}``), which overrides or extends the
table. A model is priced by its exact name, else by the longest listed name it
starts with (``gpt-4o-2024-08-06`` -> ``gpt-4o``); a model with no price (a
local vLLM/Ollama model) gets no cost rather than a made-up one.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from apcir.errors import ApcirError
from apcir.io import read_json


class Price(BaseModel):
    input: float = Field(ge=0, description="USD per 1M input tokens")
    output: float = Field(ge=0, description="USD per 1M output tokens")


DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(input=2.50, output=10.00),
    "gpt-4o-mini": Price(input=0.15, output=0.60),
    "gpt-4.1": Price(input=2.00, output=8.00),
    "gpt-4.1-mini": Price(input=0.40, output=1.60),
    "gpt-4.1-nano": Price(input=0.10, output=0.40),
    "gpt-4-turbo": Price(input=10.00, output=30.00),
    "gpt-3.5-turbo": Price(input=0.50, output=1.50),
}


def load_prices(path: Path | None) -> dict[str, Price]:
    """The default table, overridden by the entries of a JSON price file."""
    prices = dict(DEFAULT_PRICES)
    if path is None:
        return prices
    data = read_json(Path(path))
    if not isinstance(data, dict):
        raise ApcirError(
            'expected an object {"model": {"input": USD/1M, "output": USD/1M}}', path=path
        )
    for model, value in data.items():
        try:
            prices[str(model)] = Price.model_validate(value)
        except ValidationError:
            raise ApcirError(
                f'price of {model!r}: expected {{"input": number, "output": number}} (USD per 1M tokens)',
                path=path,
            ) from None
    return prices


def price_of(model: str, prices: dict[str, Price]) -> Price | None:
    if model in prices:
        return prices[model]
    matches = [name for name in prices if model.startswith(name)]
    return prices[max(matches, key=len)] if matches else None


class ModelUsage(BaseModel):
    """Totals for one model over one run."""

    model: str
    requests: int = Field(default=0, description="HTTP requests sent, retries and repairs included")
    failed_requests: int = Field(
        default=0, description="requests answered with an error status or not at all"
    )
    retries: int = 0
    repairs: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    requests_without_usage: int = Field(
        default=0, description="answers whose server reported no token counts"
    )
    latency_seconds: float = Field(default=0.0, description="summed wall time of the requests")
    max_latency_seconds: float = 0.0
    cost_usd: float | None = Field(
        default=None, description="estimated from the price table; None when unpriced"
    )

    @property
    def mean_latency(self) -> float:
        return self.latency_seconds / self.requests if self.requests else 0.0

    @property
    def tokens_per_second(self) -> float | None:
        """Output tokens per second of request time (a local server's generation speed); None without usage."""
        return self.output_tokens / self.latency_seconds if self.output_tokens and self.latency_seconds else None


class Accounting:
    """Collects usage as requests finish (single event loop, so no locking)."""

    def __init__(self, prices: dict[str, Price] | None = None):
        self.prices = DEFAULT_PRICES if prices is None else prices
        self._models: dict[str, ModelUsage] = {}

    def _of(self, model: str) -> ModelUsage:
        if model not in self._models:
            self._models[model] = ModelUsage(model=model)
        return self._models[model]

    def request(
        self, model: str, seconds: float, input_tokens: int | None, output_tokens: int | None
    ) -> None:
        entry = self._of(model)
        entry.requests += 1
        entry.latency_seconds += seconds
        entry.max_latency_seconds = max(entry.max_latency_seconds, seconds)
        if input_tokens is None and output_tokens is None:
            entry.requests_without_usage += 1
        entry.input_tokens += input_tokens or 0
        entry.output_tokens += output_tokens or 0

    def failed_request(self, model: str, seconds: float) -> None:
        """A request that got an error status or no answer (counted, no tokens)."""
        entry = self._of(model)
        entry.requests += 1
        entry.failed_requests += 1
        entry.latency_seconds += seconds
        entry.max_latency_seconds = max(entry.max_latency_seconds, seconds)

    def retry(self, model: str) -> None:
        self._of(model).retries += 1

    def repair(self, model: str) -> None:
        self._of(model).repairs += 1

    def cache_hit(self, model: str) -> None:
        self._of(model).cache_hits += 1

    def summary(self) -> list[ModelUsage]:
        rows = []
        for entry in self._models.values():
            price = price_of(entry.model, self.prices)
            cost = None
            if price is not None:
                cost = (
                    entry.input_tokens * price.input + entry.output_tokens * price.output
                ) / 1_000_000
            rows.append(entry.model_copy(update={"cost_usd": cost}))
        return rows
