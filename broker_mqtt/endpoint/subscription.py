"""Subscriber streams: what ``ep.subscribe()``, ``ep.subscribe_raw()`` and ``ep.status()`` return.

Each is an async context manager and an async iterator over a bounded memory stream whose
items are *lists* (one per PUBLISH), consumed one element at a time: the endpoint's receiver
pays the stream's cost once per PUBLISH, not once per message. When a subscription's stream is
full, its ``overflow`` policy decides (Zeek Broker's, for local subscribers): ``"wait"`` (the
default: the receiver waits, nothing is lost, and every other subscriber of the endpoint waits
too), ``"drop_oldest"`` or ``"drop_newest"`` (the PUBLISH batch held longest, or the one that came,
is dropped: the receiver never waits for this subscriber, and its memory stays bounded). Drops are
counted (the subscription's ``dropped``, the endpoint's ``statistics().subscriber_dropped``; they
are not counted as ``delivered``) and reported as an ``ErrorEvent`` (``SUBSCRIBER_OVERFLOW``) on the
status streams: the first drop at once, then at most one report a second per subscription, each
with the number dropped since the last. Status streams drop the newest event and count it
(docs/guarantees.md). A data subscription decodes payloads in its own task, a few
consecutive messages at a time (``codec.decode_many``: one C call instead of one per message);
a malformed payload is reported when the iteration reaches it, as before.

The endpoint's own messages reach ``local=True`` subscriptions at send time
(:meth:`_Stream._deliver_own`), never through the broker. That never waits: a publisher may be
the very task that consumes the subscription. Own batches that do not fit wait in a list of
their own; the consumer takes them, in order, after what the stream already holds, and until
they are all taken the receiver waits before handing over anything newer, so everything stays
in arrival order.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from typing import Any, Literal, Protocol, Self, get_args

import anyio
from anyio import current_time

from ..errors import UsageError
from ..wire import codec
from ..wire.message import Kind
from ..wire.topics import covers, prefix_matches, validate_prefix
from .events import _MISSING, ErrorCode, ErrorEvent, Message, StatusEvent, _decode_all
from .statistics import EndpointStatistics


class Hub(Protocol):
    """What a stream needs from the endpoint that feeds it (the endpoint is one; defined here so that
    this module does not import the endpoint built on it)."""


    async def _add_subscriber(self, sub: Subscription) -> None: ...

    async def _add_raw_subscriber(self, sub: RawSubscription) -> None: ...

    async def _remove_subscriber(self, sub: _Stream) -> None: ...

    def _report(self, event: StatusEvent) -> None: ...

    _stats: EndpointStatistics  #: its counters (a drop counts in ``subscriber_dropped``)

__all__ = ["Subscription", "RawSubscription", "RawMessage", "Overflow"]

#: what a full subscription does with a PUBLISH batch that comes (see the module docstring)
Overflow = Literal["wait", "drop_oldest", "drop_newest"]
OVERFLOW_POLICIES: tuple[str, ...] = get_args(Overflow)
OVERFLOW_REPORT_INTERVAL = 1.0  #: seconds between two overflow reports of one subscription, at least

#: Messages whose data a subscription decodes in one call (codec.decode_many). Larger chunks
#: save little more per message and leave the values out of the CPU cache by the time they are used.
_DECODE_CHUNK = 64


@dataclass(frozen=True, slots=True)
class RawMessage:
    """A PUBLISH on a raw MQTT subscription (no node-message envelope)."""

    topic: str
    payload: bytes
    retain: bool
    qos: int = 0  #: the QoS it was delivered with (the lower of the publisher's and the subscription's)


class _Stream:
    """Common part of subscriptions: a bounded stream of batches, consumed one item at a time."""

    def __init__(self, endpoint: Hub, buffer: int, overflow: Overflow = "wait") -> None:
        if overflow not in OVERFLOW_POLICIES:
            raise UsageError(f"overflow takes one of {', '.join(map(repr, OVERFLOW_POLICIES))}, not {overflow!r}")
        self._endpoint = endpoint
        self.overflow: Overflow = overflow
        self.dropped = 0  #: messages (raw: PUBLISHes) this subscriber lost to its overflow policy
        self._unreported = 0  # of those, dropped since the last report
        self._reported_at = -math.inf  # when that was (the event loop's clock)
        self._send, self._receive = anyio.create_memory_object_stream[list[Any]](buffer)
        self._items: deque[Any] = deque()
        self._own: deque[list[Any]] = deque()  # own batches that did not fit (after the stream's)
        self._own_taken: anyio.Event | None = None  # set when _own empties

    def _deliver_nowait(self, items: list[Any]) -> bool:
        if self._own:
            return False  # own batches wait: nothing newer may overtake them
        try:
            self._send.send_nowait(items)
        except anyio.WouldBlock:
            if self.overflow == "wait":
                return False
            self._drop(items)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the subscriber is leaving; nothing to deliver to
        return True

    #: whether the messages handed to this stream were counted as ``delivered`` (a drop takes them back)
    _counts_delivered = False

    def _drop(self, items: list[Any]) -> None:
        """The stream is full: drop per the overflow policy, count, and report (at most one report
        every OVERFLOW_REPORT_INTERVAL)."""
        lost = items
        if self.overflow == "drop_oldest":
            try:
                lost = self._receive.receive_nowait()
                self._send.send_nowait(items)
            except anyio.WouldBlock:  # (a buffer of 0: nothing is held, so the new batch goes)
                lost = items
        n = len(lost)
        self.dropped += n
        self._unreported += n
        stats = self._endpoint._stats
        stats.subscriber_dropped += n
        if self._counts_delivered:
            stats.delivered -= n
        now = current_time()
        if now - self._reported_at >= OVERFLOW_REPORT_INTERVAL:
            self._reported_at = now
            self._endpoint._report(ErrorEvent(
                ErrorCode.SUBSCRIBER_OVERFLOW,
                f"{self!r} is full ({self._send.statistics().max_buffer_size} PUBLISH batches held): "
                f"{self.overflow.replace('_', ' ')}, {self._unreported} messages dropped since the last report"))
            self._unreported = 0

    async def _deliver(self, items: list[Any]) -> None:
        while self._own:
            if self._own_taken is None:
                self._own_taken = anyio.Event()
            await self._own_taken.wait()
        try:
            await self._send.send(items)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass

    def _deliver_own(self, items: list[Any]) -> None:
        """Hand over a batch of this endpoint's own messages without ever waiting (a full stream
        keeps it in ``_own``, taken after the stream's items)."""
        if not self._deliver_nowait(items):
            self._own.append(items)

    def _own_drained(self) -> None:
        event = self._own_taken
        if event is not None:
            self._own_taken = None
            event.set()

    async def _next_item(self) -> Any:
        while not self._items:
            try:
                if self._own:
                    # Everything in the stream arrived before the own batches: take it first.
                    try:
                        batch = self._receive.receive_nowait()
                    except anyio.WouldBlock:
                        batch = self._own.popleft()
                        if not self._own:
                            self._own_drained()
                else:
                    batch = await self._receive.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                raise StopAsyncIteration from None
            self._items.extend(batch)
        return self._items.popleft()

    @property
    def buffered(self) -> int:
        """Items of the current PUBLISH already received and not yet taken (0: the next may wait)."""
        return len(self._items)

    def _close(self) -> None:
        self._send.close()
        self._receive.close()
        self._own.clear()
        self._own_drained()

    async def _detach(self) -> None:
        """Unregister from the endpoint (after the stream is closed)."""
        await self._endpoint._remove_subscriber(self)

    def __aiter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._close()
        await self._detach()


