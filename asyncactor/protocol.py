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
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .collision import ALL, beats, moved, wire_known
from .config import Config
from .events import (
    ActorEvent,
    DetagEvent,
    GoodNodeEvent,
    PingEvent,
    RawMsgEvent,
    SetupEvent,
    TagEvent,
    UntagEvent,
)
from .history import Relation, merge, relate, without
from .messages import DecodeError, Hist, Init, Message, Ping, Vers, decode, encode
from .policy import PingDelayFn, PriorityFn, default_has_priority, default_ping_delay
from .recovery import Episode, SplitRecovery
from .state import TRANSITIONS, Phase, Slot, Timer

__all__ = ["ActorCore", "Phase", "Timer", "CoreStats", "LocalProtocolError"]

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


class ActorCore:
    """One node's view of the protocol.  Not thread-safe; every method returns at once.

    ``rng`` feeds all randomness.  ``has_priority(his_node, his_value, my_node, my_value)`` and
    ``ping_delay(pos, length, max_length, n_hosts, rng)`` override the policies (they must be
    deterministic, resp. return 0..2).  ``raw=True`` reports every arriving message as
    :class:`RawMsgEvent` before it is interpreted (malformed ones included).
    """

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
        self._last_vers_reply = float("-inf")
        self._started = False
        self._out: list[dict[str, Any]] = []
        self._events: list[ActorEvent] = []

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

    @property
    def current(self) -> str | None:
        """The node holding the current slot, if any."""
        return self._slot.node if self._slot else None

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
            _, kind = min(due, key=lambda x: (x[0], list(Timer).index(x[1])))
            del self._timers[kind]
            match kind:
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
            return False
        return True

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

    def _tag(self) -> None:
        assert self._slot is not None
        self._goto(Phase.TAGGED)
        self._events.append(TagEvent(self.name, self._slot.value))
        self._timers[Timer.UNTAG] = self._slot.at + self.config.cycle + self.config.gap / 2
        self._plan_beacon(self._slot.at)

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
                if self._await_ping and not gone:
                    # unconfirmed view: after the confirmed nodes' bids, but still within
                    # ``cycle`` of the holder's ping (its renewal at ``period`` is overdue by then)
                    wait += 0.5 * c.gap
            else:
                wait = c.cycle + d * c.gap
        at = base + wait
        self._timers[Timer.PING] = at if now is None else max(at, now)

    def _send_ping(self, now: float) -> None:
        if not self.enabled or self.phase is Phase.STARTING:
            return
        slot = self._slot
        if self.sticky and slot is not None and slot.node == self.name and self.phase is Phase.TAGGED:
            slot.at, slot.value = now, self.value  # holder: extend the tag, no new TagEvent
            self._timers[Timer.UNTAG] = now + self.config.cycle + self.config.gap / 2
            self._send(Ping(self.name, self.value, self._wire_history()))
            self._plan_ping(now)
            self._plan_beacon(now)
            return
        if self.phase is Phase.TAGGED:
            self._untag(UntagEvent())
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

    # ---- internals: incoming messages ------------------------------------------------------
    def _on_init(self, msg: Init, now: float) -> None:
        if msg.node != self.name:
            if self.phase is not Phase.STARTING and self._history[:1] == (self.name,):
                self._send(Vers(self.name, self.config))  # tell the newcomer our configuration
            return
        if self.phase is not Phase.STARTING or not self._started:
            self.stats.duplicate_inits += 1  # duplicating transport or a name clash
            return
        self._goto(Phase.FOLLOWING)
        self._plan_ping(self._slot.at if self._slot else now, now=now)

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

    def _handle_ping(self, msg: Ping, now: float) -> None:
        rel = relate(msg.history, self._history, self._parent)
        limit = self.config.max_history
        named = (
            rel in (Relation.DIVERGED, Relation.COLLISION, Relation.REPEAT)
            and len(msg.history) > 1
            and msg.history[1] in self._unsure
            and msg.history[1] != self.current
        )
        if named:
            # it names the winner of a collision we could not judge: a succession of that slot
            rel = Relation.SUCCESSION
        elif (
            rel is Relation.REPEAT and self._slot is not None and msg.history[1:2] != self._slot.history[1:2]
        ):
            # the holder we know pings again, but answering a slot we never saw: we missed
            # pings (we adopted our view from one message); its view is better than ours
            rel = Relation.FRESH
        elif rel is Relation.DIVERGED and self._learning:
            # a newcomer is on no side of a split: its one-ping view was stale; learn again
            rel = Relation.FRESH
        elif (
            rel in (Relation.DIVERGED, Relation.COLLISION)
            and msg.node in self._unsure
            and msg.node != self.current
        ):
            # a candidate of a collision we could not judge pings again (a sticky holder's
            # renewal): its view is better than ours; adopt it as a newcomer would
            rel = Relation.FRESH
        ep = self._recovery.episode
        if (
            self._await_ping and ep is not None and ep.decided and ep.remote_wins and not ep.followed
            and rel not in (Relation.SUCCESSION, Relation.COLLISION)
            and self._recovery.is_remote(ep, msg.history)
        ):  # fmt: skip
            # we lost a split and know the winners only from their (stale) hist: follow the
            # first real ping of theirs, whatever slot it answers (then learn as a newcomer)
            ep.followed = True
            # its parent is the slot it answers (history[1]), whatever we thought came before
            parent = merge(msg.history[1:], without(self._history, msg.node), limit)
            if len(msg.history) == 1:  # answers anything: keep our view behind it
                parent = self._history if msg.node in self._history else ()
            self._accept(msg, now, merge(msg.history, self._history, limit), parent, Relation.FRESH)
            return
        match rel:
            case Relation.FRESH:
                self._accept(msg, now, merge(msg.history, (), limit), msg.history[1:], rel)
            case Relation.REPEAT:
                assert self._slot is not None
                release = msg.value is None and self._slot.value is not None
                self._accept(msg, now, self._history, self._parent, rel, release=release)
            case Relation.SUCCESSION if named:
                # its history is exact, but where its sender stood before is unknown: adopt it
                # as a newcomer adopts its first ping (and judge its collisions the same way)
                hist = merge(msg.history, self._history, limit)
                self._accept(msg, now, hist, msg.history[1:], Relation.FRESH)
            case Relation.SUCCESSION:
                hist = merge((msg.node,), merge(msg.history[1:], self._history, None), limit)
                self._pknown = self._known
                self._known = max(
                    moved(msg.node, self._history, self._known),
                    wire_known(msg.history, self.config.splits),
                )
                self._accept(msg, now, hist, self._history, rel)
            case Relation.COLLISION:
                assert self._slot is not None
                mine = self._slot.node == self.name
                wins = self._beats(msg, self._slot)
                yielded = wins is None and mine
                if yielded:
                    wins = True  # we cannot tell if our own ping won: yield rather than risk two
                if wins is None:
                    # we adopted the slot from its ping alone and cannot place the pingers:
                    # leave the choice to the next ping, which names the winner; until then our
                    # view of the slot may be wrong, so we bid only after everybody else
                    self._unsure.add(msg.node)
                    self._await_ping = True
                    self._plan_ping(now)
                elif wins:
                    self.stats.collisions_lost += mine
                    hist = merge(msg.history, without(self._parent, msg.node), limit)
                    self._known = max(
                        moved(msg.node, self._parent, self._pknown),
                        wire_known(msg.history, self.config.splits),
                    )
                    self._accept(msg, now, hist, self._parent, rel)
                    if yielded:  # the next ping names the real winner
                        self._unsure.update((msg.node, self.name))
                else:
                    self.stats.collisions_won += mine
            case Relation.DIVERGED:
                self._diverged(msg.node, msg.value, msg.history, now, msg)

    def _accept(
        self,
        msg: Ping | Hist,
        now: float,
        history: tuple[str, ...],
        parent: tuple[str, ...],
        how: Relation,
        *,
        release: bool = False,
    ) -> None:
        """Make ``msg``'s sender the holder of the current slot."""
        slot = self._slot
        mine = slot is not None and slot.node == self.name
        if self.phase is Phase.PINGED:  # our ping lost
            self._timers.pop(Timer.TAG, None)
            self._goto(Phase.FOLLOWING)
        elif self.phase is Phase.TAGGED and (
            how is Relation.DIVERGED or (mine and how is Relation.COLLISION)
        ):
            self._untag(DetagEvent(msg.node))
        elif self.phase is Phase.TAGGED:
            # minimum tenure: the successor tags at its ping + gap; we stop by then, not before
            untag = min(self._timers.get(Timer.UNTAG, now), now + self.config.gap / 2)
            self._timers[Timer.UNTAG] = untag
        if isinstance(msg, Ping) and not release:
            if how is not Relation.COLLISION or self._pending_ping is None:
                self._flush_ping_event()
                self._timers[Timer.PING_EVENT] = now + 2 * self.config.gap
            self._pending_ping = msg
        if how is not Relation.COLLISION:  # a view adopted from one message is unsure of its parent
            self._unsure = {msg.node} if how in (Relation.FRESH, Relation.DIVERGED) else set()
        if how in (Relation.FRESH, Relation.DIVERGED):
            # the sender's history is a prefix of the group's; our parent (it minus its
            # head) is not, as the sender's old place in it is unknown
            self._known, self._pknown = wire_known(msg.history, self.config.splits), 0
        self._history, self._parent = history, parent
        self._slot = Slot(msg.node, msg.value, now, msg.history)
        if how is Relation.FRESH:
            self._await_ping = True  # a newcomer bids only once a second ping confirms its view
            self._learning = True
        elif isinstance(msg, Ping) and how is not Relation.COLLISION:
            self._await_ping = self._learning = False
        self._plan_ping(now, release=release)

    def _beats(self, his: Ping, mine: Slot) -> bool | None:
        """Collision order between two pings answering the same slot (collision.py, §4)."""
        return beats(
            his, mine, unsure=bool(self._unsure), parent=self._parent, pknown=self._pknown,
            splits=self.config.splits, has_priority=self.has_priority,
        )  # fmt: skip

    # ---- internals: healed splits (§7; the bookkeeping is in recovery.py) -------------------
    def _diverged(self, node: str, value: Any, remote: tuple[str, ...], now: float, msg: Ping | Hist) -> None:
        ep = self._episode_for(now)
        ep.remote_set.update(remote)
        if isinstance(msg, Hist):
            self._add_hist(ep, msg, own=False, now=now)
            return
        if not ep.decided:
            self._recovery.hold(ep, msg, now)  # replayed if their side wins
        mine = self._slot is not None and self._slot.node == self.name
        if (
            not ep.decided
            and mine
            and self.phase in (Phase.PINGED, Phase.TAGGED)
            and self.has_priority(node, value, self.name, self._slot.value)  # type: ignore[union-attr]
        ):
            # our ping crossed the other side's first ping after the heal: only one of the two
            # pingers becomes "it", the same one for both (has_priority)
            if self.phase is Phase.PINGED:
                self._timers.pop(Timer.TAG, None)
                self._goto(Phase.FOLLOWING)
            else:
                self._untag(DetagEvent(node))
        elif ep.decided and ep.remote_wins and self._recovery.is_remote(ep, remote):
            limit = self.config.max_history
            self._accept(msg, now, merge(remote, (), limit), tuple(remote[1:]), Relation.DIVERGED)

    def _episode_for(self, now: float) -> Episode:
        ep = self._recovery.active(now)
        if ep is not None:
            return ep
        self.stats.splits_healed += 1
        value = self._slot.value if self._slot is not None else None
        self._timers.pop(Timer.DECIDE, None)
        self._timers.pop(Timer.HIST, None)
        at = self._recovery.open(now, history=self._history, parent=self._parent, value=value, config=self.config)
        if at is not None:
            self._timers[Timer.HIST] = at
        assert self._recovery.episode is not None
        return self._recovery.episode

    def _add_hist(self, ep: Episode, msg: Hist, *, own: bool, now: float) -> None:
        if self._recovery.add_hist(ep, msg, own=own) and Timer.DECIDE not in self._timers:
            self._timers[Timer.DECIDE] = now + 1.5 * self.config.gap

    def _send_hist(self, now: float) -> None:
        hist, self._recovery.pending_hist = self._recovery.pending_hist, None
        if hist is None:
            return
        self._send(hist)
        self.stats.hists_sent += 1
        if self._recovery.episode is not None:
            self._add_hist(self._recovery.episode, hist, own=True, now=now)

    def _decide(self, now: float) -> None:
        decision = self._recovery.decide(self.value)
        if decision is None:
            return
        if decision.event is not None:
            self._events.append(decision.event)
        if decision.remote_wins:
            best, limit = decision.best, self.config.max_history
            self._await_ping = True  # the hist is stale news: bid only after the winners' next ping
            self._accept(best, now, merge(best.history, (), limit), best.history[1:], Relation.DIVERGED)
            if len(best.history) < self.config.splits:  # perhaps a heal beacon: cut, not complete
                self._known = min(self._known, len(best.history))
            self._learning = True  # and learn their current slot as a newcomer does
            for ping, at in decision.held:
                # their pings that came before we decided, as if they came after (recovery.py)
                self._handle_ping(ping, at)
            assert self._slot is not None
            if self._slot.node == best.node:
                # two hists of theirs answering the same slot: two of their pingers collided at
                # the heal, and ``best`` (the best by has_priority) need not be the collision's
                # winner, which two hists cannot tell (the pingers' old places are unknown).
                # Unless a replayed ping settled it, leave it to their next ping, which names
                # the winner (its history[1]), as for any collision we could not judge (§4)
                self._unsure.update(decision.rivals)
            # but a replayed ping never confirms our view: a winners' ping sent just before the
            # heal never reached us, so a collision among them may have had a winner we never
            # saw; learn their slot from a live ping
            if not self._await_ping:
                self._await_ping = self._learning = True
                assert self._slot is not None
                self._plan_ping(self._slot.at, now=now)

    def _on_hist(self, msg: Hist, now: float) -> None:
        if not self._history or self._learning:
            return  # a newcomer is on no side of a split
        if not self._recovery.own_side(msg, self._history, self._parent, now):
            # (a heal beacon of the other side's "it" is a hist of that side like any other)
            self._diverged(msg.node, msg.value, msg.history, now, msg)
            return
        if len(msg.history) == 2 and self._recovery.active(now) is None:
            # our own side's heal beacon (a recovery hist carries min(splits, chain) >= 2 entries;
            # ignoring a two-entry one costs at most a second hist of our side): nothing to do
            return
        ep = self._episode_for(now)  # our side has spoken: it saw the split
        self._add_hist(ep, msg, own=True, now=now)
        if self._recovery.pending_hist is not None:
            self._recovery.pending_hist = None
            self._timers.pop(Timer.HIST, None)
