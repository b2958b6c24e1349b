"""A discrete-event network of sans-io ActorCores: no event loop, exact replay from a seed.

Messages are copied through CBOR (tuples become lists).  ``latency(src, dst)`` returns the delay
of one copy; ``drop(src, dst)`` may lose it (a partition).  Tag intervals are recorded per node.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from typing import Any

import cbor2

from asyncactor import ActorCore, Config, DetagEvent, TagEvent, UntagEvent


class SimNet:
    def __init__(
        self,
        names: list[str],
        *,
        config: Config,
        seed: int = 0,
        latency: Callable[[str, str], float] | None = None,
        **core_kw: Any,
    ) -> None:
        self.rng = random.Random(seed)
        self.config = config
        self.core_kw = core_kw
        self.latency = latency or (lambda a, b: 0.0)
        self.now = 0.0
        self.cores: dict[str, ActorCore] = {}
        self.heap: list[tuple[float, int, str, Any]] = []
        self.timers: list[tuple[float, str]] = []  # lazy: an entry counts if it is the core's deadline
        self.seq = itertools.count()
        self.events: list[tuple[float, str, Any]] = []
        self.groups: dict[str, int] | None = None
        self.sent = 0
        for n in names:
            self.add(n)

    def add(self, name: str, **kw: Any) -> ActorCore:
        opts = {**self.core_kw, **kw}
        core = ActorCore(name, config=self.config, rng=random.Random(self.rng.random()), **opts)
        self.cores[name] = core
        core.start(self.now)
        self._flush(name)
        return core

    def kill(self, name: str) -> None:
        self.cores.pop(name)
        self.events.append((self.now, name, "killed"))

    def connected(self, a: str, b: str) -> bool:
        return self.groups is None or self.groups.get(a, -1) == self.groups.get(b, -1)

    def _flush(self, name: str) -> None:
        core = self.cores[name]
        for msg in core.to_send():
            self.sent += 1
            self._send(name, cbor2.loads(cbor2.dumps(msg)))
        for ev in core.events():
            self.events.append((self.now, name, ev))
        d = core.next_deadline
        if d is not None:
            heapq.heappush(self.timers, (d, name))

    def _send(self, name: str, wire: Any) -> None:
        """Deliver one message of ``name`` (already through CBOR) to every node it reaches."""
        for dst in self.cores:
            if self.connected(name, dst):
                t = self.now + self.latency(name, dst)
                heapq.heappush(self.heap, (t, next(self.seq), dst, (name, wire)))

    def run_until(self, until: float) -> None:
        while True:
            t_msg = self.heap[0][0] if self.heap else float("inf")
            t_timer, who = float("inf"), None
            while self.timers:
                d, name = self.timers[0]
                core = self.cores.get(name)
                if core is not None and core.next_deadline == d:
                    t_timer, who = d, name
                    break
                heapq.heappop(self.timers)  # stale: the core's deadline moved or it died
            t = min(t_msg, t_timer)
            if t > until:
                self.now = until
                return
            self.now = max(self.now, t)
            if t_msg <= t_timer:
                _, _, dst, (src, wire) = heapq.heappop(self.heap)
                if dst in self.cores and self.connected(src, dst):
                    self.cores[dst].receive(wire, self.now)
                    self._flush(dst)
            else:
                assert who is not None
                self.cores[who].timer(self.now)
                self._flush(who)

    def tenures(self) -> list[tuple[str, float, float]]:
        open_: dict[str, float] = {}
        out = []
        for t, n, ev in self.events:
            if isinstance(ev, TagEvent):
                open_[n] = t
            elif (isinstance(ev, UntagEvent | DetagEvent) or ev == "killed") and n in open_:
                out.append((n, open_.pop(n), t))
        out += [(n, s, float("inf")) for n, s in open_.items()]
        return sorted(out, key=lambda x: x[1])


def overlapping(tenures: list[tuple[str, float, float]], since: float = float("-inf")) -> list[Any]:
    bad = []
    for i, (n, s, e) in enumerate(tenures):
        for n2, s2, e2 in tenures[i + 1 :]:
            if s2 >= e:
                break
            if n2 != n and e > since and e2 > since and s2 < e:
                bad.append(((n, s, e), (n2, s2, e2)))
    return bad


class CuttableNet(SimNet):
    """A SimNet over an MQTT-like broker whose nodes' connections can be cut and restored.

    While ``name`` is cut, messages to it wait in its session and arrive right after the heal (QoS 1
    with a session that outlived the cut); messages it sends are either dropped (``hold_own=False``:
    what ``broker_mqtt.election.MQTTTransport`` does while disconnected) or held and sent at the heal
    (``hold_own=True``: an outbox that queues across a reconnect). ``signal=True`` tells the core
    (``offline`` at the cut, ``online`` at the heal), as the transport's ``links()`` does.
    """

    def __init__(self, names: list[str], *, hold_own: bool, signal: bool, **kw: Any) -> None:
        self.hold_own = hold_own
        self.signal = signal
        self.cut_nodes: set[str] = set()
        self.session: dict[str, list[tuple[str, Any]]] = {}
        self.outbox: dict[str, list[Any]] = {}
        self.paused: dict[str, Any] = {}
        super().__init__(names, **kw)

    def cut(self, name: str) -> None:
        self.cut_nodes.add(name)
        self.session[name], self.outbox[name] = [], []
        if self.signal:
            self.cores[name].offline(self.now)
            self._flush(name)

    def heal(self, name: str) -> None:
        self.cut_nodes.discard(name)
        if self.signal:
            self.cores[name].online(self.now)
            self._flush(name)
        for src, wire in self.session.pop(name):
            heapq.heappush(self.heap, (self.now, next(self.seq), name, (src, wire)))
        for wire in self.outbox.pop(name):
            self._broadcast(name, wire)

    def pause(self, name: str) -> None:
        """SIGSTOP: the node runs nothing (no timer, no message) until :meth:`resume`; what is sent
        to it waits in its socket."""
        self.paused[name] = self.cores.pop(name)
        self.cut_nodes.add(name)
        self.session[name] = []

    def resume(self, name: str) -> None:
        """SIGCONT, the worst order for the node: its overdue timers run before it reads its socket."""
        core = self.cores[name] = self.paused.pop(name)
        self.cut_nodes.discard(name)
        core.timer(self.now)
        self._flush(name)
        for _src, wire in self.session.pop(name):
            core.receive(wire, self.now)
            self._flush(name)

    def _broadcast(self, name: str, wire: Any) -> None:
        for dst in [*self.cores, *self.paused]:
            if dst in self.cut_nodes:
                self.session[dst].append((name, wire))
            else:
                heapq.heappush(self.heap, (self.now + self.latency(name, dst), next(self.seq), dst, (name, wire)))

    def _send(self, name: str, wire: Any) -> None:
        if name not in self.cut_nodes:
            self._broadcast(name, wire)
        elif self.hold_own:
            self.outbox[name].append(wire)
