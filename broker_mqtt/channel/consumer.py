"""The channel's receiving end: the :class:`Consumer` state machine and the events it reports."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from .config import ChannelConfig
from .errors import ChannelUsageError
from .messages import (
    ConsumerMessage,
    CumulativeAck,
    Event,
    EventBatch,
    Handshake,
    Heartbeat,
    Nack,
    ProducerMessage,
    RetransmitFailed,
)

__all__ = [
    "Connected",
    "Delivered",
    "EventsLost",
    "ProducerLost",
    "ConsumerEvent",
    "ConsumerState",
    "Consumer",
]


# --------------------------------------------------------------------------------------------------
# Events reported to the application


@dataclass(frozen=True, slots=True)
class Connected:
    """The consumer received its handshake; the first delivered event will be ``first_seq``.

    Reported again (after an :class:`EventsLost`) when the producer re-adds a consumer that
    missed events, with the new handshake's greeting.
    """

    first_seq: int
    greeting: Any


@dataclass(frozen=True, slots=True)
class Delivered:
    """Payload number ``seq``; delivered exactly once and in order."""

    seq: int
    payload: Any


@dataclass(frozen=True, slots=True)
class EventsLost:
    """Events ``first..last`` will never arrive (retransmit failed); delivery continues after them."""

    first: int
    last: int


@dataclass(frozen=True, slots=True)
class ProducerLost:
    """No message from the producer for ``connection_timeout`` heartbeats; the consumer is closed."""

    last_heard: float


ConsumerEvent = Connected | Delivered | EventsLost | ProducerLost


# --------------------------------------------------------------------------------------------------
# Consumer


class ConsumerState(enum.Enum):
    AWAITING_HANDSHAKE = "awaiting_handshake"
    CONNECTED = "connected"
    CLOSED = "closed"  # producer lost; every input is ignored


@dataclass(slots=True)
class _ConsumerTimers:
    next_ack: float
    last_heard: float
    heartbeat_interval: float


class Consumer:
    """The receiving end, bound to one producer id; see :mod:`broker_mqtt.channel`. Does no I/O.

    ``handle`` and ``tick`` return events in the order the application must process them.
    """

    def __init__(self, consumer_id: str, producer_id: str, now: float, *,
                 config: ChannelConfig | None = None) -> None:
        self.id = consumer_id
        self.producer = producer_id
        self.config = config if config is not None else ChannelConfig()
        self.state = ConsumerState.AWAITING_HANDSHAKE
        self._next = 0  # next sequence number to deliver (valid once connected)
        self._max_known = 0  # highest sequence number known to exist
        self._buffer: dict[int, Any] = {}  # payloads that arrived early, by seq
        self._outbox: list[ConsumerMessage] = []
        self._timers = _ConsumerTimers(now + self.config.ack_interval, now, self.config.heartbeat_interval)
        self._now = now

    # -- introspection --------------------------------------------------------------------------

    @property
    def next_seq(self) -> int:
        """The sequence number the consumer waits for (0 before the handshake)."""
        return self._next

    @property
    def idle(self) -> bool:
        """Connected, nothing buffered out of order and no known gap (for ``await_idle``)."""
        return self.state is ConsumerState.CONNECTED and not self._buffer and self._max_known < self._next

    @property
    def next_deadline(self) -> float:
        if self.state is ConsumerState.CLOSED:
            return float("inf")
        timeout = self._timers.last_heard + self._timers.heartbeat_interval * self.config.connection_timeout
        return min(self._timers.next_ack, timeout)

    # -- inputs ---------------------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        if now < self._now:
            raise ChannelUsageError(f"time went backwards: {now} < {self._now}")
        self._now = now

    def handle(self, message: ProducerMessage, now: float) -> list[ConsumerEvent]:
        """Process a message from the producer; return the events it releases, in order.

        Messages from other producers, for other consumers, duplicates and anything after
        the consumer closed are ignored.
        """
        self._advance(now)
        if self.state is ConsumerState.CLOSED or message.producer != self.producer:
            return []
        if isinstance(message, (Handshake, RetransmitFailed)) and message.consumer != self.id:
            return []
        self._timers.last_heard = now
        events: list[ConsumerEvent] = []
        match message:
            case Handshake(first_seq=first, greeting=greeting, heartbeat_interval=interval):
                self._timers.heartbeat_interval = interval
                if self.state is ConsumerState.AWAITING_HANDSHAKE:
                    self.state = ConsumerState.CONNECTED
                    self._next = first
                    self._max_known = max(self._max_known, first - 1)
                    for seq in [s for s in self._buffer if s < first]:
                        del self._buffer[seq]
                    events.append(Connected(first, greeting))
                elif first > self._next:  # re-added by the producer: what we missed is gone
                    events.extend(self._fail_through(first - 1))
                    events.append(Connected(first, greeting))
                self._outbox.append(CumulativeAck(self.id, self.producer, self._next - 1))
                events.extend(self._drain())
                self._note_known(max(self._buffer, default=0))
            case Event(seq=seq, payload=payload):
                self._on_event(seq, payload, events)
            case EventBatch(first_seq=first, payloads=payloads):
                if self.state is ConsumerState.CONNECTED and first == self._next and not self._buffer:
                    # the common case: in order, nothing held (what _on_event does, without the dict)
                    events.extend(Delivered(first + i, p) for i, p in enumerate(payloads))
                    self._next = first + len(payloads)
                    self._max_known = max(self._max_known, self._next - 1)
                else:  # as its events one by one, but NACK a revealed gap only once
                    connected = self.state is ConsumerState.CONNECTED
                    buffer, size = self._buffer, self.config.buffer_size
                    for seq, p in enumerate(payloads, first):
                        if connected and seq < self._next:
                            continue  # duplicate
                        if seq not in buffer and (seq == self._next or len(buffer) < size):
                            buffer[seq] = p
                        if connected and seq == self._next:
                            events.extend(self._drain())
                    if connected:
                        self._note_known(first + len(payloads) - 1)
            case Heartbeat(last_seq=last):
                if self.state is ConsumerState.CONNECTED:
                    self._note_known(last)
            case RetransmitFailed(last=last):
                if self.state is ConsumerState.CONNECTED:
                    events.extend(self._fail_through(last))
                    events.extend(self._drain())
        return events

    def tick(self, now: float) -> list[ConsumerEvent]:
        """Run the timers due at ``now``: periodic ACK (and NACK), producer timeout."""
        self._advance(now)
        if self.state is ConsumerState.CLOSED:
            return []
        t = self._timers
        if now >= t.last_heard + t.heartbeat_interval * self.config.connection_timeout:
            self.state = ConsumerState.CLOSED
            self._buffer.clear()
            return [ProducerLost(t.last_heard)]
        if now >= t.next_ack:
            t.next_ack = now + self.config.ack_interval
            if self.state is ConsumerState.CONNECTED:
                self._outbox.append(CumulativeAck(self.id, self.producer, self._next - 1))
                self._nack()
        return []

    def to_send(self) -> list[ConsumerMessage]:
        """Drain and return the messages for the producer, in order."""
        out, self._outbox = self._outbox, []
        return out

    # -- internals ------------------------------------------------------------------------------

    def _on_event(self, seq: int, payload: Any, events: list[ConsumerEvent]) -> None:
        if self.state is ConsumerState.CONNECTED and seq < self._next:
            return  # duplicate
        room = seq == self._next or len(self._buffer) < self.config.buffer_size
        if seq not in self._buffer and room:
            self._buffer[seq] = payload
        if self.state is ConsumerState.CONNECTED:
            events.extend(self._drain())
            self._note_known(seq)

    def _note_known(self, seq: int) -> None:
        """Learned that ``seq`` exists: NACK at once if that reveals a new gap."""
        if seq > self._max_known:
            self._max_known = seq
            self._nack()

    def _drain(self) -> list[ConsumerEvent]:
        events: list[ConsumerEvent] = []
        while self._next in self._buffer:
            events.append(Delivered(self._next, self._buffer.pop(self._next)))
            self._next += 1
        self._max_known = max(self._max_known, self._next - 1)
        return events

    def _fail_through(self, last: int) -> list[ConsumerEvent]:
        """Everything up to ``last`` not held is gone: deliver what we hold, report the gaps."""
        events: list[ConsumerEvent] = []
        self._max_known = max(self._max_known, last)
        held = sorted(s for s in self._buffer if self._next <= s <= last)
        for seq in held + [last + 1]:
            if seq > self._next:
                events.append(EventsLost(self._next, seq - 1))
                self._next = seq
            events.extend(self._drain())
        return events

    def _nack(self) -> None:
        ranges: list[tuple[int, int]] = []
        seq = self._next
        for held in sorted(s for s in self._buffer if s >= self._next) + [self._max_known + 1]:
            if len(ranges) >= self.config.max_nack_ranges or seq > self._max_known:
                break
            if held > seq:
                ranges.append((seq, min(held - 1, self._max_known)))
            seq = held + 1
        if ranges:
            self._outbox.append(Nack(self.id, self.producer, tuple(ranges)))
