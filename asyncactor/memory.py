"""An in-memory group transport for tests and simulations: latency, jitter, loss, partitions.

Theory of operation
-------------------
A :class:`MemoryHub` is an async context manager owning one delivery task.  ``send`` stamps each
recipient's copy with a delivery time (``latency`` plus up to ``jitter``, both in seconds of the
running clock, which may be trio's ``MockClock``) and pushes it onto a heap; the delivery task
hands copies over when due.  Every copy goes through a CBOR round trip, as on a real wire, so a
tuple arrives as a list.  Partitions are sets of node names: a copy is delivered only if sender
and recipient are in the same set *when it is sent* and *when it is delivered*; names not listed
in :meth:`MemoryHub.partition` form one more group.  Exactly once, own messages included, unless
``loss`` > 0.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import anyio
import cbor2
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

__all__ = ["MemoryHub", "MemoryTransport"]


class MemoryHub:
    """The shared medium.  ``async with MemoryHub(latency=0.05) as hub: t = hub.transport("a")``."""

    def __init__(
        self,
        *,
        latency: float = 0.0,
        jitter: float = 0.0,
        loss: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        self.latency, self.jitter, self.loss = latency, jitter, loss
        self.rng = rng if rng is not None else random.Random(0)
        self._members: dict[str, list[MemoryObjectSendStream[dict[str, Any]]]] = {}
        self._heap: list[tuple[float, int, str, MemoryObjectSendStream[dict[str, Any]], Any, str]] = []
        self._seq = itertools.count()
        self._wake = anyio.Event()
        self._groups: dict[str, int] | None = None
        self._tg: TaskGroup | None = None
        self.sent = 0
        self.delivered = 0
        self.bytes_sent = 0

    async def __aenter__(self) -> MemoryHub:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._deliver_loop)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        return await self._tg.__aexit__(exc_type, exc, tb)

    def transport(self, name: str) -> MemoryTransport:
        return MemoryTransport(self, name)

    # ---- partitions ----
    def partition(self, groups: Iterable[Iterable[str]]) -> None:
        """Split the network: only names in the same group (or all unlisted names) can talk."""
        self._groups = {n: i for i, g in enumerate(groups) for n in g}

    def heal(self) -> None:
        self._groups = None

    def connected(self, a: str, b: str) -> bool:
        if self._groups is None:
            return True
        return self._groups.get(a, -1) == self._groups.get(b, -1)

    # ---- delivery ----
    def _send(self, sender: str, msg: dict[str, Any]) -> None:
        data = cbor2.dumps(msg)
        self.sent += 1
        self.bytes_sent += len(data)
        wire = cbor2.loads(data)  # as a real wire would: tuples come back as lists
        now = anyio.current_time()
        for name, streams in self._members.items():
            if not self.connected(sender, name):
                continue
            if self.loss and self.rng.random() < self.loss:
                continue
            delay = self.latency + (self.rng.random() * self.jitter if self.jitter else 0.0)
            for stream in streams:
                heapq.heappush(self._heap, (now + delay, next(self._seq), name, stream, wire, sender))
        self._wake.set()

    async def _deliver_loop(self) -> None:
        while True:
            if not self._heap:
                await self._wake.wait()
                self._wake = anyio.Event()
                continue
            due = self._heap[0][0]
            now = anyio.current_time()
            if due > now:
                with anyio.move_on_after(due - now):
                    await self._wake.wait()
                if self._wake.is_set():
                    self._wake = anyio.Event()
                continue
            _, _, name, stream, data, sender = heapq.heappop(self._heap)
            if not self.connected(sender, name):
                continue
            try:
                stream.send_nowait(data)
                self.delivered += 1
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass


class MemoryTransport:
    """One member's view of a :class:`MemoryHub`; implements :class:`~asyncactor.Transport`."""

    def __init__(self, hub: MemoryHub, name: str) -> None:
        self.hub, self.name = hub, name

    async def send(self, msg: dict[str, Any]) -> None:
        self.hub._send(self.name, msg)

    @asynccontextmanager
    async def monitor(self) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        send, recv = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
        streams = self.hub._members.setdefault(self.name, [])
        streams.append(send)
        try:
            async with recv:
                yield recv
        finally:
            streams.remove(send)
            if not streams:
                del self.hub._members[self.name]
            send.close()
