"""What an endpoint hands to the application: received messages, peers and status events.

Status events follow Zeek Broker's names (peer_added, peer_lost, peer_removed, error) and are
frozen, slotted dataclasses; dispatch on them with ``match``.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Any

from ..wire import codec

__all__ = [
    "Message",
    "PeerInfo",
    "StatusEvent",
    "PeerAdded",
    "PeerLost",
    "PeerRemoved",
    "ConnectionLost",
    "ConnectionRestored",
    "MessagesMissed",
    "ErrorCode",
    "ErrorEvent",
]

_MISSING: Any = object()


class Message:
    """A data message received by a subscriber.

    ``data`` is decoded from the packed payload on first access and cached; subscribers decode
    it before yielding (all messages of a PUBLISH at once), so a message a subscriber sees
    always has valid ``data``. Every subscriber gets its own Message objects, decoded for it
    alone: changing a received value changes nothing another subscriber sees.
    """

    __slots__ = ("topic", "payload", "_sender", "_data")

    def __init__(self, topic: str, sender: bytes, payload: bytes) -> None:
        self.topic = topic
        self.payload = payload
        self._sender = sender
        self._data = _MISSING

    @property
    def sender(self) -> uuid.UUID:
        """The id of the endpoint that published the message."""
        return uuid.UUID(bytes=self._sender)

    @property
    def sender_hex(self) -> str:
        """``sender.hex`` without building a UUID: what store node ids begin with."""
        return self._sender.hex()

    @property
    def data(self) -> Any:
        """The decoded value; raises :class:`~broker_mqtt.wire.codec.DecodeError` if malformed."""
        if self._data is _MISSING:
            self._data = codec.decode(self.payload)
        return self._data

    def __repr__(self) -> str:
        shown = "<undecoded>" if self._data is _MISSING else repr(self._data)
        return f"Message(topic={self.topic!r}, sender={self.sender}, data={shown})"


def _decode_all(messages: list[Message]) -> None:
    """Decode the ``data`` of every message not decoded yet, in one batch (``codec.decode_many``).

    A message whose payload is malformed stays undecoded: its ``data`` raises as before.
    """
    todo = [m for m in messages if m._data is _MISSING]
    if todo:
        error = codec.DecodeError
        for m, value in zip(todo, codec.decode_many([m.payload for m in todo]), strict=True):
            if type(value) is not error:
                m._data = value


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """Another endpoint as announced by its presence message."""

    id: uuid.UUID
    name: str
    topics: tuple[str, ...]  #: the topic prefixes it subscribes to


@dataclass(frozen=True, slots=True)
class PeerAdded:
    """A peer announced itself (its subscriptions are active at the broker)."""

    peer: PeerInfo


@dataclass(frozen=True, slots=True)
class PeerLost:
    """A peer vanished without saying goodbye (its MQTT last will fired)."""

    peer: PeerInfo


@dataclass(frozen=True, slots=True)
class PeerRemoved:
    """A peer left cleanly."""

    peer: PeerInfo


@dataclass(frozen=True, slots=True)
class ConnectionLost:
    """This endpoint lost its broker connection; it reconnects with backoff."""

    reason: str


@dataclass(frozen=True, slots=True)
class ConnectionRestored:
    """This endpoint is connected again; subscriptions and presence were restored."""

    attempt: int


@dataclass(frozen=True, slots=True)
class MessagesMissed:
    """``missed`` messages that ``sender`` published on ``topic`` never came: the numbers of its
    messages there skipped ahead (the broker lost them: a crash before it saved them, a full queue
    for a slow subscriber, QoS 0). Reported once per gap; counted in ``statistics().missed``.
    What must not be lost goes through channels, stores or queues (docs/guarantees.md)."""

    sender: uuid.UUID
    topic: str
    missed: int


class ErrorCode(enum.Enum):
    MALFORMED_MESSAGE = "malformed_message"  #: a PUBLISH on our topics that is not node messages
    MALFORMED_PAYLOAD = "malformed_payload"  #: a node message whose payload does not decode
    FORGED_MESSAGE = "forged_message"  #: a message claims a sender its topic does not prove (dropped)
    BAD_SIGNATURE = "bad_signature"  #: a PUBLISH not sealed by its sender's trusted key, or a replay (dropped)
    PUBLISH_REJECTED = "publish_rejected"  #: the broker refused a PUBLISH (e.g. ACL)
    EVENTS_DROPPED = "events_dropped"  #: a status consumer fell too far behind
    SUBSCRIBER_OVERFLOW = "subscriber_overflow"  #: a full subscription began dropping (its overflow policy)


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """Something went wrong that did not stop the endpoint: bad input, a refused publish."""

    code: ErrorCode
    message: str
    topic: str | None = None
    sender: uuid.UUID | None = None


StatusEvent = (PeerAdded | PeerLost | PeerRemoved | ConnectionLost | ConnectionRestored | MessagesMissed
               | ErrorEvent)
