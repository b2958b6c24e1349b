"""In-memory wiring of one master and its clones for tier-1 store tests (no event loop).

Every message is encoded to its wire form and CBOR and decoded again, and may be dropped,
duplicated or delayed (reordered) by a seeded ``random.Random``.
"""

from __future__ import annotations

import heapq
import itertools
import random
from typing import Any

import cbor2

from broker_mqtt import channel as ch
from broker_mqtt.store import MemoryBackend
from broker_mqtt.store.clone import Clone
from broker_mqtt.store.commands import decode_control
from broker_mqtt.store.master import Master

_CHANNEL_KINDS = {k.value for k in ch.MessageKind}


def decode(wire: Any) -> Any:
    """One decoder for everything store nodes exchange: channel or control message."""
    if isinstance(wire, list) and wire and wire[0] in _CHANNEL_KINDS:
        return ch.decode_message(wire)
    return decode_control(wire)


class StoreSim:
    def __init__(self, *, seed: int = 0, loss: float = 0.0, dup: float = 0.0, max_delay: float = 0.0,
                 config: ch.ChannelConfig | None = None, master_backend: Any = None) -> None:
        self.rng = random.Random(seed)
        self.loss, self.dup, self.max_delay = loss, dup, max_delay
        self.config = config or ch.ChannelConfig(heartbeat_interval=0.5, ack_interval=0.25,
                                                 connection_timeout=40)
        self.now = 0.0
        backend = master_backend if master_backend is not None else MemoryBackend()
        self.master = Master("s", "M", backend, self.now, config=self.config)
        self.clones: dict[str, Clone] = {}
        self.events: dict[str, list[Any]] = {"M": []}
        self.queue: list[tuple[float, int, str, bytes]] = []
        self.counter = itertools.count()
        self.down: set[str] = set()  # frozen: neither ticks nor receives
        self.partitioned: set[str] = set()  # runs, but every message to or from it is lost

    def node(self, nid: str) -> Any:
        return self.master if nid == "M" else self.clones[nid]

    def add_clone(self, cid: str, **kwargs: Any) -> Clone:
        self.clones[cid] = Clone("s", cid, "M", self.now, config=self.config, **kwargs)
        self.events[cid] = []
        self.flush()
        return self.clones[cid]

    def send(self, src: str, dst: str, msg: Any) -> None:
        cut = self.down | self.partitioned
        if src in cut or dst in cut or self.rng.random() < self.loss:
            return
        copies = 2 if self.rng.random() < self.dup else 1
        wire = cbor2.dumps(msg.to_wire())
        for _ in range(copies):
            at = self.now + 0.001 + self.rng.random() * self.max_delay
            heapq.heappush(self.queue, (at, next(self.counter), dst, wire))

    def flush(self) -> None:
        for env in self.master.to_send():
            for dst in ([env.to] if env.to is not None else list(self.clones)):
                self.send("M", dst, env.message)
        for cid, clone in self.clones.items():
            for env in clone.to_send():
                assert env.to == "M"
                self.send(cid, "M", env.message)

    def step(self) -> None:
        nodes = ["M", *self.clones]
        deadlines = [self.queue[0][0] if self.queue else float("inf")]
        deadlines += [self.node(n).next_deadline for n in nodes if n not in self.down]
        self.now = max(self.now, min(deadlines))
        while self.queue and self.queue[0][0] <= self.now:
            _, _, dst, wire = heapq.heappop(self.queue)
            if dst not in self.down:
                self.events[dst].extend(self.node(dst).handle(decode(cbor2.loads(wire)), self.now))
        for n in nodes:
            if n not in self.down and self.node(n).next_deadline <= self.now:
                self.events[n].extend(self.node(n).tick(self.now))
        self.flush()

    def run_until(self, until: float) -> None:
        while self.now < until:
            self.step()

    def all_idle(self) -> bool:
        return self.master.idle and all(c.idle for c in self.clones.values())

    def run_until_idle(self, limit: float = 1000.0) -> None:
        while not self.all_idle():
            assert self.now < limit, f"not idle by t={limit}"
            self.step()
