"""A reliable, ordered channel from one producer to many consumers, sans-io.

Theory of operation (Zeek Broker's ``broker::detail::channel``; wire format in ``docs/stores.md`` § 1):

* A :class:`Producer` numbers every payload it is given (``produce``) with consecutive sequence
  numbers starting at 1 and broadcasts it as an :class:`Event`. It keeps the events that not every
  consumer has acknowledged yet in a buffer of at most ``ChannelConfig.buffer_size`` events; when
  the buffer overflows the oldest event is evicted even if unacknowledged.
* A consumer joins through a :class:`Handshake` (unicast, repeated every heartbeat interval until
  the consumer acknowledges it) carrying the first sequence number the consumer will receive. The
  rendezvous (how the producer learns the consumer's id) is up to the caller: ``add_consumer``.
* A :class:`Consumer` delivers payloads exactly once and in sequence order. It buffers events that
  arrive early, sends a :class:`Nack` naming the missing sequence numbers as soon as it notices a
  gap (and again every ack interval while the gap persists), and sends a :class:`CumulativeAck`
  every ack interval even when nothing happens: that is its liveness signal.
* The producer answers a NACK by unicasting the requested events again; if one was already
  evicted it sends :class:`RetransmitFailed` and the consumer reports :class:`EventsLost` (a gap
  the application must repair, e.g. by resynchronising) and skips ahead.
* Consecutive events may travel as one :class:`EventBatch` (``Producer.to_send(batch=n)``: many
  small events in one message); a consumer treats it exactly like its events arriving one after
  another.
* When the producer has broadcast nothing for a heartbeat interval it broadcasts a
  :class:`Heartbeat` carrying its last sequence number, so consumers also notice lost tail events.
* A consumer silent for ``connection_timeout`` heartbeat intervals is dropped
  (:class:`ConsumerLost`); a producer silent as long is declared dead by its consumers
  (:class:`ProducerLost`).

Time is an input: every method takes ``now`` (seconds, any monotonic origin) and both objects
expose ``next_deadline``; the caller calls ``tick(now)`` when it passes. Nothing here does I/O.
Outgoing messages accumulate until drained with ``to_send()``; the caller flushes after each call.

A restarted producer must use a new producer id (e.g. with an incarnation suffix): sequence
numbers restart at 1 and consumers bound to the old id ignore it.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "ChannelConfig",
    "ChannelError",
    "ChannelDecodeError",
    "ChannelProtocolError",
    "ChannelUsageError",
    "MessageKind",
    "Handshake",
    "Event",
    "EventBatch",
    "RetransmitFailed",
    "Heartbeat",
    "CumulativeAck",
    "Nack",
    "ProducerMessage",
    "ConsumerMessage",
    "Message",
    "decode_message",
    "Outgoing",
    "HandshakeCompleted",
    "ConsumerLost",
    "UnknownConsumer",
    "ProducerEvent",
    "Connected",
    "Delivered",
    "EventsLost",
    "ProducerLost",
    "ConsumerEvent",
    "LossReason",
    "PathState",
    "ConsumerState",
    "Producer",
    "Consumer",
]


# --------------------------------------------------------------------------------------------------
# Errors


class ChannelError(Exception):
    """Base class of every error raised by this module."""


class ChannelDecodeError(ChannelError):
    """Wire data that is not a well-formed channel message (the sending peer's fault)."""


class ChannelProtocolError(ChannelError):
    """A well-formed message that breaks the protocol (the peer's fault).

    The receiving object is left exactly as it was before the call.
    """


class ChannelUsageError(ChannelError):
    """The caller misused the API (e.g. a negative time step). State is unchanged."""


# --------------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelConfig:
    """Timers and bounds of a channel; producer and consumers should agree on them.

    - ``heartbeat_interval`` (1.0 s): the producer broadcasts a heartbeat after this long without
      broadcasting, and repeats unacknowledged handshakes this often.
    - ``ack_interval`` (1.0 s): a consumer sends a cumulative ACK (plus a NACK while it has gaps)
      this often, idle or not.
    - ``connection_timeout`` (5): heartbeat intervals of silence after which the producer drops a
      consumer and a consumer declares the producer lost.
    - ``buffer_size`` (1024): events the producer keeps for retransmission, and events a consumer
      buffers out of order; beyond it the producer evicts the oldest, the consumer drops the newest.
    - ``max_nack_ranges`` (64): ranges listed in one NACK; the rest are asked for later.
    """

    heartbeat_interval: float = 1.0
    ack_interval: float = 1.0
    connection_timeout: int = 5
    buffer_size: int = 1024
    max_nack_ranges: int = 64

    def __post_init__(self) -> None:
        if not self.heartbeat_interval > 0 or not self.ack_interval > 0:
            raise ValueError("heartbeat_interval and ack_interval must be positive")
        if self.connection_timeout < 2:
            raise ValueError("connection_timeout must be at least 2 heartbeat intervals")
        if self.buffer_size < 1 or self.max_nack_ranges < 1:
            raise ValueError("buffer_size and max_nack_ranges must be at least 1")

    @property
    def timeout(self) -> float:
        """Seconds of silence after which a peer is considered dead."""
        return self.heartbeat_interval * self.connection_timeout


# --------------------------------------------------------------------------------------------------
# Messages


class MessageKind(enum.Enum):
    """The first element of every message's wire form."""

    HANDSHAKE = "handshake"
    EVENT = "event"
    EVENTS = "events"
    RETRANSMIT_FAILED = "retransmit_failed"
    HEARTBEAT = "heartbeat"
    CUMULATIVE_ACK = "cumulative_ack"
    NACK = "nack"


@dataclass(frozen=True, slots=True)
class Handshake:
    """Producer → one consumer: you receive events from ``first_seq`` on.

    ``greeting`` is an opaque CBOR-able value handed to the consumer's :class:`Connected` event
    (a store master puts its snapshot there). ``heartbeat_interval`` is the producer's.
    """

    producer: str
    consumer: str
    first_seq: int
    heartbeat_interval: float
    greeting: Any = None

    def to_wire(self) -> list[Any]:
        return [MessageKind.HANDSHAKE.value, self.producer, self.consumer, self.first_seq,
                self.heartbeat_interval, self.greeting]

    @classmethod
    def from_wire(cls, wire: Any) -> Handshake:
        """Decode; raise ChannelDecodeError if malformed or another kind of message."""
        return _expect(cls, wire)


@dataclass(frozen=True, slots=True)
class Event:
    """Producer → consumers (broadcast; unicast when retransmitted): payload number ``seq``."""

    producer: str
    seq: int
    payload: Any

    def to_wire(self) -> list[Any]:
        return [MessageKind.EVENT.value, self.producer, self.seq, self.payload]

    @classmethod
    def from_wire(cls, wire: Any) -> Event:
        """Decode; raise ChannelDecodeError if malformed or another kind of message."""
        return _expect(cls, wire)


@dataclass(frozen=True, slots=True)
class EventBatch:
    """Producer → consumers: the events ``first_seq``, ``first_seq + 1``, … with these payloads.

    The same as the :class:`Event` messages one after another (``Producer.to_send(batch=n)``
    builds it); never empty.
    """

    producer: str
    first_seq: int
    payloads: tuple[Any, ...]

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.payloads) - 1

    def events(self) -> list[Event]:
        """The single events this batch stands for."""
        return [Event(self.producer, self.first_seq + i, p) for i, p in enumerate(self.payloads)]

    def to_wire(self) -> list[Any]:
        return [MessageKind.EVENTS.value, self.producer, self.first_seq, list(self.payloads)]

    @classmethod
    def from_wire(cls, wire: Any) -> EventBatch:
        """Decode; raise ChannelDecodeError if malformed or another kind of message."""
        return _expect(cls, wire)


