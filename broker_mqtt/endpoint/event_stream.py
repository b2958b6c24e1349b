"""The bounded event stream: ``async with x.events() as ev: async for e in ev``.

One class for every stream of events in the package: the endpoint's status (``ep.status()``), a
master or clone handle's data changes and status (``store.events()``, ``store.status()``), an
elected store's events (``store.events()``). Data subscriptions are not event streams: they never
drop, the receiver waits for them instead (:mod:`.subscription`).

Theory of operation:

* One consumer per stream. The producer offers each event with :meth:`EventStream._put`, which never
  waits and never switches task; the stream listens only while its ``async with`` block is open (it is
  in its owner's list of streams), and the producer ends it with ``_close`` (the consumer then takes
  the events still held, and the iteration ends).
* A stream that holds ``limit`` unread events keeps the oldest and drops the newest: ``_put`` returns
  False. With a ``dropped`` factory the loss is reported in-band, never silently: the consumer gets
  ``dropped(count)`` exactly where the gap is, after the events held before it (before the next event
  kept, or as soon as it has read all it holds). Without one the producer counts the loss itself (the
  endpoint's ``statistics().status_dropped``).
* ``data`` is the consumer's wish, read by a producer that can tell bulk data changes from the rest
  and builds the former only while some stream wants them (an elected store); others ignore it. The
  consumer may change it at any time.
* The consumer takes every event already held without waiting: a cancellation point on each, and a
  full checkpoint every ``_YIELD_EVERY`` events so that a busy consumer does not starve other tasks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, Self, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["EventStream"]

T = TypeVar("T")


class EventStream(Generic[T]):
    """A bounded stream of events for one consumer; the newest are dropped when it is full.

    ``owner``: the producer's list of open streams (joined on entering, left on exiting).
    ``limit``: the events held unread before new ones are dropped. ``dropped``: makes the in-band
    report of a loss from its count (None: the producer counts drops from ``_put``'s answer).
    """

    _YIELD_EVERY = 64

    def __init__(self, owner: list[Self], limit: int, *,
                 dropped: Callable[[int], T] | None = None, data: bool = True) -> None:
        self._owner = owner
        self._limit = limit
        self._report = dropped
        self.data = data  #: bulk data changes wanted (a hint to producers that can skip building them)
        self._queue: deque[T] = deque()
        self._dropped = 0  # dropped since the last report (only with a ``dropped`` factory)
        self._wakeup = anyio.Event()
        self._closed = False
        self._since_yield = 0

    def _put(self, event: T) -> bool:
        """Offer ``event`` without waiting; False if the stream is full and dropped it (a closed
        stream ignores it: not a drop)."""
        if self._closed:
            return True
        queue = self._queue
        if len(queue) >= self._limit:
            if self._report is not None:
                self._dropped += 1
            return False
        if self._dropped:
            assert self._report is not None
            queue.append(self._report(self._dropped))
            self._dropped = 0
        queue.append(event)
        self._wakeup.set()
        return True

    def _close(self, last: T | None = None) -> None:
        """End the stream: the consumer takes what it holds, then the iteration ends. Idempotent.
        ``last``: the event that ends it (why it ended), held even past ``limit`` (after the report
        of what was dropped), so that a consumer that fell behind still learns it."""
        if last is not None and not self._closed:
            if self._dropped:
                assert self._report is not None
                self._queue.append(self._report(self._dropped))
                self._dropped = 0
            self._queue.append(last)
        self._closed = True
        self._wakeup.set()

    async def __aenter__(self) -> Self:
        self._owner.append(self)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self in self._owner:
            self._owner.remove(self)
        self._close()
        self._queue.clear()
        self._dropped = 0

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        queue = self._queue
        if not queue:
            while not queue:
                if self._dropped:  # the consumer reached the gap and nothing followed it yet
                    assert self._report is not None
                    n, self._dropped = self._dropped, 0
                    queue.append(self._report(n))
                    break
                if self._closed:
                    raise StopAsyncIteration
                self._wakeup = anyio.Event()
                await self._wakeup.wait()
            self._since_yield = 0
        elif self._since_yield >= self._YIELD_EVERY:
            self._since_yield = 0
            await anyio.lowlevel.checkpoint()  # this consumer alone takes from the queue: still there
        else:
            await anyio.lowlevel.checkpoint_if_cancelled()
        self._since_yield += 1
        return queue.popleft()
