"""The sans-io actor: one "it" node per timeslot, decided by the pings every node sees.

Theory of operation (docs/asyncactor.md §2-§7)
----------------------------------------------
:class:`ActorCore` is a plain state machine.  The I/O layer feeds it decoded wire maps with
:meth:`~ActorCore.receive` and calls :meth:`~ActorCore.timer` once :attr:`~ActorCore.next_deadline`
has passed; after each call it drains :meth:`~ActorCore.to_send` and :meth:`~ActorCore.events`.
Time is always an argument and randomness an injected :class:`random.Random`, so a seeded
simulation replays exactly.  Nothing here imports a clock, a socket or an event loop.

A slot: the node whose timer fires first sends ``ping`` at ``t``; unless it accepts a competing
ping before ``t + gap`` it is "it" (TAG) until ``t + cycle + gap/2`` (UNTAG).  Everybody else
re-plans its own ping at ``cycle + d * gap`` after each accepted ping (see
:func:`~asyncactor.policy.default_ping_delay`).  Crossing pings are resolved with
``has_priority`` (the same answer on every node); a ping whose history disagrees with ours is the
other side of a healed split (§7): each node reports one RecoverEvent per split, one node per side
re-broadcasts its side's history as ``hist``, and the side with priority continues; the
bookkeeping (and the losers' replay of the winners' early pings) is in :mod:`.recovery`.  With
``heal_beacon`` the "it" node also sends a two-entry ``hist`` mid-slot: ignored on its own side,
it opens the episode on the other side of a healed split about half a slot sooner.

Sticky mode (§8): the holder re-pings every ``cycle - 1.5 * gap`` and keeps the tag; the others
wait ``cycle - 1.5 * gap + (0.5 .. 1) * gap`` after each ping, so a dead holder is replaced within
``cycle + gap`` of its death.  A holder's ping with value None is a *release* (``handoff``): the
others bid within ``gap / 2``.

Minimum tenure: a *succession* ping (its sender saw our ping) never cuts a tag short; only a
collision or a healed split does (DetagEvent).

Partial views (§4): a newcomer, or the losing side of a healed split, adopts its view from one
message.  It is *learning* until a succession confirms that view: it does not bid, re-adopts
from any ping its view cannot place, and takes no side in splits.  A collision it cannot judge
(the two pingers' old places are unknown) is left to the next ping, which names the winner;
until then it bids only after everybody else (``cycle + 3 * gap``; in sticky mode
``cycle - 1.5 * gap + (1 .. 1.5) * gap``, still within ``cycle`` of the holder's ping).  Only the leading entries
of a history that came off the wire are trusted for collision ages (``_known``).

Layout: :class:`ActorCore` is built in layers, each a subclass of the one before, one idea per
module: :mod:`.core_state` (the fields, counters and primitive transitions), :mod:`.pinging` (our
own ping, the tag, the heal beacon), :mod:`.succession` (another node's ping: succession,
collision, partial views), :mod:`.healing` (healed splits, with :mod:`.recovery`'s bookkeeping)
and this module (the seam, the caller's controls, dispatch of incoming messages).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import Config
from .core_state import CoreStats, LocalProtocolError
from .events import ActorEvent, GoodNodeEvent, RawMsgEvent, UntagEvent
from .healing import SplitHealing
from .messages import DecodeError, Hist, Init, Ping, Vers, decode
from .state import Phase, Timer

__all__ = ["ActorCore", "Phase", "Timer", "CoreStats", "LocalProtocolError"]


class ActorCore(SplitHealing):
    """One node's view of the protocol.  Not thread-safe; every method returns at once.

    ``rng`` feeds all randomness.  ``has_priority(his_node, his_value, my_node, my_value)`` and
    ``ping_delay(pos, length, max_length, n_hosts, rng)`` override the policies (they must be
    deterministic, resp. return 0..2).  ``raw=True`` reports every arriving message as
    :class:`RawMsgEvent` before it is interpreted (malformed ones included).
    """

    # ---- the seam ---------------------------------------------------------------------------
    def to_send(self) -> list[dict[str, Any]]:
        """Drain the wire maps to broadcast, in order."""
        out, self._out = self._out, []
        return out

    def events(self) -> list[ActorEvent]:
        """Drain the events to report, in order."""
        ev, self._events = self._events, []
        return ev

    @property
    def next_deadline(self) -> float | None:
        """When :meth:`timer` must be called next (None: only a message can change anything)."""
        return min(self._timers.values()) if self._timers else None

    @property
    def history(self) -> tuple[str, ...]:
        """Recent pingers, newest first (the chain), as this node sees them."""
        return self._history

    @property
    def is_it(self) -> bool:
        return self.phase is Phase.TAGGED

    def deadline(self, timer: Timer) -> float | None:
        return self._timers.get(timer)

    def start(self, now: float) -> None:
        """Announce ourselves (``init``).  We take part once that comes back to us."""
        if self._started:
            raise LocalProtocolError("start() called twice")
        self._started = True
        self._send(Init(self.name))

    def receive(self, raw: Any, now: float) -> None:
        """Handle one message from the group (our own included).  Malformed messages are counted
        in :attr:`stats` and skipped; they never raise."""
        self.stats.received += 1
        if self.raw:
            self._events.append(RawMsgEvent(raw))
        try:
            msg = decode(raw)
        except DecodeError as exc:
            self.stats.bad_messages += 1
            self.stats.last_error = exc.reason
            return
        match msg:
            case Init():
                self._on_init(msg, now)
            case Vers():
                self._on_vers(msg, now)
            case Ping():
                self._on_ping(msg, now)
            case Hist():
                self._on_hist(msg, now)

    def timer(self, now: float) -> None:
        """Handle every timer that is due at ``now``, in deadline order."""
        while True:
            due = [(t, k) for k, t in self._timers.items() if t <= now]
            if not due:
                return
            at, kind = min(due, key=lambda x: (x[0], list(Timer).index(x[1])))
            del self._timers[kind]
            match kind:
                case Timer.PING if self._stale_bid(at, now):
                    # we were not running when our bid fell due (a paused process, a stalled
                    # loop): pings that came meanwhile are still unread, and a bid now would
                    # answer a slot the group has left. Wait as after a reconnect, once.
                    self._late_bids += 1
                    self._await_ping = True
                    self._plan_ping(now)
                case Timer.PING if self._bid_confirm and not self._renewing():
                    # the holder's renewal is overdue: it may be waiting unread behind us (our
                    # process stalled, a garbage collection, until about now). Bid only if
                    # nothing has come by gap/4 from now: the input is read before that.
                    self._bid_confirm = False
                    self._timers[Timer.PING] = now + self.config.gap / 4
                case Timer.PING:
                    self._send_ping(now)
                case Timer.TAG:
                    self._tag()
                case Timer.UNTAG:
                    self._untag(UntagEvent())
                case Timer.PING_EVENT:
                    self._flush_ping_event()
                case Timer.DECIDE:
                    self._decide(now)
                case Timer.HIST:
                    self._send_hist(now)
                case Timer.BEACON:
                    self._send_beacon()
                case Timer.VERS:
                    self._answer_init(now)

    def _stale_bid(self, due: float, now: float) -> bool:
        """Whether our bid, due at ``due``, comes more than ``gap / 4`` late and should wait for
        the messages that arrived meanwhile: once in a row, and never a sticky holder's renewal or
        a bid after a release or a gone holder (those are meant to be quick)."""
        return now - due > self.config.gap / 4 and not (self._late_bids or self._bid_urgent or self._renewing())

    # ---- the caller's controls -------------------------------------------------------------
    def set_value(self, value: Any, now: float) -> None:
        """Used in our next ping (and for collisions from then on)."""
        self.value = value
        if self._slot is not None and self._slot.node == self.name and self.phase is not Phase.FOLLOWING:
            self._slot.value = value

    def enable(self, now: float) -> None:
        """Take part in pinging again (idempotent)."""
        if not self.enabled:
            self.enabled = True
            self._plan_ping(self._slot.at if self._slot else now, now=now)

    def disable(self, now: float) -> None:
        """Stop pinging.  A current tag runs out normally; events keep coming (idempotent)."""
        self.enabled = False
        self._timers.pop(Timer.PING, None)

    def handoff(self, now: float) -> bool:
        """Give up the tag at once and stop pinging: report UntagEvent and send a *release*
        (our ping with value None) so that another node bids within ``gap / 2``.  Returns True
        if we held or were about to hold the tag."""
        self.enabled = False
        self._timers.pop(Timer.PING, None)
        if self._slot is None or self._slot.node != self.name or self.phase is Phase.FOLLOWING:
            return False
        if self.phase is Phase.TAGGED:
            self._untag(UntagEvent())
        else:
            self._timers.pop(Timer.TAG, None)
            self._goto(Phase.FOLLOWING)
        self._slot.value = None
        self._send(Ping(self.name, None, self._wire_history()))
        return True

    def holder_gone(self, node: str, now: float) -> bool:
        """``node`` is known to be gone (say, its MQTT last will arrived): if it holds the current
        slot, bid as after its *release* (within ``gap / 2``, chain order kept; a node whose view
        is unconfirmed one ``gap`` later) instead of waiting for its next ping to be overdue
        (``cycle + 3 * gap`` for an unconfirmed view in rotation mode).  Returns True if that moved
        our bid.

        Safe on a false report: a holder that is alive after all pings again, and the two
        pings meet as any succession or collision does (``has_priority`` decides)."""
        slot = self._slot
        if (
            slot is None or slot.node != node or node == self.name or not self.enabled
            or self.phase is Phase.STARTING
        ):  # fmt: skip
            return False
        before = self._timers.get(Timer.PING)
        self._plan_ping(now, release=True, gone=True)
        after = self._timers.get(Timer.PING)
        if before is not None and after is not None and after > before:
            self._timers[Timer.PING] = before  # never later than planned
            self._bid_urgent = False
            return False
        return True

    def offline(self, now: float) -> None:
        """The transport lost the group (say, the MQTT connection dropped): bid no more until
        :meth:`online`, and give up a bid whose ``gap`` is running (its answers cannot reach us; a
        node that tagged itself while cut off would claim a slot the group never gave it).  A held
        tag is kept: it runs out normally, and a sticky holder's renewal that falls due meanwhile
        is sent at :meth:`online` if the tag has not run out by then.  Idempotent."""
        if self._offline:
            return
        self._offline = True
        if self.phase is Phase.PINGED:
            self._timers.pop(Timer.TAG, None)
            self._goto(Phase.FOLLOWING)
        if self.phase is not Phase.TAGGED:
            self._timers.pop(Timer.PING, None)

    def online(self, now: float) -> None:
        """The transport reaches the group again.  Pings sent meanwhile may have been missed, so
        our view is unconfirmed: we bid only after the holder has had time to ping again (as a
        newcomer does, counted from now), never at once on the old view.  A sticky holder whose
        renewal fell due while offline renews now; a node still starting announces itself again
        (its ``init`` may have been lost).  Idempotent."""
        if not self._offline:
            return
        self._offline = False
        renew, self._renew_due = self._renew_due, False
        if self.phase is Phase.STARTING:
            if self._started:
                self._send(Init(self.name))
            return
        if self.phase is Phase.TAGGED:
            if renew:
                self._send_ping(now)
            return
        self._await_ping = True
        self._plan_ping(now)

    def update_config(
        self, changes: Mapping[str, Any], now: float, *, allow_short_cycle: bool = False
    ) -> Config:
        """Change the group's configuration: bump the version and broadcast it.  Raises
        ``ValueError`` (state unchanged) for a bad configuration."""
        fields = {**self.config.as_dict(), **dict(changes)}
        fields["version"] = max(self.config.version + 1, int(changes.get("version", 0)))
        conf = Config.from_mapping(fields, allow_short_cycle=allow_short_cycle)
        self._set_config(conf)
        self._send(Vers(self.name, conf))
        return conf

    # ---- internals: incoming messages ------------------------------------------------------
    def _on_init(self, msg: Init, now: float) -> None:
        if msg.node != self.name:
            if self.phase is not Phase.STARTING and self._history[:1] == (self.name,):
                self._answer_init(now)  # tell the newcomer our configuration
            return
        if self.phase is not Phase.STARTING or not self._started:
            self.stats.duplicate_inits += 1  # duplicating transport or a name clash
            return
        self._goto(Phase.FOLLOWING)
        self._plan_ping(self._slot.at if self._slot else now, now=now)

    def _answer_init(self, now: float) -> None:
        """Send our ``vers`` for a newcomer's ``init``: at once, or, if we answered one less than
        ``gap`` ago, once at that answer + ``gap`` for every init until then (a ``vers`` is a
        broadcast: one sent after a newcomer's init reached us reaches it too). Without this, a
        group starting at once answered each of N inits from every node that had pinged alone so
        far, each answer going to all N: 100 members took a minute to settle (docs/asyncactor.md)."""
        due = self._last_init_answer + self.config.gap
        if now >= due:
            self._timers.pop(Timer.VERS, None)
            self._last_init_answer = now
            self._send(Vers(self.name, self.config))
        elif Timer.VERS not in self._timers:
            self._timers[Timer.VERS] = due

    def _on_vers(self, msg: Vers, now: float) -> None:
        if msg.config.version > self.config.version:
            # heal_beacon is not on the wire: it stays this node's own setting
            self._set_config(msg.config.with_changes(heal_beacon=self.config.heal_beacon))
        elif msg.config.version < self.config.version and now - self._last_vers_reply >= self.config.gap:
            self._last_vers_reply = now
            self._send(Vers(self.name, self.config))

    def _on_ping(self, msg: Ping, now: float) -> None:
        if msg.node == self.name:
            return  # our own, handled when sent
        if self.value is None and msg.value is not None:
            self._events.append(GoodNodeEvent((msg.node,)))
        self._handle_ping(msg, now)
