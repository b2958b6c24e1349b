"""A TCP proxy that a test can cut and restore: the network between two bridged mosquittos.

``CuttableProxy(target_port)`` listens on a free loopback port and relays every connection to
``127.0.0.1:target_port``. :meth:`CuttableProxy.cut` closes every relayed connection at once and
makes the proxy close new ones as soon as it accepts them (the far side sees a dead link, as in a
network split); :meth:`CuttableProxy.restore` relays again. Threads, not asyncio: the live tests
that use it are synchronous and drive node processes.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class CuttableProxy:
    """Relays ``127.0.0.1:port`` -> ``127.0.0.1:target_port`` until :meth:`cut`."""

    def __init__(self, target_port: int, *, host: str = "127.0.0.1") -> None:
        self.host = host
        self.target_port = target_port
        self._listener = socket.create_server((host, 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self.accepted = 0  # connections relayed (not counting those refused while cut)
        self.refused = 0  # connections closed at once while cut
        self._thread = threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True)
        self._thread.start()

    @property
    def is_cut(self) -> bool:
        return self._cut

    def active(self) -> int:
        """How many relayed connections are open now (client side)."""
        with self._lock:
            return len(self._conns) // 2

    def cut(self) -> None:
        """Close every relayed connection and refuse new ones until :meth:`restore`."""
        with self._lock:
            self._cut = True
            conns, self._conns = self._conns, set()
        for s in conns:
            _close(s)

    def restore(self) -> None:
        """Relay new connections again (the bridge reconnects on its own)."""
        with self._lock:
            self._cut = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._cut = True
            conns, self._conns = self._conns, set()
        _close(self._listener)
        for s in conns:
            _close(s)
        self._thread.join(5)

    def __enter__(self) -> CuttableProxy:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- relaying ---------------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                refuse = self._cut or self._closed
            if refuse:
                self.refused += 1
                _close(client)
                continue
            try:
                upstream = socket.create_connection((self.host, self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._cut or self._closed:  # cut while we were connecting
                    _close(client)
                    _close(upstream)
                    continue
                self._conns |= {client, upstream}
                self.accepted += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), name="proxy-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            _close(src)
            _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
