"""Exceptions raised by broker_mqtt.

Every error says whose fault it is: :class:`UsageError` subclasses mean the caller asked for
something the library cannot do (a bad topic, a payload too large); :class:`TransportError`
subclasses mean the broker or the network failed. Malformed data from the wire raises
:class:`DecodeError` (re-exported by :mod:`broker_mqtt.wire.codec`) and is never fatal to a receive loop.
"""

from __future__ import annotations

__all__ = [
    "BrokerMQTTError",
    "UsageError",
    "TopicError",
    "PayloadTooLarge",
    "TransportError",
    "BrokerUnavailable",
    "PublishQueueFull",
    "MosquittoNotFound",
    "DecodeError",
    "ForgedMessage",
    "EncodeError",
    "peer_repr",
]


class DecodeError(ValueError):
    """The input is not a well-formed encoding of a data-model value; the message says why."""


class ForgedMessage(DecodeError):
    """A message claims a sender (an endpoint, a store replica, an epoch's master) that the topic it
    came on does not prove: every topic names its publisher's client id (docs/security.md), and a
    broker ACL lets each client write only below its own. Dropped, counted and reported, like any
    other malformed message."""


class EncodeError(TypeError):
    """The value (or a value nested in it) is outside the data model; the message names its type."""


class BrokerMQTTError(Exception):
    """Base class of every error this package raises on purpose."""


class UsageError(BrokerMQTTError, ValueError):
    """The caller asked for something invalid; nothing was sent or changed."""


class TopicError(UsageError):
    """A topic or topic prefix that cannot be carried over MQTT (see docs/wire-format.md §2)."""


class PayloadTooLarge(UsageError):
    """A message would exceed the broker's maximum packet size; it was not queued."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"message of {size} bytes exceeds the broker's maximum packet size of {limit} bytes "
            f"(less the PUBLISH header); split the payload or raise max_packet_size on the broker"
        )
        self.size = size
        self.limit = limit


class TransportError(BrokerMQTTError):
    """The broker connection failed or is unavailable."""


class BrokerUnavailable(TransportError):
    """The broker could not be reached (at start, or within a caller's timeout)."""


class PublishQueueFull(TransportError):
    """The broker is unreachable and the outgoing queue reached its bound.

    The message was not queued. Messages accepted before this error stay queued and are sent,
    in order, once the connection is back.
    """


class MosquittoNotFound(BrokerMQTTError, FileNotFoundError):
    """The embedded broker needs the ``mosquitto`` program, which is not installed."""

    def __init__(self) -> None:
        super().__init__(
            "the embedded broker needs mosquitto, which was not found on PATH or in /usr/sbin. "
            "Install it (Debian/Ubuntu: `sudo apt-get install mosquitto`; `make demo` and "
            "`make test` do this for you), or pass broker='mqtt://host:port' to use another broker."
        )


def peer_repr(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for an error message about a peer's data.

    Never raises: an int too large for ``repr`` (Python's 4300-digit limit), or anything holding
    one, is named by its type instead.
    """
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"<{type(value).__name__} that has no short form>"
    return text if len(text) <= limit else text[:limit - 3] + "..."
