"""A deterministic simulated network for elected-store replicas (sans-io, simulated time).

Every message a replica sends is broadcast to every other live replica with a random latency,
in order per (sender, receiver) pair as over one MQTT broker. Partitions drop messages between
groups; a killed node neither sends nor receives; a paused node keeps its incoming messages
until it resumes (SIGSTOP). The test plays the election: ``tag(node)``/``untag(node)``. A node sends
after each message it handles, or (``batch``) after all those that reached it within that time.
"""

from __future__ import annotations

import heapq
import itertools
import os
import random
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker_mqtt.store.history import Resolver, last_writer_wins
from broker_mqtt.store.replication import (
    ConflictsFound,
    DataChanged,
    MasterChanged,
    Replica,
    ReplicaConfig,
    ResolverRefused,
    WriteDone,
    WriteFailed,
)
from broker_mqtt.store.versioned import Clock, VersionedState
from broker_mqtt.store.versioned_disk import open_disk_state
from broker_mqtt.store.versioned_sqlite import open_state

#: ``disk``: the simulated replicas keep their entries in SQLite files (DiskState), not in memory
RESIDENT = os.environ.get("BROKER_MQTT_TEST_RESIDENT", "memory")
_disk_dir: tempfile.TemporaryDirectory[str] | None = None
_disk_files = itertools.count()


def fresh_state(resident: str | None = None) -> VersionedState:
    """An empty state for a simulated replica: in memory, or (``resident`` or ``RESIDENT`` is
    ``"disk"``) a :class:`~broker_mqtt.store.versioned_disk.DiskState` in a new file of a temporary
    directory kept for the test process."""
    global _disk_dir
    if (resident or RESIDENT) != "disk":
        return VersionedState()
    if _disk_dir is None:
        _disk_dir = tempfile.TemporaryDirectory(prefix="disk-states-")
    return open_disk_state(os.path.join(_disk_dir.name, f"s{next(_disk_files)}.db"))


def staged_entries(inc: Any) -> int:
    """How many entries a snapshot being received (an :class:`~broker_mqtt.store.snapshot_stream.Incoming`)
    holds so far: decoded in memory, or (a state on disk) staged in its file."""
    if not inc.on_disk:
        return len(inc.staged)
    return int(inc.file._read("SELECT count(*) FROM staging").fetchone()[0])


def elect(net: SimNet, name: str) -> Replica:
    """Let the replicas hear each other, tag ``name`` and let it claim: its replica, the one master."""
    net.run(0.5)
    net.tag(name)
    net.run(1.0)
    assert net.masters() == [name]
    return net.nodes[name].replica


class FailingFile:
    """Stands for a state on disk's SQLite connection (``state._conn = FailingFile``): every statement
    fails as a disk I/O error does."""

    def execute(self, sql: str, args: Any = ()) -> Any:
        raise sqlite3.OperationalError("disk I/O error")


@dataclass
class Node:
    replica: Replica
    done: dict[int, Any] = field(default_factory=dict)
    failed: dict[int, Any] = field(default_factory=dict)
    conflicts: list[Any] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # why the resolver's answers were refused
    masters: list[Any] = field(default_factory=list)
    changes: int = 0
    paused: list[tuple[str, Any]] | None = None


