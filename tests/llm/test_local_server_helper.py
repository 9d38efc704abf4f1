"""The local-LLM helper's parts that need no llama.cpp (the real server's tests: tests/llm/test_local_llm.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from apcir.errors import ApcirError
from apcir.llm.local_server import HOST, LocalServer, _free_port, default_threads, main, resolve_model, server_available


def test_a_model_is_the_packaged_name_or_an_existing_gguf_file(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_model(gguf) == gguf and resolve_model(str(gguf)) == gguf
    with pytest.raises(ApcirError, match="GGUF model file not found"):
        resolve_model(tmp_path / "none.gguf")


def test_a_missing_model_file_or_server_is_one_line(tmp_path):
    expected = "GGUF model file not found" if server_available() else "llama.cpp's server is not installed"
    with pytest.raises(ApcirError, match=expected):
        LocalServer(tmp_path / "none.gguf")
    assert Path(str(tmp_path)).exists()


def test_the_port_is_a_free_loopback_one():
    assert HOST == "127.0.0.1"
    port = _free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, port))  # still free


def test_the_threads_come_from_apcir_threads_and_a_bad_value_is_one_line(monkeypatch, capsys):
    monkeypatch.delenv("APCIR_THREADS", raising=False)
    assert default_threads() == 2
    monkeypatch.setenv("APCIR_THREADS", "1")
    assert default_threads() == 1
    for bad in ("two", "0", "-1", "1.5"):
        monkeypatch.setenv("APCIR_THREADS", bad)
        with pytest.raises(ApcirError, match="APCIR_THREADS=.*positive whole number"):
            default_threads()
    if server_available():  # the helper's command: one line and exit 2, no server started
        assert main(["--", "true"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: APCIR_THREADS='1.5'") and len(err.strip().splitlines()) == 1
