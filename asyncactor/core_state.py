"""The actor core's state: one node's fields, its counters, and the primitive transitions.

:class:`CoreState` holds what :class:`~asyncactor.protocol.ActorCore` knows (its slot, the chain
of recent pingers, its timers, its phase) and the small steps every part of the protocol takes:
send a message, change phase (checked against :data:`~asyncactor.state.TRANSITIONS`), adopt a
configuration, untag, report the pending ping.  The protocol is built on it in layers, each a
subclass of the one before: :mod:`.pinging` (our own ping, the tag, the heal beacon),
:mod:`.succession` (a ping from another node: succession, collision, partial views),
:mod:`.healing` (healed splits, §7) and :mod:`.protocol` (the seam and the caller's controls).
Like all of them it is sans-io: no clock, no event loop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from .collision import ALL
from .config import Config
from .events import ActorEvent, DetagEvent, PingEvent, SetupEvent, UntagEvent
from .messages import Message, Ping, Vers, encode
from .policy import PingDelayFn, PriorityFn, default_has_priority, default_ping_delay
from .recovery import SplitRecovery
from .state import TRANSITIONS, Phase, Slot, Timer

__all__ = ["CoreState", "CoreStats", "LocalProtocolError"]


class LocalProtocolError(RuntimeError):
    """The caller used the core wrongly (e.g. started it twice).  The core's state is unchanged."""


@dataclass(slots=True)
class CoreStats:
    received: int = 0
    bad_messages: int = 0
    duplicate_inits: int = 0
    pings_sent: int = 0
    hists_sent: int = 0
    beacons_sent: int = 0
    vers_sent: int = 0
    collisions_won: int = 0
    collisions_lost: int = 0
    splits_healed: int = 0
    last_error: str | None = None


class CoreState:
    """One node's state in the protocol (see :class:`~asyncactor.protocol.ActorCore`, which takes
    the same arguments) and the primitive transitions on it."""

    @property
    def current(self) -> str | None:
        """The node holding the current slot, if any."""
        return self._slot.node if self._slot else None

    def __init__(
        self,
        name: str,
        *,
        config: Config | None = None,
        value: Any = None,
        enabled: bool = True,
        sticky: bool = False,
        raw: bool = False,
        rng: random.Random | None = None,
        has_priority: PriorityFn | None = None,
        ping_delay: PingDelayFn | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, not {name!r}")
        self.name = name
        self.config = config if config is not None else Config()
        self.value = value
        self.enabled = enabled
        self.sticky = sticky
        self.raw = raw
        self.rng = rng if rng is not None else random.Random()
        self.has_priority: PriorityFn = has_priority or default_has_priority
        self.ping_delay: PingDelayFn = ping_delay or default_ping_delay
        self.phase = Phase.STARTING
        self.stats = CoreStats()
        self._history: tuple[str, ...] = ()
        self._parent: tuple[str, ...] = ()
        self._slot: Slot | None = None
        self._timers: dict[Timer, float] = {}
        self._pending_ping: Ping | None = None  # for Timer.PING_EVENT
        self._recovery = SplitRecovery(name, self.has_priority)  # healed splits (§7)
        self._await_ping = False
        self._learning = False  # our view came from one ping and no succession confirmed it yet
        self._unsure: set[str] = set()  # candidates of a collision we could not judge
        # how many leading entries of _history / _parent are known to match the group's view:
        # all for a node that saw every ping; a newcomer knows only what the wire told it
        self._known = ALL
        self._pknown = ALL
        self._offline = False  # the transport cannot reach the group (offline()/online())
        self._renew_due = False  # a sticky holder's renewal fell due while offline
        self._late_bids = 0  # bids put off in a row because their timer fired late (a pause)
        self._bid_urgent = False  # the planned bid follows a release or a gone holder
        self._bid_confirm = False  # the planned bid is confirmed gap/4 later (a silent sticky holder)
        self._last_vers_reply = float("-inf")
        self._last_init_answer = float("-inf")
        self._started = False
        self._out: list[dict[str, Any]] = []
        self._events: list[ActorEvent] = []

    # ---- internals: sending and phases ------------------------------------------------------
    def _send(self, msg: Message) -> None:
        if isinstance(msg, Ping):
            self.stats.pings_sent += 1
        elif isinstance(msg, Vers):
            self.stats.vers_sent += 1
        self._out.append(encode(msg))

    def _goto(self, phase: Phase) -> None:
        if phase is not self.phase and phase not in TRANSITIONS[self.phase]:
            raise LocalProtocolError(f"{self.name}: no transition {self.phase.name} -> {phase.name}")
        self.phase = phase

    def _wire_history(self) -> tuple[str, ...]:
        return self._history[: self.config.splits]

    def _set_config(self, conf: Config) -> None:
        self.config = conf
        self._events.append(SetupEvent(conf))

    def _untag(self, event: UntagEvent | DetagEvent) -> None:
        self._timers.pop(Timer.UNTAG, None)
        self._timers.pop(Timer.BEACON, None)
        self._goto(Phase.FOLLOWING)
        self._events.append(event)

    def _flush_ping_event(self) -> None:
        self._timers.pop(Timer.PING_EVENT, None)
        if self._pending_ping is not None:
            self._events.append(PingEvent(self._pending_ping))
            self._pending_ping = None