class Subscription(_Stream):
    """Messages on a set of topic prefixes: ``async with ep.subscribe(...) as sub: async for msg in sub``.

    Entering blocks until the broker confirmed the subscriptions (when connected). Messages
    arrive in order per publisher and topic, each once, with ``data`` already decoded;
    messages whose payload does not decode are skipped and reported as an ErrorEvent. When the
    buffer is full its ``overflow`` policy decides (see the module docstring): by default the
    endpoint's receiver waits for this subscriber (nothing is dropped). On the
    prefixes in ``local`` (all of them for ``subscribe(..., local=True)``) the endpoint's own
    messages are handed over when sent, in send order, and never make the publisher wait (beyond
    the buffer they are held in an unbounded list, or dropped per a drop policy).
    """

    _counts_delivered = True

    def __init__(
        self,
        endpoint: Hub,
        prefixes: tuple[str, ...],
        *,
        local: bool | Iterable[str],
        buffer: int,
        kind: Kind = Kind.DATA,
        overflow: Overflow = "wait",
    ) -> None:
        if not prefixes:
            raise UsageError("subscribe needs at least one topic prefix")
        for p in prefixes:
            validate_prefix(p)
        #: the prefixes on which the endpoint's own messages are delivered (empty: none)
        self.local: tuple[str, ...] = local_prefixes(local, prefixes)
        super().__init__(endpoint, buffer, overflow)
        self.prefixes = prefixes
        self.kind = kind

    def __repr__(self) -> str:
        return f"<Subscription {' '.join(self.prefixes)}>"

    async def __aenter__(self) -> Self:
        try:
            await self._endpoint._add_subscriber(self)
        except BaseException:
            self._close()  # never entered: nobody else closes the streams
            raise
        return self

    async def __anext__(self) -> Message:
        items = self._items
        while True:
            msg: Message = items.popleft() if items else await self._next_item()
            if msg._data is _MISSING:
                # Decode this message and the next few together: one C call per chunk, and a
                # chunk small enough that its values are still in the CPU cache when used.
                _decode_all([msg, *islice(items, _DECODE_CHUNK - 1)])
                if msg._data is _MISSING:
                    try:
                        msg.data  # noqa: B018 - raises: the payload is malformed
                    except codec.DecodeError as exc:
                        self._endpoint._report(
                            ErrorEvent(ErrorCode.MALFORMED_PAYLOAD, str(exc), topic=msg.topic, sender=msg.sender)
                        )
                        continue
            return msg

    async def get(self) -> Message:
        """The next message (same as ``await anext(sub)``); raises StopAsyncIteration when closed."""
        return await self.__anext__()