@dataclass(frozen=True, slots=True)
class RetransmitFailed:
    """Producer → one consumer: events ``first..last`` are gone for good (except those it holds)."""

    producer: str
    consumer: str
    first: int
    last: int

    def to_wire(self) -> list[Any]:
        return [MessageKind.RETRANSMIT_FAILED.value, self.producer, self.consumer, self.first, self.last]

    @classmethod
    def from_wire(cls, wire: Any) -> RetransmitFailed:
        """Decode; raise ChannelDecodeError if malformed or another kind of message."""
        return _expect(cls, wire)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Producer → consumers (broadcast) when idle: alive, last sequence number is ``last_seq``."""

    producer: str
    last_seq: int

    def to_wire(self) -> list[Any]:
        return [MessageKind.HEARTBEAT.value, self.producer, self.last_seq]

    @classmethod
    def from_wire(cls, wire: Any) -> Heartbeat:
        """Decode; raise ChannelDecodeError if malformed or another kind of message."""
        return _expect(cls, wire)


@dataclass(frozen=True, slots=True)
class CumulativeAck:
    """Consumer → producer: every event with sequence number ≤ ``seq`` was delivered."""

    consumer: str
    producer: str
    seq: int

    def to_wire(self) -> list[Any]:
        return [MessageKind.CUMULATIVE_ACK.value, self.consumer, self.producer, self.seq]

    @classmethod
    def from_wire(cls, wire: Any) -> CumulativeAck:
        """Decode; raise ChannelDecodeError if malformed or another kind of message."""
        return _expect(cls, wire)


@dataclass(frozen=True, slots=True)
class Nack:
    """Consumer → producer: please resend these inclusive ranges ``((first, last), ...)``."""

    consumer: str
    producer: str
    ranges: tuple[tuple[int, int], ...]

    def to_wire(self) -> list[Any]:
        return [MessageKind.NACK.value, self.consumer, self.producer, [list(r) for r in self.ranges]]

    @classmethod
    def from_wire(cls, wire: Any) -> Nack:
        """Decode; raise ChannelDecodeError if malformed or another kind of message."""
        return _expect(cls, wire)


ProducerMessage = Handshake | Event | EventBatch | RetransmitFailed | Heartbeat
ConsumerMessage = CumulativeAck | Nack
Message = ProducerMessage | ConsumerMessage


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ChannelDecodeError(f"{what} must be a string, got {value!r}")
    return value


def _seq(value: Any, what: str, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ChannelDecodeError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


_KINDS = {k.value: k for k in MessageKind}
_ARITY = {MessageKind.HANDSHAKE: 6, MessageKind.EVENT: 4, MessageKind.EVENTS: 4, MessageKind.RETRANSMIT_FAILED: 5,
          MessageKind.HEARTBEAT: 3, MessageKind.CUMULATIVE_ACK: 4, MessageKind.NACK: 4}


def decode_message(wire: Any) -> Message:
    """Decode the wire form produced by ``to_wire``; raise :class:`ChannelDecodeError` if malformed.

    ``Message.from_wire`` of every message class is this function followed by a type check.
    """
    if not isinstance(wire, (list, tuple)) or not wire:
        raise ChannelDecodeError(f"a channel message is a non-empty list, got {wire!r}")
    head = wire[0]
    kind = _KINDS.get(head) if isinstance(head, str) else None
    if kind is None:
        raise ChannelDecodeError(f"unknown channel message kind {head!r}")
    arity = _ARITY[kind]
    if len(wire) != arity:
        raise ChannelDecodeError(f"{kind.value} has {arity} elements, got {len(wire)}")
    match kind:
        case MessageKind.EVENT:
            return Event(_str(wire[1], "producer"), _seq(wire[2], "seq", 1), wire[3])
        case MessageKind.EVENTS:
            payloads = wire[3]
            if not isinstance(payloads, (list, tuple)) or not payloads:
                raise ChannelDecodeError(f"events payloads must be a non-empty list, got {payloads!r:.200}")
            return EventBatch(_str(wire[1], "producer"), _seq(wire[2], "first_seq", 1), tuple(payloads))
        case MessageKind.HANDSHAKE:
            interval = wire[4]
            if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
                raise ChannelDecodeError(f"heartbeat_interval must be a positive number, got {interval!r}")
            return Handshake(_str(wire[1], "producer"), _str(wire[2], "consumer"),
                             _seq(wire[3], "first_seq", 1), float(interval), wire[5])
        case MessageKind.RETRANSMIT_FAILED:
            first, last = _seq(wire[3], "first", 1), _seq(wire[4], "last", 1)
            if first > last:
                raise ChannelDecodeError(f"retransmit_failed range {first}..{last} is empty")
            return RetransmitFailed(_str(wire[1], "producer"), _str(wire[2], "consumer"), first, last)
        case MessageKind.HEARTBEAT:
            return Heartbeat(_str(wire[1], "producer"), _seq(wire[2], "last_seq"))
        case MessageKind.CUMULATIVE_ACK:
            return CumulativeAck(_str(wire[1], "consumer"), _str(wire[2], "producer"), _seq(wire[3], "seq"))
        case MessageKind.NACK:
            raw = wire[3]
            if not isinstance(raw, (list, tuple)) or not raw:
                raise ChannelDecodeError(f"nack ranges must be a non-empty list, got {raw!r}")
            ranges = []
            for item in raw:
                if not isinstance(item, (list, tuple)) or len(item) != 2:
                    raise ChannelDecodeError(f"a nack range is [first, last], got {item!r}")
                first, last = _seq(item[0], "first", 1), _seq(item[1], "last", 1)
                if first > last:
                    raise ChannelDecodeError(f"nack range {first}..{last} is empty")
                ranges.append((first, last))
            return Nack(_str(wire[1], "consumer"), _str(wire[2], "producer"), tuple(ranges))
    raise AssertionError(kind)  # pragma: no cover


_M = TypeVar("_M", bound="Message")


def _expect(cls: type[_M], wire: Any) -> _M:
    msg = decode_message(wire)
    if not isinstance(msg, cls):
        raise ChannelDecodeError(f"expected {cls.__name__}, got {type(msg).__name__}")
    return msg


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A producer message to send: to consumer ``to``, or to every consumer when ``to`` is None."""

    message: ProducerMessage
    to: str | None = None


