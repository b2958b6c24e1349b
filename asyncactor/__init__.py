"""asyncactor: one "it" node per timeslot among peers, with no leader service.

See docs/asyncactor.md.  The protocol core (:mod:`asyncactor.protocol`) is sans-io; :class:`Actor`
runs it on anyio (asyncio or trio) over any :class:`Transport`. This package exports the user API;
the wire messages (``Init``, ``Vers``, ``Ping``, ``Hist``, ``encode``, ``decode``) stay in
:mod:`asyncactor.messages`.
"""

from .actor import Actor
from .config import Config
from .events import (
    ActorEvent,
    DetagEvent,
    GoodNodeEvent,
    PingEvent,
    RawMsgEvent,
    RecoverEvent,
    SetupEvent,
    TagEvent,
    UntagEvent,
)
from .memory import MemoryHub, MemoryTransport
from .messages import DecodeError
from .policy import canonical_key, default_has_priority, default_ping_delay
from .protocol import ActorCore, CoreStats, LocalProtocolError, Phase
from .queue import EventQueue, QueueStats
from .transport import Transport

ProtocolError = DecodeError

__all__ = [
    "Actor",
    "ActorCore",
    "ActorEvent",
    "Config",
    "CoreStats",
    "DecodeError",
    "DetagEvent",
    "EventQueue",
    "GoodNodeEvent",
    "LocalProtocolError",
    "MemoryHub",
    "MemoryTransport",
    "Phase",
    "PingEvent",
    "ProtocolError",
    "QueueStats",
    "RawMsgEvent",
    "RecoverEvent",
    "SetupEvent",
    "TagEvent",
    "Transport",
    "UntagEvent",
    "canonical_key",
    "default_has_priority",
    "default_ping_delay",
]
