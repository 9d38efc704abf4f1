"""The answer cache and the accounting."""

from __future__ import annotations

import json
import threading

import pytest

from apcir.contract.reformulations import Usage
from apcir.errors import ApcirError
from apcir.llm.accounting import DEFAULT_PRICES, Accounting, load_prices, price_of
from apcir.llm.cache import CachedAnswer, ResponseCache, cache_key, default_cache_dir


def test_key_depends_on_model_messages_and_params():
    messages = [{"role": "user", "content": "hi"}]
    base = cache_key("gpt-4o", messages, {"temperature": 0})
    assert base == cache_key("gpt-4o", [dict(m) for m in messages], {"temperature": 0})
    assert base != cache_key("gpt-4o-mini", messages, {"temperature": 0})
    assert base != cache_key("gpt-4o", [{"role": "user", "content": "hi!"}], {"temperature": 0})
    assert base != cache_key("gpt-4o", messages, {"temperature": 0.7})


def test_put_get_and_corrupt_entry_is_a_miss(tmp_path):
    cache = ResponseCache(tmp_path)
    key = cache_key("m", [], {})
    assert cache.get(key) is None
    cache.put(
        CachedAnswer(key=key, model="m", content="{}", usage=Usage(requests=1, input_tokens=3))
    )
    assert cache.get(key).usage.input_tokens == 3
    cache.path(key).write_text('{"key": "tor')
    assert cache.get(key) is None
    assert not list(tmp_path.rglob(".tmp-*"))


def test_concurrent_writers_never_leave_a_torn_entry(tmp_path):
    cache = ResponseCache(tmp_path)
    key = cache_key("m", [{"role": "user", "content": "x"}], {})
    content = json.dumps({"text": "y" * 20000})
    failures: list[str] = []

    def write_and_read():
        for _ in range(30):
            cache.put(CachedAnswer(key=key, model="m", content=content))
            got = cache.get(key)
            if got is None or got.content != content:
                failures.append("torn")

    threads = [threading.Thread(target=write_and_read) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [f"{key}.json"]


def test_default_cache_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("APCIR_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("APCIR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x" / "apcir" / "llm"


def test_prices_longest_prefix_and_override(tmp_path):
    assert price_of("gpt-4o-2024-08-06", DEFAULT_PRICES) == DEFAULT_PRICES["gpt-4o"]
    assert price_of("gpt-4o-mini-2024-07-18", DEFAULT_PRICES) == DEFAULT_PRICES["gpt-4o-mini"]
    assert price_of("llama3.1:8b", DEFAULT_PRICES) is None
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {"gpt-4o": {"input": 1.0, "output": 2.0}, "llama3.1:8b": {"input": 0, "output": 0}}
        )
    )
    prices = load_prices(path)
    assert prices["gpt-4o"].input == 1.0 and price_of("llama3.1:8b", prices).output == 0
    path.write_text(json.dumps({"gpt-4o": {"input": "cheap"}}))
    with pytest.raises(ApcirError, match="gpt-4o"):
        load_prices(path)


def test_accounting_costs():
    accounting = Accounting(load_prices(None))
    accounting.request("gpt-4o", 0.5, 1_000_000, 100_000)
    accounting.failed_request("gpt-4o", 0.1)
    accounting.cache_hit("gpt-4o")
    accounting.request("local", 1.0, None, None)
    rows = {row.model: row for row in accounting.summary()}
    assert rows["gpt-4o"].requests == 2 and rows["gpt-4o"].failed_requests == 1
    assert rows["gpt-4o"].cost_usd == pytest.approx(2.50 + 1.00)
    assert rows["gpt-4o"].cache_hits == 1
    assert rows["local"].cost_usd is None and rows["local"].requests_without_usage == 1