# --------------------------------------------------------------------------------------------------
# Events reported to the application


class LossReason(enum.Enum):
    TIMEOUT = "timeout"  # no message for connection_timeout heartbeat intervals
    REMOVED = "removed"  # the application called remove_consumer


@dataclass(frozen=True, slots=True)
class HandshakeCompleted:
    """The consumer acknowledged its handshake."""

    consumer: str


@dataclass(frozen=True, slots=True)
class ConsumerLost:
    """The producer dropped the consumer; its messages are ignored from now on."""

    consumer: str
    reason: LossReason


@dataclass(frozen=True, slots=True)
class UnknownConsumer:
    """A consumer the producer does not know (e.g. dropped earlier) sent ``message``.

    The application may ``add_consumer`` it again; the new handshake makes it skip ahead.
    """

    consumer: str
    message: ConsumerMessage


ProducerEvent = HandshakeCompleted | ConsumerLost | UnknownConsumer


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
# Producer


class PathState(enum.Enum):
    """A consumer as seen by the producer."""

    HANDSHAKING = "handshaking"  # handshake sent, not yet acknowledged
    CONNECTED = "connected"


class _Run:
    """Outgoing events not yet drained: ``payloads`` numbered from ``first``, to ``to`` (None: all)."""

    __slots__ = ("to", "first", "payloads")

    def __init__(self, to: str | None, first: int, payloads: list[Any]) -> None:
        self.to = to
        self.first = first
        self.payloads = payloads


