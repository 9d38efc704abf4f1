"""A real Milvus server for the tests: the Milvus 2.3.5 standalone binary that the ``milvus`` package ships
(``pip install milvus==2.3.5``; ``make test`` installs it), started on loopback ports of its own.

The package's ``default_server`` scans from fixed default ports and its embedded etcd always binds 2379/2380,
so two servers (two pytest-xdist workers, two people's test runs) would collide. :class:`Standalone` gives each
server its own free ports, etcd's included (through an etcd config file), and lets one server at a time on this
machine choose its ports and start (a file lock), so the ports it chose are bound before the next one looks.

:class:`Forward` reaches a server through another port (what a port-forward or a load balancer does), for the
"same collection, another address" tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VERSION = "2.3.5"
PORT_KEYS = ("root_coord_port", "proxy_port", "proxy_internal_port", "query_coord_port", "query_node_port",
             "index_coord_port", "index_node_port", "data_coord_port", "data_node_port")
_START_LOCK = Path(tempfile.gettempdir()) / "apcir-milvus-standalone-start.lock"


def installed() -> bool:
    """Whether the ``milvus`` package (the standalone server) is installed."""
    return importlib.util.find_spec("milvus") is not None


@contextlib.contextmanager
def _start_lock() -> Iterator[None]:
    with open(_START_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that are free now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class Standalone:
    """One Milvus standalone server with its data under ``base``; :meth:`start` takes about 30 s."""

    def __init__(self, base: Path) -> None:
        self.base = Path(base)
        self.server: Any = None
        self.port = 0

    def uri(self, collection: str, host: str = "127.0.0.1", port: int | None = None) -> str:
        return f"milvus://{host}:{port or self.port}/{collection}"

    def start(self) -> Standalone:
        from milvus import MilvusServer, MilvusServerConfig, __version__

        assert __version__ == VERSION, f"the tests are written against milvus=={VERSION}, found {__version__}"
        self.base.mkdir(parents=True, exist_ok=True)
        with _start_lock():
            ports = free_ports(len(PORT_KEYS) + 3)
            etcd_client, etcd_peer, web = ports[-3:]
            etcd = self.base / "etcd.yaml"
            etcd.write_text(f"name: default\nlisten-client-urls: http://127.0.0.1:{etcd_client}\n"
                            f"advertise-client-urls: http://127.0.0.1:{etcd_client}\n"
                            f"listen-peer-urls: http://127.0.0.1:{etcd_peer}\n"
                            f"initial-advertise-peer-urls: http://127.0.0.1:{etcd_peer}\n"
                            f"initial-cluster: default=http://127.0.0.1:{etcd_peer}\n")
            config = MilvusServerConfig(etcd_port=etcd_client, **dict(zip(PORT_KEYS, ports)))
            marker = "  use:\n    embed: true"
            assert marker in config.template_text, "the milvus package's config template changed"
            # the embedded etcd reads its own ports from etcd.config.path (else it binds 2379 and 2380)
            config.template_text = config.template_text.replace(marker, f"  config:\n    path: {etcd}\n{marker}", 1)
            for component in ("rootCoord", "proxy", "queryCoord", "queryNode", "indexNode", "dataCoord", "dataNode"):
                config.set(f"{component}.ip", "127.0.0.1")  # register loopback addresses, not the host's
            self.server = MilvusServer(config)
            self.server.set_base_dir(str(self.base))
            self.server.webservice_port = web
            try:
                self.server.start()  # waits for the health check (up to 180 s)
            except BaseException:
                self.stop()
                raise
        self.port = int(self.server.listen_port)
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def log_tail(self, lines: int = 20) -> str:
        """The end of the server's own log (for a failure message)."""
        path = self.base / "logs" / "milvus-stderr.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


class Forward:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:target`` (byte for byte, one thread pair a connection)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self._open: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            self.connections += 1
            self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        for sock in self._open:
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> Forward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
