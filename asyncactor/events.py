"""Events an :class:`~asyncactor.Actor` reports, as frozen slotted dataclasses.

Theory of operation
-------------------
The sans-io core appends these to its event list; the async layer hands them to the consumer in
order through an :class:`~asyncactor.queue.EventQueue`, whose policy coalesces stale
:class:`PingEvent`/:class:`GoodNodeEvent`/:class:`RawMsgEvent` for a slow consumer but never
drops a :class:`TagEvent`, :class:`UntagEvent`, :class:`DetagEvent`, :class:`RecoverEvent` or
:class:`SetupEvent` (docs/asyncactor.md §6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import Config
from .messages import Ping

__all__ = [
    "ActorEvent",
    "SetupEvent",
    "PingEvent",
    "TagEvent",
    "UntagEvent",
    "DetagEvent",
    "RecoverEvent",
    "GoodNodeEvent",
    "RawMsgEvent",
]


@dataclass(frozen=True, slots=True)
class SetupEvent:
    """The group configuration changed (a higher ``vers`` arrived, or :meth:`update_config`)."""

    config: Config


@dataclass(frozen=True, slots=True)
class PingEvent:
    """Another node holds the current slot.  Reported about ``2 * gap`` after its ping, once
    collisions are resolved: at most one per slot, for the winner."""

    msg: Ping

    @property
    def node(self) -> str:
        return self.msg.node

    @property
    def value(self) -> Any:
        return self.msg.value


@dataclass(frozen=True, slots=True)
class TagEvent:
    """This node is "it" until the matching :class:`UntagEvent` or :class:`DetagEvent`."""

    node: str
    value: Any


@dataclass(frozen=True, slots=True)
class UntagEvent:
    """Graceful end of this node's tenure: stop "it" work within ``gap`` seconds."""


@dataclass(frozen=True, slots=True)
class DetagEvent:
    """This node lost a collision (or a healed split) to ``node``: stop "it" work at once."""

    node: str


@dataclass(frozen=True, slots=True)
class RecoverEvent:
    """A network split healed.  ``prio``: this node's position in its own history (0 is the most
    recent pinger); ``replace``: True if the other side won and our side's state is being
    replaced; ``local_nodes``/``remote_nodes``: recent pingers of each side."""

    prio: int
    replace: bool
    local_nodes: tuple[str, ...]
    remote_nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GoodNodeEvent:
    """Our value is None and these nodes have one: fetch initial state from them."""

    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RawMsgEvent:
    """A message as it arrived, unmodified (only when the actor was created with ``raw=True``)."""

    msg: Any


ActorEvent = (
    SetupEvent | PingEvent | TagEvent | UntagEvent | DetagEvent | RecoverEvent | GoodNodeEvent | RawMsgEvent
)
