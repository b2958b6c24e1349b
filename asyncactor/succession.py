"""A ping from another node: how it relates to our view, and adopting its sender as the holder.

Each ping is related to our chain (:func:`~asyncactor.history.relate`): a *repeat* of the
current holder, a *succession* (its sender saw the current slot), a *collision* (it answers
the slot before, as the current one does: ``has_priority`` and the collision ages of
:mod:`.collision` decide, the same way on every node), a *fresh* view to adopt (a newcomer's,
§4), or a *diverged* history (a healed split, handed to :mod:`.healing`).  Minimum tenure: a
succession never cuts a tag short; only a collision or a healed split does (DetagEvent).
Partial views (§4): a view adopted from one message is *learning* until a succession confirms
it; a collision it cannot judge is left to the next ping, which names the winner.
Sans-io, like the rest of the core.
"""

from __future__ import annotations

from typing import Any

from .collision import beats, moved, wire_known
from .events import DetagEvent
from .history import Relation, merge, relate, without
from .messages import Hist, Ping
from .pinging import Pinging
from .state import Phase, Slot, Timer

__all__ = ["Succession"]


class Succession(Pinging):
    """The core's handling of other nodes' pings (succession, collision, adoption)."""

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
        self._late_bids = 0
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

    def _diverged(self, node: str, value: Any, remote: tuple[str, ...], now: float, msg: Ping | Hist) -> None:
        """A ping or hist of the other side of a healed split: :class:`~.healing.SplitHealing`'s."""
        raise NotImplementedError
