"""apcir.io.atomic_write: what an output path can be besides a plain file."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from apcir.errors import ApcirError
from apcir.io import atomic_write, write_text


def test_a_new_file_gets_the_mode_a_plain_open_would_give(tmp_path):
    mask = os.umask(0o022)
    os.umask(mask)
    out = tmp_path / "run.txt"
    write_text(out, "x\n")
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~mask


def test_a_replaced_file_keeps_its_mode(tmp_path):
    out = tmp_path / "run.txt"
    out.write_text("old\n")
    out.chmod(0o640)
    write_text(out, "new\n")
    assert out.read_text() == "new\n" and stat.S_IMODE(out.stat().st_mode) == 0o640


def test_a_symlink_is_written_through(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_text(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"


def test_a_named_pipe_is_written_into_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_text(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert received == [b"through the pipe\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode), "the pipe is still a pipe"


def test_a_failed_body_leaves_the_target_as_it_was(tmp_path):
    out = tmp_path / "run.txt"
    out.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_write(out) as handle:
        handle.write("half")
        raise RuntimeError("stop")
    assert out.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["run.txt"]


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(ApcirError, match="is a directory"):
        write_text(tmp_path, "x")


def test_an_integer_too_long_to_convert_is_malformed_json(tmp_path):
    from apcir.io import iter_jsonl, read_json

    path = tmp_path / "long.json"
    path.write_text('{"id": ' + "9" * 5000 + "}\n")
    with pytest.raises(ApcirError, match="malformed JSON"):
        read_json(path)
    with pytest.raises(ApcirError, match="malformed JSON"):
        list(iter_jsonl(path))