class SimNet:
    def __init__(self, names: list[str], *, seed: int = 0, latency: tuple[float, float] = (0.001, 0.01),
                 durability: str = "one", config: ReplicaConfig | None = None, paths: dict[str, Any] | None = None,
                 loss: float = 0.0, batch: float = 0.0, resolver: Resolver = last_writer_wins,
                 resident: str | None = None) -> None:
        self.rng = random.Random(seed)
        self.now = 0.0
        self.resident = resident  # "disk": the replicas keep their entries on disk (None: RESIDENT's)
        self.latency = latency
        self.loss = loss
        # > 0: a node handles every message that reaches it within ``batch`` seconds of the first
        # before it sends anything (as ElectedStore drains once for all the messages of a PUBLISH,
        # and for those that arrived while it ran), not after each message
        self.batch = batch
        self.config = config or ReplicaConfig()
        self.durability = durability
        self.resolver = resolver
        self.nodes: dict[str, Node] = {}
        self.dead: set[str] = set()
        self.groups: list[set[str]] | None = None
        self._queue: list[tuple[float, int, str, str, Any]] = []
        self._pair_time: dict[tuple[str, str], float] = {}
        self._counter = 0
        self.sent = 0
        for name in names:
            self.add(name, (paths or {}).get(name))
        self.run(self.config.member_timeout)  # the replicas hear each other before anything happens

    def add(self, name: str, path: Any = None) -> Node:
        """Start node ``name`` (again: a restart, the old replica's state is closed), persisting
        in ``path`` if given."""
        clock = Clock(wall=lambda: 1_000_000 + self.now)
        old = self.nodes.get(name)
        if old is not None:
            old.replica.state.close()
        replica = Replica("s", f"{name}.0", fresh_state(self.resident) if path is None else open_state(path), self.now, durability=self.durability,
                          config=self.config, clock=clock, resolver=self.resolver)
        node = self.nodes[name] = Node(replica)
        self.dead.discard(name)
        return node

    def close(self) -> None:
        """Close every node's state (their SQLite files). Idempotent."""
        for node in self.nodes.values():
            node.replica.state.close()

    def __enter__(self) -> SimNet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the network -----------------------------------------------------------------------------
    def _linked(self, a: str, b: str) -> bool:
        if self.groups is None:
            return True
        return any(a in g and b in g for g in self.groups)

    def _flush(self, name: str) -> None:
        node = self.nodes[name]
        for msg in node.replica.to_send():
            self._send(name, msg)
        self._collect(name)

    def _send(self, name: str, msg: Any, receivers: set[str] | None = None) -> None:
        """Broadcast ``msg`` of ``name`` (to ``receivers`` only, if given: a sender that dies as it sends)."""
        self.sent += 1
        for other in self.nodes:
            if other == name or other in self.dead or not self._linked(name, other):
                continue
            if receivers is not None and other not in receivers:
                continue
            if self.loss and self.rng.random() < self.loss:
                continue
            t = max(self.now + self.rng.uniform(*self.latency), self._pair_time.get((name, other), 0.0))
            self._pair_time[(name, other)] = t
            self._counter += 1
            heapq.heappush(self._queue, (t, self._counter, name, other, msg))

    def _collect(self, name: str) -> None:
        node = self.nodes[name]
        for ev in node.replica.events():
            match ev:
                case WriteDone(n=n, result=result):
                    node.done[n] = result
                case WriteFailed(n=n, error=error):
                    node.failed[n] = error
                case ConflictsFound(conflicts=conflicts):
                    node.conflicts.extend(conflicts)
                case ResolverRefused(errors=errors):
                    node.refused.extend(errors)
                case MasterChanged():
                    node.masters.append((self.now, ev.master, ev.epoch))
                case DataChanged(changes=changes):
                    node.changes += len(changes)

    def run(self, duration: float) -> None:
        end = self.now + duration
        while True:
            live = [n for n in self.nodes if n not in self.dead and self.nodes[n].paused is None]
            next_tick = min((self.nodes[n].replica.next_deadline for n in live), default=end)
            next_msg = self._queue[0][0] if self._queue else end
            t = min(next_tick, next_msg, end)
            if t >= end and not (self._queue and self._queue[0][0] <= end):
                self.now = end
                return
            self.now = max(self.now, t)
            if self._queue and self._queue[0][0] <= t:
                _, _, src, dst, msg = heapq.heappop(self._queue)
                if dst in self.dead:
                    continue
                node = self.nodes[dst]
                if node.paused is not None:
                    node.paused.append((src, msg))
                    continue
                if self.batch:
                    for one in self._batch_for(dst, msg, min(self.now + self.batch, end)):
                        node.replica.handle(one, self.now)
                else:
                    node.replica.handle(msg, self.now)
                self._flush(dst)
            else:
                for n in live:
                    if self.nodes[n].replica.next_deadline <= self.now:
                        self.nodes[n].replica.tick(self.now, 1_000_000 + self.now)
                        self._flush(n)

    def _batch_for(self, dst: str, first: Any, until: float) -> list[Any]:
        """``first`` and every later message for ``dst`` due by ``until``, in order; the clock moves
        to the last one's arrival (the node handles them all then)."""
        batch, others = [first], []
        while self._queue and self._queue[0][0] <= until:
            item = heapq.heappop(self._queue)
            if item[3] == dst:
                batch.append(item[4])
                self.now = max(self.now, item[0])
            else:
                others.append(item)
        for item in others:
            heapq.heappush(self._queue, item)
        return batch

    # -- the election and the faults ---------------------------------------------------------------
    def tag(self, name: str) -> None:
        self.nodes[name].replica.tagged(self.now)
        self._flush(name)

    def untag(self, name: str) -> None:
        self.nodes[name].replica.untagged(self.now)
        self._flush(name)

    def kill(self, name: str) -> None:
        self.dead.add(name)
        for other in self.nodes:
            if other not in self.dead:
                self.nodes[other].replica.peer_gone(f"{name}.")
                self._flush(other)

    def pause(self, name: str) -> None:
        self.nodes[name].paused = []

    def resume(self, name: str, *, first: Callable[[], None] | None = None) -> None:
        """SIGCONT: the node reads what waited for it. ``first`` runs before that (its overdue timers,
        an election that ran first: the worst order), and then each message it reads is answered at once."""
        node = self.nodes[name]
        queued, node.paused = node.paused or [], None
        if first is None:
            for _src, msg in queued:
                node.replica.handle(msg, self.now)
            self._flush(name)
            return
        first()
        for _src, msg in queued:
            node.replica.handle(msg, self.now)
            self._flush(name)

    def partition(self, *groups: set[str]) -> None:
        self.groups = [set(g) for g in groups]

    def heal(self) -> None:
        self.groups = None

    # -- helpers -----------------------------------------------------------------------------------
    def write(self, name: str, command: Any) -> int:
        n = self.nodes[name].replica.write(command, self.now)
        self._flush(name)
        return n

    def masters(self) -> list[str]:
        return [n for n, node in self.nodes.items() if n not in self.dead and node.replica.is_master]

    def contents(self, name: str) -> dict[Any, Any]:
        return {_hashable(k): v for k, v in self.nodes[name].replica.state.items()}


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


