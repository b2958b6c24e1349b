"""Helpers to run many actors on one :class:`~asyncactor.MemoryHub` and check the outcome.

Theory of operation
-------------------
A :class:`Cluster` spawns each actor in its own cancel scope inside a caller's task group and
logs every event with the (usually simulated) time it was consumed.  :meth:`Cluster.kill` cancels
one node abruptly, as a crash would.  :func:`tenures` turns the log into "it" intervals and
:func:`overlaps` finds two nodes "it" at the same time.  Used by the tests and the benchmark.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from .actor import Actor
from .events import ActorEvent, DetagEvent, TagEvent, UntagEvent
from .memory import MemoryHub

__all__ = ["Cluster", "Record", "Tenure", "tenures", "overlaps"]


@dataclass(frozen=True, slots=True)
class Record:
    time: float
    node: str
    event: ActorEvent | str  # "killed" / "spawned" markers are strings


@dataclass(slots=True)
class Tenure:
    node: str
    start: float
    end: float | None = None  # None: still "it"
    how: str = ""  # "untag", "detag", "killed", "open"


@dataclass
class Cluster:
    hub: MemoryHub
    tg: TaskGroup
    cfg: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    actor_kw: dict[str, Any] = field(default_factory=dict)
    log: list[Record] = field(default_factory=list)
    actors: dict[str, Actor] = field(default_factory=dict)
    consume_delay: dict[str, float] = field(default_factory=dict)
    _scopes: dict[str, anyio.CancelScope] = field(default_factory=dict)

    async def spawn(self, name: str, **kw: Any) -> Actor:
        """Start an actor named ``name``; returns once it runs.  ``kw`` go to :class:`Actor`."""
        opts = {**self.actor_kw, **kw}
        opts.setdefault("rng", random.Random(self.seed * 1_000_003 + zlib.crc32(name.encode())))
        actor: Actor = await self.tg.start(self._run, name, opts)
        return actor

    async def spawn_many(self, names: Iterable[str], **kw: Any) -> None:
        for n in names:
            await self.spawn(n, **kw)

    async def _run(self, name: str, opts: dict[str, Any], *, task_status: Any) -> None:
        with anyio.CancelScope() as scope:
            self._scopes[name] = scope
            async with Actor(self.hub.transport(name), name=name, cfg=self.cfg, **opts) as actor:
                self.actors[name] = actor
                self.log.append(Record(anyio.current_time(), name, "spawned"))
                task_status.started(actor)
                async for ev in actor:
                    self.log.append(Record(anyio.current_time(), name, ev))
                    delay = self.consume_delay.get(name)
                    if delay:
                        await anyio.sleep(delay)

    def kill(self, name: str) -> None:
        """Crash ``name`` now: no goodbye message, its tenure (if any) ends now."""
        self._scopes.pop(name).cancel()
        self.actors.pop(name, None)
        self.log.append(Record(anyio.current_time(), name, "killed"))

    async def kill_and_await_tag(self, victim: str, *, poll: float) -> tuple[float, float]:
        """Crash ``victim``, then wait (polling every ``poll`` s) for the next TagEvent anywhere.

        Returns (time of death, time of that TagEvent): the failover the tests bound and the
        benchmark measures.
        """
        self.kill(victim)
        died = anyio.current_time()
        before = len(self.events(TagEvent))
        while len(self.events(TagEvent)) == before:
            await anyio.sleep(poll)  # noqa: ASYNC110 - polls simulated time
        return died, self.events(TagEvent)[-1].time

    def kill_all(self) -> None:
        for name in list(self._scopes):
            self.kill(name)

    def its(self) -> list[str]:
        """Nodes that are "it" right now (by their core's state)."""
        return [n for n, a in self.actors.items() if a.is_it]

    def events(self, kind: type | None = None, node: str | None = None) -> list[Record]:
        return [
            r for r in self.log
            if (kind is None or isinstance(r.event, kind)) and (node is None or r.node == node)
        ]  # fmt: skip


def tenures(log: Iterable[Record]) -> list[Tenure]:
    """The "it" intervals in a log, in order of start."""
    open_: dict[str, Tenure] = {}
    out: list[Tenure] = []
    for r in log:
        ev = r.event
        if isinstance(ev, TagEvent):
            t = Tenure(r.node, r.time)
            open_[r.node] = t
            out.append(t)
        elif (isinstance(ev, UntagEvent | DetagEvent) or ev == "killed") and r.node in open_:
            ended = open_.pop(r.node)
            ended.end = r.time
            ended.how = "killed" if ev == "killed" else type(ev).__name__.removesuffix("Event").lower()
    for t in open_.values():
        t.how = "open"
    return out


def overlaps(
    ts: Iterable[Tenure], *, since: float = float("-inf"), until: float = float("inf")
) -> list[tuple[Tenure, Tenure]]:
    """Pairs of tenures of different nodes that overlap within ``[since, until]``."""
    items = sorted(ts, key=lambda t: t.start)
    bad = []
    active: list[Tenure] = []
    for t in items:
        end = t.end if t.end is not None else float("inf")
        if end <= since or t.start >= until:
            continue
        active = [a for a in active if (a.end if a.end is not None else float("inf")) > t.start]
        for a in active:
            if a.node != t.node:
                bad.append((a, t))
        active.append(t)
    return bad
