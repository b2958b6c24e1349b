"""The outgoing queue: coalesces node messages into PUBLISH packets, bounded, sans-io.

Messages for the same MQTT topic and QoS are appended to one open *batch* (their bytes simply
concatenate into a CBOR sequence) until it reaches ``max_batch_bytes``; the sender takes batches
one at a time. While the sender waits for the broker, new messages pile into the open batches,
so the batch size adapts to load: a lone message leaves at once, a flood leaves in large
PUBLISHes. Order is kept per (topic, QoS), which is all MQTT orders anyway.

Coalesced node messages are numbered: each (topic, QoS) is a *stream* with a random id, and a
batch records the stream and the number of its first message (the sender puts them in the
PUBLISH's sequence header, broker_mqtt/wire/sequence.py), so receivers see gaps and repeats.
Raw and retained payloads are not numbered. At most ``max_streams`` streams are remembered (least
recently used out); a forgotten topic starts a new stream, never reuses numbers.

Bounds (``max_pending_bytes``, ``max_pending_messages``) cover everything accepted and not yet
confirmed by the broker, the batch in flight included. The I/O layer decides what "full" means
for the caller: wait while connected, fail with PublishQueueFull while disconnected.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate

__all__ = ["Batch", "InFlight", "Outbox"]


@dataclass(slots=True, eq=False)
class Batch:
    topic: str
    qos: int
    retain: bool = False
    data: bytearray = field(default_factory=bytearray)
    count: int = 0
    confirmed: bool = False
    urgent: bool = False
    wire: bytes | None = None  #: the PUBLISH payload once first sent (sealed, if signing): resent as is
    stream: int | None = None  #: numbered node messages: their stream (None: not numbered)
    first: int = 0  #: the number of the batch's first message in its stream
    numbers: list[int] | None = field(default=None, repr=False)  #: the stream's [id, next number]


class Outbox:
    def __init__(
        self,
        *,
        max_batch_bytes: int = 256 * 1024,
        max_pending_bytes: int = 64 * 1024 * 1024,
        max_pending_messages: int = 200_000,
        max_streams: int = 65_536,
        rng: random.Random | None = None,
    ) -> None:
        self.max_batch_bytes = max_batch_bytes
        self.max_streams = max_streams
        self._rng = rng or random.Random()
        self._streams: OrderedDict[tuple[str, int], list[int]] = OrderedDict()
        self.max_pending_bytes = max_pending_bytes
        self.max_pending_messages = max_pending_messages
        self.pending_bytes = 0
        self.pending_messages = 0
        self._open: dict[tuple[str, int], Batch] = {}
        self._sealed: deque[Batch] = deque()
        self._urgent: deque[Batch] = deque()  # raw payloads that go before everything else

    @property
    def full(self) -> bool:
        return self.pending_bytes >= self.max_pending_bytes or self.pending_messages >= self.max_pending_messages

    def __bool__(self) -> bool:
        return bool(self._urgent or self._sealed or self._open)

    def add(self, topic: str, qos: int, data: bytes, *, retain: bool = False, coalesce: bool = True,
            urgent: bool = False) -> None:
        """Queue ``data`` (one node message, or one raw payload when ``coalesce`` is false).

        ``urgent`` (raw payloads only): one PUBLISH that leaves before every queued batch, in order
        with the other urgent ones. Order against non-urgent messages of the same topic is not
        kept: a topic's messages should all be urgent or none (an election's pings, say)."""
        if urgent:
            batch = Batch(topic, qos, retain, urgent=True)
            self._urgent.append(batch)
        elif coalesce and not retain:
            key = (topic, qos)
            open_batch = self._open.get(key)
            if open_batch is not None and len(open_batch.data) + len(data) > self.max_batch_bytes:
                self._sealed.append(self._open.pop(key))
                open_batch = None
            if open_batch is None:
                open_batch = self._new_batch(key)
            batch = open_batch
            assert batch.numbers is not None
            batch.numbers[1] += 1
        else:
            # Keep per-topic order: whatever is open for this topic goes first.
            opened = self._open.pop((topic, qos), None)
            if opened is not None:
                self._sealed.append(opened)
            batch = Batch(topic, qos, retain)
            self._sealed.append(batch)
        batch.data += data
        batch.count += 1
        self.pending_bytes += len(data)
        self.pending_messages += 1

    def add_many(self, topic: str, qos: int, messages: Sequence[bytes]) -> None:
        """Queue node messages for one topic, in order: the batches :meth:`add` for each would
        build, with the cuts found on the running total of their sizes."""
        if not messages:
            return
        key = (topic, qos)
        limit = self.max_batch_bytes
        ends = list(accumulate(map(len, messages)))
        batch = self._open.get(key)
        start, begin = 0, 0  # index and running-total offset of the first message not queued
        while start < len(messages):
            if batch is None:
                batch = self._new_batch(key)
            # Messages fit while their running total stays within the batch's room; an empty
            # batch takes at least one, however large.
            stop = bisect_right(ends, begin + limit - len(batch.data), lo=start)
            if stop == start and not batch.data:
                stop = start + 1
            if stop > start:
                batch.data += b"".join(messages[start:stop])
                batch.count += stop - start
                assert batch.numbers is not None
                batch.numbers[1] += stop - start
                begin = ends[stop - 1]
                start = stop
            if start < len(messages):
                self._sealed.append(self._open.pop(key))
                batch = None
        self.pending_bytes += ends[-1]
        self.pending_messages += len(messages)

    def _new_batch(self, key: tuple[str, int]) -> Batch:
        """Open a numbered batch for ``key``, continuing its stream (or starting one)."""
        numbers = self._streams.get(key)
        if numbers is None:
            numbers = self._streams[key] = [self._rng.getrandbits(32), 0]
            if len(self._streams) > self.max_streams:
                self._streams.popitem(last=False)
        else:
            self._streams.move_to_end(key)
        batch = self._open[key] = Batch(key[0], key[1], stream=numbers[0], first=numbers[1], numbers=numbers)
        return batch

    def has_room(self, messages: int, size: int) -> bool:
        """Whether ``messages`` more messages of ``size`` bytes in all stay within the bounds
        (always true when nothing is pending, so that any group fits an idle outbox)."""
        if not self.pending_messages:
            return True
        return (self.pending_messages + messages <= self.max_pending_messages
                and self.pending_bytes + size <= self.max_pending_bytes)

    def take(self) -> Batch | None:
        """The next batch to send (urgent ones first, then oldest first), or None. Call :meth:`done`
        or :meth:`retry` after."""
        if self._urgent:
            return self._urgent.popleft()
        if self._sealed:
            return self._sealed.popleft()
        if self._open:
            key = next(iter(self._open))
            return self._open.pop(key)
        return None

    def done(self, batch: Batch) -> None:
        """The broker took ``batch`` (or it was given up): release its share of the bounds."""
        self.pending_bytes -= len(batch.data)
        self.pending_messages -= batch.count

    def retry(self, batch: Batch) -> None:
        """Sending ``batch`` failed: put it back at the front, to go first after reconnecting."""
        (self._urgent if batch.urgent else self._sealed).appendleft(batch)


class InFlight:
    """Batches handed to the MQTT client and not yet confirmed, in the order they were sent.

    The client confirms a batch by its packet id (PUBACK for QoS 1; written to the socket for
    QoS 0), possibly out of order; :meth:`confirm` releases batches only from the front, so what
    is released is always a prefix of what was sent. After a lost connection,
    :meth:`unconfirmed` lists what the broker may not have, in send order.
    """

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit
        self._order: deque[Batch] = deque()
        self._by_id: dict[int, Batch] = {}
        self._early: set[int] = set()  # confirmations that beat their registration

    @property
    def full(self) -> bool:
        return len(self._order) >= self.limit

    def __len__(self) -> int:
        return len(self._order)

    def sent(self, batch: Batch, packet_id: int) -> list[Batch]:
        """Record ``batch`` as sent; returns batches released at once (a confirmation came first)."""
        self._order.append(batch)
        if packet_id in self._early:
            self._early.discard(packet_id)
            batch.confirmed = True
            return self._release()
        self._by_id[packet_id] = batch
        return []

    def confirm(self, packet_id: int) -> list[Batch]:
        """The client confirmed ``packet_id``: the batches now released, oldest first."""
        batch = self._by_id.pop(packet_id, None)
        if batch is None:
            self._early.add(packet_id)
            return []
        batch.confirmed = True
        return self._release()

    def _release(self) -> list[Batch]:
        out = []
        while self._order and self._order[0].confirmed:
            out.append(self._order.popleft())
        return out

    def unconfirmed(self) -> list[Batch]:
        """Everything not released, in send order; forgets it all (the connection is gone)."""
        out = list(self._order)
        self._order.clear()
        self._by_id.clear()
        self._early.clear()
        return out
