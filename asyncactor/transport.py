"""The transport seam: broadcast a message to the group, and watch the group's messages.

Theory of operation
-------------------
The actor needs exactly two things from a transport: :meth:`Transport.send` a message (a flat
dict) to every member of the group, and :meth:`Transport.monitor` — an async context manager
yielding an async iterator over the group's messages, the sender's own included, each exactly
once and unmodified except for the wire encoding (tuples may come back as lists).  Losing
messages is tolerated only across a network split; duplicating them is not (docs/asyncactor.md §9).

Optionally, a transport that knows when it cannot reach the group (a broker connection) offers
``links()``: an async context manager yielding an async iterator of booleans, the current state
first, then each change (True: connected).  The actor then stops bidding while it is cut off and
re-learns the group when it is back (``ActorCore.offline``/``online``), so a bid made on a view that
stopped at the disconnect never reaches the group late.  It is not part of :class:`Transport`, so
transports without it still conform.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

__all__ = ["Transport"]


@runtime_checkable
class Transport(Protocol):
    async def send(self, msg: dict[str, Any]) -> None:
        """Broadcast ``msg`` to the group (ourselves included).  May block for flow control."""
        ...

    def monitor(self) -> AbstractAsyncContextManager[AsyncIterator[dict[str, Any]]]:
        """``async with transport.monitor() as msgs: async for msg in msgs: ...``.

        Messages sent after the context is entered are delivered; leaving it stops delivery."""
        ...
