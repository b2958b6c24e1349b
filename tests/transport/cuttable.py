"""A TCP relay in front of mosquitto whose links the test can cut: a network cut, for real.

:class:`CuttableRelay` listens on a loopback port and relays every connection to the broker's
port, in one thread. :meth:`CuttableRelay.cut` shuts down both sockets of every link it carries (with ``refusing`` set,
new connections are closed at once too, so the outage lasts):
the client sees the connection end and mosquitto sees a client vanish without DISCONNECT (so it
publishes the will), just as when a cable is pulled. New connections are relayed as before.

:attr:`CuttableRelay.drop` (a predicate on whole MQTT packets from the broker) makes it lose
chosen packets on the way to the client, as a broker that drops messages would: what the broker
sends is cut into packets (fixed header and remaining length) from the start of each link, so the
predicate may be set at any time.
"""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Callable


class CuttableRelay:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self._target = (host, target_port)
        self._listener = socket.create_server((host, 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._peer: dict[socket.socket, socket.socket] = {}  # each side of a link -> the other
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stopping = False
        self.refusing = False  #: while set, new connections are closed at once (a lasting outage)
        self.errors: list[BaseException] = []
        #: when set, each whole MQTT packet from the broker for which it returns True is not passed on
        self.drop: Callable[[bytes], bool] | None = None
        self.dropped = 0  #: packets dropped so
        self._upstream: dict[socket.socket, bytearray] = {}  # broker-side sockets -> bytes not yet passed on
        self._thread = threading.Thread(target=self._run, name=f"relay:{self.port}", daemon=True)
        self._thread.start()

    def cut(self) -> int:
        """Break every link now open; returns how many."""
        with self._lock:
            sides = list(self._peer)
        for sock in sides:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(sides) // 2

    def down(self) -> int:
        """A lasting partition: break every link now open and refuse new ones until :meth:`up`."""
        self.refusing = True
        return self.cut()

    def up(self) -> None:
        """Heal the partition: relay new connections again."""
        self.refusing = False

    def close(self) -> None:
        self._stopping = True
        self._wake_w.send(b"x")
        self._thread.join(10)
        self.cut()
        with self._lock:
            for sock in self._peer:
                sock.close()
            self._peer.clear()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    def _run(self) -> None:
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self._listener, selectors.EVENT_READ)
                sel.register(self._wake_r, selectors.EVENT_READ)
                while not self._stopping:
                    for key, _ in sel.select():
                        sock = key.fileobj
                        assert isinstance(sock, socket.socket)
                        if sock is self._wake_r:
                            sock.recv(64)
                        elif sock is self._listener:
                            self._accept(sel)
                        else:
                            self._relay(sel, sock)
        except BaseException as exc:  # noqa: BLE001 - reported by the fixture, not lost in a thread
            self.errors.append(exc)

    def _accept(self, sel: selectors.BaseSelector) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        if self.refusing:
            client.close()
            return
        try:
            upstream = socket.create_connection(self._target, timeout=5)
        except OSError:
            client.close()  # the broker is down: the client sees its connection refused/closed
            return
        for sock in (client, upstream):
            sock.setblocking(True)
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._peer[client], self._peer[upstream] = upstream, client
            self._upstream[upstream] = bytearray()
        sel.register(client, selectors.EVENT_READ)
        sel.register(upstream, selectors.EVENT_READ)

    def _relay(self, sel: selectors.BaseSelector, sock: socket.socket) -> None:
        with self._lock:
            other = self._peer.get(sock)
        if other is None:
            return
        try:
            data = sock.recv(1 << 16)
            if data:
                pending = self._upstream.get(sock)
                if pending is not None:  # from the broker: framed from the start (drop may be set any time)
                    pending += data
                    data = self._passed(pending)
                if data:
                    other.sendall(data)
                return
        except OSError:
            pass
        with self._lock:  # one side ended or failed: end the link
            self._peer.pop(sock, None)
            self._peer.pop(other, None)
            self._upstream.pop(sock, None)
            self._upstream.pop(other, None)
        for s in (sock, other):
            sel.unregister(s)
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _passed(self, pending: bytearray) -> bytes:
        """Take the whole packets at the head of ``pending``; return those :attr:`drop` keeps."""
        out = bytearray()
        while True:
            length, shift, i = 0, 0, 1
            while i < len(pending) and i <= 4:
                byte = pending[i]
                length |= (byte & 0x7F) << shift
                shift += 7
                i += 1
                if not byte & 0x80:
                    break
            else:
                return bytes(out)  # the remaining length is not all here yet
            end = i + length
            if len(pending) < end:
                return bytes(out)
            packet = bytes(pending[:end])
            del pending[:end]
            drop = self.drop
            if drop is not None and drop(packet):
                self.dropped += 1
            else:
                out += packet
