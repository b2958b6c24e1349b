"""Our own ping: when to send it, sending it, the tag it wins, and the heal beacon.

A slot (docs/asyncactor.md §3): after each accepted ping a node plans its own at ``cycle + d * gap``
(``d`` from :func:`~asyncactor.policy.default_ping_delay` or the caller's policy); a node whose
ping meets no competing one within ``gap`` is "it" (TAG).  Sticky mode (§8): the holder re-pings
every ``cycle - 1.5 * gap``; a *release* (``handoff``, a holder gone) has the others bid within
``gap / 2``; a node whose view is unconfirmed bids after the confirmed ones.  With ``heal_beacon``
the "it" node re-announces its slot mid-slot (§7).  Sans-io, like the rest of the core.
"""

from __future__ import annotations

from .collision import moved
from .core_state import CoreState
from .events import TagEvent, UntagEvent
from .history import merge
from .messages import Hist, Ping
from .state import Phase, Slot, Timer

__all__ = ["Pinging"]


class Pinging(CoreState):
    """The core's own pings: planning (the ``PING`` timer), sending, tagging, heal beacons."""

    def _tag(self) -> None:
        assert self._slot is not None
        self._goto(Phase.TAGGED)
        self._events.append(TagEvent(self.name, self._slot.value))
        self._timers[Timer.UNTAG] = self._slot.at + self.config.cycle + self.config.gap / 2
        self._plan_beacon(self._slot.at)

    def _renewing(self) -> bool:
        """We hold the tag in sticky mode: our next ping renews it."""
        slot = self._slot
        return self.sticky and slot is not None and slot.node == self.name and self.phase is Phase.TAGGED

    # ---- internals: planning and sending our ping ------------------------------------------
    def _plan_ping(
        self, base: float, *, now: float | None = None, release: bool = False, gone: bool = False
    ) -> None:
        if self.phase is Phase.STARTING or not self.enabled:
            self._timers.pop(Timer.PING, None)
            return
        c = self.config
        period = c.cycle - 1.5 * c.gap
        slot = self._slot
        confirm = False
        if slot is None:
            wait = c.cycle + 2 * c.gap  # alone as far as we know
        elif self._await_ping and not gone and not self.sticky:
            # our view of the slot is unconfirmed: bid only if nobody else does, after the
            # previous pinger's own repeat (at cycle + 2 * gap) would have arrived
            wait = c.cycle + 3 * c.gap
        elif self.sticky and slot.node == self.name and self.phase is not Phase.FOLLOWING:
            wait = period  # sticky holder keeps its tag
        else:
            pos = self._history.index(self.name) if self.name in self._history else None
            d = self.ping_delay(pos, len(self._history), c.nodes, c.n_hosts, self.rng)
            if pos is None and c.force_in:
                d = self.rng.uniform(0.5, 1.0)
            d = min(max(float(d), 0.0), 2.0)
            if release:
                wait = d / 4 * c.gap
                if self._await_ping:  # unconfirmed view (a newcomer): after the others' bids
                    wait += c.gap
            elif self.sticky:
                wait = period + (0.5 + d / 4) * c.gap
                confirm = True
                if self._await_ping and not gone:
                    # unconfirmed view: after the confirmed nodes' bids, but still within
                    # ``cycle`` of the holder's ping (its renewal at ``period`` is overdue by then)
                    wait += 0.5 * c.gap
            else:
                wait = c.cycle + d * c.gap
        at = base + wait
        self._timers[Timer.PING] = at if now is None else max(at, now)
        self._bid_urgent = release  # a release or a gone holder: bid even if the timer fires late
        self._bid_confirm = confirm  # a sticky holder fell silent: look at our input once more first

    def _send_ping(self, now: float) -> None:
        if not self.enabled or self.phase is Phase.STARTING:
            return
        slot = self._slot
        if self._offline:
            # a bid made on a view that stopped at the disconnect would reach the group late and
            # win against pings we never saw; a sticky holder renews once it is back (online),
            # unless its tag runs out first
            self._renew_due = self._renewing()
            return
        if self._renewing():
            assert slot is not None
            slot.at, slot.value = now, self.value  # holder: extend the tag, no new TagEvent
            self._timers[Timer.UNTAG] = now + self.config.cycle + self.config.gap / 2
            self._send(Ping(self.name, self.value, self._wire_history()))
            self._plan_ping(now)
            self._plan_beacon(now)
            return
        if self.phase is Phase.TAGGED:
            self._untag(UntagEvent())
        self._late_bids = 0
        self._flush_ping_event()
        self._parent, self._pknown = self._history, self._known
        self._known = moved(self.name, self._history, self._known)
        self._history = merge((self.name,), self._history, self.config.max_history)
        self._slot = Slot(self.name, self.value, now, self._wire_history())
        self._unsure = set()
        self._send(Ping(self.name, self.value, self._wire_history()))
        if self.phase is not Phase.PINGED:
            self._goto(Phase.PINGED)
        self._timers[Timer.TAG] = now + self.config.gap
        self._plan_ping(now)
        ep = self._recovery.active(now)
        if ep is not None and not ep.decided and ep.held:
            his, at = ep.held[-1]
            if now - at < self.config.cycle and self.has_priority(his.node, his.value, self.name, self.value):
                # the other side's ping of a healed split came just before ours: its sender bids
                # or is "it"; it judges our ping as we judge its (_diverged), so only one of the
                # two becomes "it" (here: not us) until the episode is decided
                self._timers.pop(Timer.TAG, None)
                self._goto(Phase.FOLLOWING)

    # ---- internals: the heal beacon (§7) -----------------------------------------------------
    def _plan_beacon(self, at: float) -> None:
        """Halfway between our ping at ``at`` and the next one (``heal_beacon``)."""
        c = self.config
        if c.heal_beacon:
            interval = c.cycle - 1.5 * c.gap if self.sticky else c.cycle + c.gap
            self._timers[Timer.BEACON] = at + interval / 2

    def _send_beacon(self) -> None:
        """Re-announce our slot as ``hist {value, [us, the slot we answered]}``: a no-op on our side
        (:meth:`_on_hist`), the other side's hist of a healed split, noticed at once."""
        slot = self._slot
        wire = self._wire_history()
        if self.phase is Phase.TAGGED and slot is not None and slot.node == self.name and len(wire) > 2:
            self._send(Hist(slot.value, wire[:2]))
            self.stats.beacons_sent += 1
