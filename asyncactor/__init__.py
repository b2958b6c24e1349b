"""asyncactor: one "it" node per timeslot among peers, with no leader service.

See docs/asyncactor.md.  The protocol core (:mod:`asyncactor.protocol`) is sans-io; :class:`Actor`
runs it on anyio (asyncio or trio) over any :class:`Transport`. This package exports the user API;
the wire messages (``Init``, ``Vers``, ``Ping``, ``Hist``, ``encode``, ``decode``) stay in
:mod:`asyncactor.messages`.

This package comes with the ``broker-mqtt`` distribution. The established ``asyncactor``
distribution installs a top-level package of the same name: importing warns (a RuntimeWarning)
when that distribution's metadata is present too, as their files then share one folder.
"""

import importlib.metadata
import os
import warnings

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


def _warn_if_mixed() -> None:
    """Warn when the other ``asyncactor`` distribution is installed too (ours is ``broker-mqtt``)."""
    try:
        other = importlib.metadata.distribution("asyncactor")
    except importlib.metadata.PackageNotFoundError:
        return
    warnings.warn(
        f"the 'asyncactor' distribution (version {other.version}) is installed beside 'broker-mqtt': both "
        f"install a top-level package 'asyncactor', so their files are mixed in one folder "
        f"({os.path.dirname(__file__)}) and either one may break. Install them in separate virtual "
        f"environments, or run `pip uninstall asyncactor` and then `pip install --force-reinstall broker-mqtt`.",
        RuntimeWarning,
        stacklevel=2,
    )


_warn_if_mixed()

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
