"""The core's states and timers (docs/asyncactor.md §2): the phase table and the slot record.

Theory of operation
-------------------
A node is STARTING until its own ``init`` comes back, then FOLLOWING; its ping makes it PINGED,
and ``gap`` later TAGGED unless a competing ping won.  :data:`TRANSITIONS` is the whole table:
:meth:`ActorCore._goto <asyncactor.protocol.ActorCore>` raises for anything else.  A
:class:`Slot` is what a node knows of the current slot's ping.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

__all__ = ["Phase", "TRANSITIONS", "Timer", "Slot"]


class Phase(enum.Enum):
    STARTING = "starting"  # our own init has not come back yet: we only listen
    FOLLOWING = "following"  # not "it"; our ping timer may be running
    PINGED = "pinged"  # our ping is out; "it" at ping + gap unless a competitor wins
    TAGGED = "tagged"  # we are "it"


TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.STARTING: frozenset({Phase.FOLLOWING}),
    Phase.FOLLOWING: frozenset({Phase.PINGED}),
    Phase.PINGED: frozenset({Phase.TAGGED, Phase.FOLLOWING}),
    Phase.TAGGED: frozenset({Phase.FOLLOWING, Phase.PINGED}),
}


class Timer(enum.Enum):
    PING = "ping"  # send our ping
    TAG = "tag"  # become "it"
    UNTAG = "untag"  # stop being "it"
    PING_EVENT = "ping_event"  # report the current slot's holder
    HIST = "hist"  # re-broadcast our side's history after a split
    DECIDE = "decide"  # pick the winning side of a healed split
    BEACON = "beacon"  # "it" re-announces its slot mid-slot (heal_beacon)
    VERS = "vers"  # answer the newcomers whose init came within gap of our last answer


@dataclass(slots=True)
class Slot:
    node: str
    value: Any
    at: float  # when we sent or received its ping
    history: tuple[str, ...] = ()  # its ping's history
