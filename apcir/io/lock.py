"""One writer at a time: the lock a run directory (or any folder apcir writes into) is held under."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from apcir.errors import ApcirError
from apcir.io.read import os_problem
from apcir.settings import whole_number


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def exclusive(lock_path: Path, what: str, guards: Path | None = None) -> Iterator[None]:
    """Hold ``lock_path`` while the body runs; a second holder fails at once, naming the first.

    The lock is an ``flock`` on the file, which the kernel releases when its
    holder dies, so a lock left by a killed process is taken over (with a
    message saying so). The file stays, saying who held it last, unless the
    output it ``guards`` does not exist at the end (a failed start).
    """
    import fcntl
    import socket

    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        handle = lock_path.open("a+", encoding="utf-8")
    except OSError as exc:
        raise ApcirError(f"cannot create the lock file: {os_problem(exc)}", path=lock_path) from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise ApcirError(
                f"{what} is being written by another apcir process ({holder}); wait for it to finish or use "
                "another output", path=lock_path
            ) from None
        handle.seek(0)
        previous = handle.read().strip()
        words = previous.split()  # "held by pid PID on HOST since ..." (a pid apcir cannot read is let be)
        if previous.startswith("held by pid ") and len(words) > 3 and whole_number(words[3]) and len(words[3]) < 10:
            pid = int(words[3])
            if pid != os.getpid() and not process_alive(pid):
                from apcir.console import warn

                warn(f"{what}: taking over the lock of pid {pid}, which stopped without releasing it")
        handle.seek(0)
        handle.truncate()
        handle.write(f"held by pid {os.getpid()} on {socket.gethostname()} since "
                     f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            handle.write(f"released by pid {os.getpid()} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
            handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()
        if guards is not None and not guards.exists():
            lock_path.unlink(missing_ok=True)  # the output it guarded was never written: leave nothing behind