class RawSubscription(_Stream):
    """PUBLISHes on raw MQTT filters, own ones included, each exactly once (by subscription id)."""

    def __init__(self, endpoint: Hub, filters: tuple[str, ...], *, buffer: int, overflow: Overflow = "wait") -> None:
        if not filters:
            raise UsageError("subscribe_raw needs at least one MQTT filter")
        super().__init__(endpoint, buffer, overflow)
        self.filters = filters

    def __repr__(self) -> str:
        return f"<RawSubscription {' '.join(self.filters)}>"

    async def __aenter__(self) -> Self:
        try:
            await self._endpoint._add_raw_subscriber(self)
        except BaseException:
            self._close()  # never entered: nobody else closes the streams
            raise
        return self

    async def __anext__(self) -> RawMessage:
        item: RawMessage = await self._next_item()
        return item


def local_prefixes(local: Any, prefixes: tuple[str, ...]) -> tuple[str, ...]:
    """``subscribe``'s ``local`` as the prefixes on which own messages are delivered; UsageError if bad."""
    if local is True or local is False:
        return prefixes if local else ()
    if isinstance(local, (str, bytes)) or not isinstance(local, Iterable):
        raise UsageError(f"local takes True, False or a collection of topic prefixes, not {local!r}")
    own = tuple(local)
    if not all(isinstance(p, str) for p in own):
        raise UsageError(f"local takes topic prefixes (strings), not {own!r}")
    subscribed = [validate_prefix(p) for p in prefixes]
    for p in own:
        if not any(covers(s, validate_prefix(p)) for s in subscribed):
            raise UsageError(f"local prefix {p!r} is not under a subscribed prefix {list(prefixes)}")
    return own


def deliver_own(locals_: dict[Subscription, list[tuple[str, ...]]], kind: Kind, topic: str,
                levels: tuple[str, ...], payloads: list[bytes], me: bytes) -> int:
    """Hand an endpoint's own messages on ``topic`` to its subscribers of ``kind`` with a local prefix
    that matches; return how many messages were handed over in all.

    Called at send time, only when such subscribers exist: the broker does not send our own messages
    back (No Local), and the receive path drops any that still come. The prefix test is
    :meth:`SubscriptionTable.match`'s; a subscriber's prefixes are minimal, so at most one of them
    matches. Never waits (see :class:`Subscription`).
    """
    delivered = 0
    for sub, prefixes in locals_.items():
        if sub.kind is kind and any(prefix_matches(p, levels) for p in prefixes):
            # each subscriber its own Messages (data decoded for it alone: see Message)
            sub._deliver_own([Message(topic, me, p) for p in payloads])
            delivered += len(payloads)
    return delivered
