"""The bounded event stream of an attached store handle: ``async with store.events() as ev: async for e in ev``.

One consumer per stream. The handle puts items without waiting (``_put``); a stream ``limit``
items behind keeps the oldest, counts the newest it could not keep, and then yields one
:class:`.EventsDropped` with that count before its next item (loss is never silent). A stream
listens only while its ``async with`` block is open; ``_close`` ends the iteration once the items
held are consumed.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Self

import anyio

from .events import EventsDropped

__all__ = ["EventStream"]


class EventStream:
    """A bounded queue of items for one consumer; overflow is counted and reported in-band."""

    def __init__(self, owner: list[EventStream], limit: int, *, report_drops: bool) -> None:
        self._owner = owner
        self._limit = limit
        self._items: deque[Any] = deque()
        self._dropped = 0
        self._report = report_drops
        self._wake = anyio.Event()
        self._closed = False

    def _put(self, item: Any) -> None:
        if len(self._items) >= self._limit:
            self._dropped += 1
        else:
            self._items.append(item)
        self._wake.set()

    def _close(self) -> None:
        self._closed = True
        self._wake.set()

    async def __aenter__(self) -> Self:
        self._owner.append(self)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self in self._owner:
            self._owner.remove(self)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        while True:
            if self._dropped and self._report:
                n, self._dropped = self._dropped, 0
                return EventsDropped(n)
            if self._items:
                return self._items.popleft()
            if self._closed:
                raise StopAsyncIteration
            self._wake = anyio.Event()
            await self._wake.wait()