def keep_sent(net: SimNet, kind: str) -> list[tuple[str, Any]]:
    """From now on, ``(sender, message)`` of every message of ``kind`` the nodes send (still sent),
    to deliver again later (a late repeat)."""
    kept: list[tuple[str, Any]] = []
    sent = net._send

    def keep(name: str, msg: Any, receivers: set[str] | None = None) -> None:
        if msg[0] == kind:
            kept.append((name, msg))
        sent(name, msg, receivers)

    net._send = keep  # type: ignore[method-assign]
    return kept


def record_sends(replica: Replica) -> list[list[Any]]:
    """From now on, a copy of everything ``replica`` sends (it is still sent)."""
    out: list[list[Any]] = []
    send = replica.to_send

    def recorded() -> list[list[Any]]:
        msgs = send()
        out.extend(msgs)
        return msgs

    replica.to_send = recorded  # type: ignore[method-assign]
    return out


def drop_acks(net: SimNet) -> dict[str, bool]:
    """From now on ``net`` loses every ``ack`` while the returned switch's ``"acks"`` is True (set it
    False to deliver them again): records a master applied stay short of durable."""
    drop = {"acks": True}
    sent = net._send

    def lossy(name: str, msg: Any, receivers: set[str] | None = None) -> None:
        if drop["acks"] and msg[0] == "ack":
            return
        sent(name, msg, receivers)

    net._send = lossy  # type: ignore[method-assign]
    return drop
