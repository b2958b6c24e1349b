"""The event queue between the protocol and a possibly slow consumer.

Theory of operation
-------------------
The protocol must never wait for the application (docs/asyncactor.md §6).  Events therefore go
into this unbounded-by-kind queue, which keeps memory bounded by *coalescing* what a slow consumer
can do without:

* :class:`PingEvent`: only the newest one waiting is kept (an older ping is stale news);
* :class:`GoodNodeEvent`: waiting ones merge into one, nodes in order of first mention;
* :class:`RawMsgEvent`: at most ``raw_limit`` wait; beyond that the oldest are dropped;
* everything else (Tag, Untag, Detag, Recover, Setup) is never dropped nor reordered.

Counters of what was coalesced or dropped are in :attr:`EventQueue.stats`.  Plain class, no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .events import ActorEvent, GoodNodeEvent, PingEvent, RawMsgEvent

__all__ = ["EventQueue", "QueueStats"]


@dataclass(slots=True)
class QueueStats:
    delivered: int = 0
    coalesced_pings: int = 0
    coalesced_good_nodes: int = 0
    dropped_raw: int = 0
    max_depth: int = 0


class EventQueue:
    """FIFO of events with the coalescing policy above.  ``put`` never blocks nor fails."""

    def __init__(self, *, raw_limit: int = 1000) -> None:
        self._items: deque[ActorEvent | None] = deque()  # None: a tombstone left by coalescing
        self._live = 0
        self._ping_idx: int | None = None  # absolute index of the waiting PingEvent
        self._good_idx: int | None = None
        self._raw: deque[int] = deque()
        self._base = 0  # absolute index of self._items[0]
        self._raw_limit = raw_limit
        self.stats = QueueStats()

    def __len__(self) -> int:
        return self._live

    def _kill(self, idx: int) -> None:
        self._items[idx - self._base] = None
        self._live -= 1

    def put(self, event: ActorEvent) -> None:
        idx = self._base + len(self._items)
        if isinstance(event, PingEvent):
            if self._ping_idx is not None:
                self._kill(self._ping_idx)
                self.stats.coalesced_pings += 1
            self._ping_idx = idx
        elif isinstance(event, GoodNodeEvent):
            if self._good_idx is not None:
                old = self._items[self._good_idx - self._base]
                assert isinstance(old, GoodNodeEvent)
                merged = old.nodes + tuple(n for n in event.nodes if n not in old.nodes)
                self._items[self._good_idx - self._base] = GoodNodeEvent(merged)
                self.stats.coalesced_good_nodes += 1
                return
            self._good_idx = idx
        elif isinstance(event, RawMsgEvent):
            self._raw.append(idx)
            if len(self._raw) > self._raw_limit:
                self._kill(self._raw.popleft())
                self.stats.dropped_raw += 1
        self._items.append(event)
        self._live += 1
        self.stats.max_depth = max(self.stats.max_depth, self._live)

    def get(self) -> ActorEvent:
        """The oldest waiting event.  Raises ``IndexError`` if there is none."""
        while self._items:
            item = self._items.popleft()
            idx = self._base
            self._base += 1
            if item is None:
                continue
            if idx == self._ping_idx:
                self._ping_idx = None
            elif idx == self._good_idx:
                self._good_idx = None
            elif self._raw and self._raw[0] == idx:
                self._raw.popleft()
            self._live -= 1
            self.stats.delivered += 1
            return item
        raise IndexError("no event waiting")