@dataclass(slots=True)
class _Path:
    state: PathState
    first_seq: int
    greeting: Any
    acked: int  # every seq <= acked was delivered
    last_seen: float
    next_handshake: float


class Producer:
    """The sending end; see the module docstring. Not thread-safe, does no I/O."""

    def __init__(self, producer_id: str, now: float, *, config: ChannelConfig | None = None) -> None:
        self.id = producer_id
        self.config = config if config is not None else ChannelConfig()
        self._next_seq = 1
        self._buffer: deque[Any] = deque()  # payloads of events next_seq - len(_buffer) .. next_seq - 1
        self._paths: dict[str, _Path] = {}
        self._outbox: list[Outgoing | _Run] = []
        self._last_broadcast = now
        self._now = now

    # -- introspection --------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """Sequence number of the latest produced event (0 before the first)."""
        return self._next_seq - 1

    @property
    def consumers(self) -> dict[str, PathState]:
        return {cid: path.state for cid, path in self._paths.items()}

    def has_consumer(self, consumer: str) -> bool:
        """Whether ``consumer`` is a consumer (handshaking or connected)."""
        return consumer in self._paths

    def acked(self, consumer: str) -> int:
        """Highest sequence number ``consumer`` acknowledged cumulatively."""
        return self._paths[consumer].acked

    @property
    def buffered(self) -> int:
        """Events kept for retransmission (use it for back-pressure)."""
        return len(self._buffer)

    @property
    def idle(self) -> bool:
        """No pending handshake and every consumer acknowledged the latest event."""
        return all(p.state is PathState.CONNECTED and p.acked == self.last_seq for p in self._paths.values())

    @property
    def next_deadline(self) -> float:
        """When ``tick`` has work to do next."""
        deadlines = [self._last_broadcast + self.config.heartbeat_interval]
        for path in self._paths.values():
            deadlines.append(path.last_seen + self.config.timeout)
            if path.state is PathState.HANDSHAKING:
                deadlines.append(path.next_handshake)
        return min(deadlines)

    # -- inputs ---------------------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        if now < self._now:
            raise ChannelUsageError(f"time went backwards: {now} < {self._now}")
        self._now = now

    def add_consumer(self, consumer: str, now: float, *, greeting: Any = None) -> int:
        """Start a handshake with ``consumer`` from the current sequence number; return it.

        The consumer receives every event produced from now on. Re-adding a known consumer
        restarts its handshake (it skips anything it missed in between).
        """
        self._advance(now)
        first = self._next_seq
        self._paths[consumer] = _Path(PathState.HANDSHAKING, first, greeting, first - 1, now,
                                      now + self.config.heartbeat_interval)
        self._send_handshake(consumer)
        return first

    def remove_consumer(self, consumer: str, now: float) -> list[ProducerEvent]:
        """Forget ``consumer`` (no-op if unknown); its unacknowledged events may be released."""
        self._advance(now)
        if self._paths.pop(consumer, None) is None:
            return []
        self._trim()
        return [ConsumerLost(consumer, LossReason.REMOVED)]

    def produce(self, payload: Any, now: float) -> int:
        """Broadcast ``payload`` as the next event; return its sequence number."""
        if now < self._now:
            self._advance(now)
        self._now = now
        seq = self._next_seq
        self._next_seq = seq + 1
        buffer = self._buffer
        if self._paths:  # the lowest ACK does not change: only the size bound can evict
            buffer.append(payload)
            if len(buffer) > self.config.buffer_size:
                buffer.popleft()
        elif buffer:  # no consumers: nothing is kept
            buffer.clear()
        out = self._outbox
        last = out[-1] if out else None
        if type(last) is _Run and last.to is None:  # it ends with seq - 1: extend it
            last.payloads.append(payload)
        else:
            out.append(_Run(None, seq, [payload]))
        self._last_broadcast = now
        return seq

    def handle(self, message: ConsumerMessage, now: float) -> list[ProducerEvent]:
        """Process a message from a consumer; return what happened.

        Messages for another producer are ignored. Raises :class:`ChannelProtocolError` (state
        unchanged) if a consumer acknowledges or asks for events that were never produced.
        """
        self._advance(now)
        if message.producer != self.id:
            return []
        path = self._paths.get(message.consumer)
        if path is None:
            return [UnknownConsumer(message.consumer, message)]
        events: list[ProducerEvent] = []
        match message:
            case CumulativeAck(seq=seq):
                if seq > self.last_seq:
                    raise ChannelProtocolError(
                        f"{message.consumer} acknowledged {seq} but the last event is {self.last_seq}")
                path.last_seen = now
                if path.state is PathState.HANDSHAKING and seq >= path.first_seq - 1:
                    path.state = PathState.CONNECTED
                    events.append(HandshakeCompleted(message.consumer))
                if seq > path.acked:
                    path.acked = seq
                    self._trim()
            case Nack(ranges=ranges):
                if max(last for _, last in ranges) > self.last_seq:
                    raise ChannelProtocolError(
                        f"{message.consumer} asked for {ranges} but the last event is {self.last_seq}")
                path.last_seen = now
                self._retransmit(message.consumer, path, ranges)
        return events

    def tick(self, now: float) -> list[ProducerEvent]:
        """Run the timers due at ``now``: heartbeat, handshake repeats, consumer timeouts."""
        self._advance(now)
        events: list[ProducerEvent] = []
        for consumer, path in list(self._paths.items()):
            if now >= path.last_seen + self.config.timeout:
                del self._paths[consumer]
                events.append(ConsumerLost(consumer, LossReason.TIMEOUT))
            elif path.state is PathState.HANDSHAKING and now >= path.next_handshake:
                path.next_handshake = now + self.config.heartbeat_interval
                self._send_handshake(consumer)
        if events:
            self._trim()
        if now >= self._last_broadcast + self.config.heartbeat_interval:
            self._outbox.append(Outgoing(Heartbeat(self.id, self.last_seq)))
            self._last_broadcast = now
        return events

    def to_send(self, *, batch: int = 1) -> list[Outgoing]:
        """Drain and return the messages to send, in order.

        With ``batch`` > 1, each run of consecutive events to the same destination comes as
        :class:`EventBatch` messages of up to ``batch`` events (a lone event stays an
        :class:`Event`).
        """
        pending, self._outbox = self._outbox, []
        out: list[Outgoing] = []
        pid = self.id
        for item in pending:
            if type(item) is not _Run:
                out.append(item)  # type: ignore[arg-type]  # not a _Run: an Outgoing
                continue
            payloads, first, to = item.payloads, item.first, item.to
            if batch <= 1 or len(payloads) == 1:
                out.extend(Outgoing(Event(pid, first + i, p), to) for i, p in enumerate(payloads))
                continue
            for i in range(0, len(payloads), batch):
                chunk = payloads[i:i + batch]
                out.append(Outgoing(EventBatch(pid, first + i, tuple(chunk)) if len(chunk) > 1
                                    else Event(pid, first + i, chunk[0]), to))
        return out

    def buffered_payloads(self, after: int = 0) -> list[Any]:
        """The payloads of the buffered events with sequence numbers above ``after``, in order."""
        start = self._next_seq - len(self._buffer)
        return list(self._buffer)[max(0, after + 1 - start):]

    # -- internals ------------------------------------------------------------------------------

    def _send_handshake(self, consumer: str) -> None:
        path = self._paths[consumer]
        self._outbox.append(Outgoing(Handshake(self.id, consumer, path.first_seq,
                                               self.config.heartbeat_interval, path.greeting), consumer))

    def _trim(self) -> None:
        """Drop buffered events that every consumer acknowledged."""
        low = min((p.acked for p in self._paths.values()), default=self.last_seq)
        buffer = self._buffer
        drop = min(low - (self._next_seq - len(buffer)) + 1, len(buffer))
        if drop == len(buffer):
            buffer.clear()
        else:
            for _ in range(drop):
                buffer.popleft()

    def _retransmit(self, consumer: str, path: _Path, ranges: Iterable[tuple[int, int]]) -> None:
        buf_start = self._next_seq - len(self._buffer)
        failed: list[tuple[int, int]] = []
        resend: list[_Run] = []
        for first, last in ranges:
            first = max(first, path.acked + 1)
            if first > last:
                continue
            if first < buf_start:
                failed.append((first, min(last, buf_start - 1)))
            start = max(first, buf_start)
            if start <= last:
                resend.append(_Run(consumer, start, list(itertools.islice(self._buffer, start - buf_start,
                                                                          last + 1 - buf_start))))
        if failed:
            first, last = min(f for f, _ in failed), max(hi for _, hi in failed)
            self._outbox.append(Outgoing(RetransmitFailed(self.id, consumer, first, last), consumer))
        self._outbox.extend(resend)


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
    """The receiving end, bound to one producer id; see the module docstring. Does no I/O.

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
