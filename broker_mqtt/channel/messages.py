"""The channel's wire messages: typed frozen dataclasses and their one decode path.

Every message encodes with ``to_wire()`` (a list headed by its :class:`MessageKind`; the CBOR
form is in ``docs/stores.md`` § 1) and decodes with :func:`decode_message`, which raises
:class:`~broker_mqtt.channel.errors.ChannelDecodeError` and nothing else on malformed input;
each class's ``from_wire`` is that function plus a type check.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import peer_repr
from .errors import ChannelDecodeError

__all__ = [
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
]


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
        raise ChannelDecodeError(f"{what} must be a string, got {peer_repr(value)}")
    return value


def _seq(value: Any, what: str, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ChannelDecodeError(f"{what} must be an integer >= {minimum}, got {peer_repr(value)}")
    return value


_KINDS = {k.value: k for k in MessageKind}
_ARITY = {MessageKind.HANDSHAKE: 6, MessageKind.EVENT: 4, MessageKind.EVENTS: 4, MessageKind.RETRANSMIT_FAILED: 5,
          MessageKind.HEARTBEAT: 3, MessageKind.CUMULATIVE_ACK: 4, MessageKind.NACK: 4}


def decode_message(wire: Any) -> Message:
    """Decode the wire form produced by ``to_wire``; raise :class:`ChannelDecodeError` if malformed.

    ``Message.from_wire`` of every message class is this function followed by a type check.
    """
    if not isinstance(wire, (list, tuple)) or not wire:
        raise ChannelDecodeError(f"a channel message is a non-empty list, got {peer_repr(wire)}")
    head = wire[0]
    kind = _KINDS.get(head) if isinstance(head, str) else None
    if kind is None:
        raise ChannelDecodeError(f"unknown channel message kind {peer_repr(head)}")
    arity = _ARITY[kind]
    if len(wire) != arity:
        raise ChannelDecodeError(f"{kind.value} has {arity} elements, got {len(wire)}")
    match kind:
        case MessageKind.EVENT:
            return Event(_str(wire[1], "producer"), _seq(wire[2], "seq", 1), wire[3])
        case MessageKind.EVENTS:
            payloads = wire[3]
            if not isinstance(payloads, (list, tuple)) or not payloads:
                raise ChannelDecodeError(f"events payloads must be a non-empty list, got {peer_repr(payloads, 200)}")
            return EventBatch(_str(wire[1], "producer"), _seq(wire[2], "first_seq", 1), tuple(payloads))
        case MessageKind.HANDSHAKE:
            interval = wire[4]
            if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 < interval < 1e15:
                raise ChannelDecodeError(f"heartbeat_interval must be a positive number of seconds, got "
                                         f"{peer_repr(interval)}")
            return Handshake(_str(wire[1], "producer"), _str(wire[2], "consumer"),
                             _seq(wire[3], "first_seq", 1), float(interval), wire[5])
        case MessageKind.RETRANSMIT_FAILED:
            first, last = _seq(wire[3], "first", 1), _seq(wire[4], "last", 1)
            if first > last:
                raise ChannelDecodeError(f"retransmit_failed range {peer_repr(first)}..{peer_repr(last)} is empty")
            return RetransmitFailed(_str(wire[1], "producer"), _str(wire[2], "consumer"), first, last)
        case MessageKind.HEARTBEAT:
            return Heartbeat(_str(wire[1], "producer"), _seq(wire[2], "last_seq"))
        case MessageKind.CUMULATIVE_ACK:
            return CumulativeAck(_str(wire[1], "consumer"), _str(wire[2], "producer"), _seq(wire[3], "seq"))
        case MessageKind.NACK:
            raw = wire[3]
            if not isinstance(raw, (list, tuple)) or not raw:
                raise ChannelDecodeError(f"nack ranges must be a non-empty list, got {peer_repr(raw)}")
            ranges = []
            for item in raw:
                if not isinstance(item, (list, tuple)) or len(item) != 2:
                    raise ChannelDecodeError(f"a nack range is [first, last], got {peer_repr(item)}")
                first, last = _seq(item[0], "first", 1), _seq(item[1], "last", 1)
                if first > last:
                    raise ChannelDecodeError(f"nack range {peer_repr(first)}..{peer_repr(last)} is empty")
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
