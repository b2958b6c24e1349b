"""Healed splits (docs/asyncactor.md §7): the actor core's side of a recovery episode.

A ping or ``hist`` whose history disagrees with ours comes from the other side of a healed
split.  Each node reports one RecoverEvent per split, one node per side re-broadcasts its side's
history as ``hist``, and the side with priority continues; the losers adopt the winners' view and
replay the winners' early pings.  The bookkeeping (episodes, held pings, the decision) is
:class:`~asyncactor.recovery.SplitRecovery`'s; this layer owns the timers (``HIST``, ``DECIDE``)
and applies the decision to the slot.  Sans-io, like the rest of the core.
"""

from __future__ import annotations

from typing import Any

from .events import DetagEvent
from .history import Relation, merge
from .messages import Hist, Ping
from .recovery import Episode
from .state import Phase, Timer
from .succession import Succession

__all__ = ["SplitHealing"]


class SplitHealing(Succession):
    """The core's handling of healed splits (``hist`` messages, diverged pings, the decision)."""

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
            and self.has_priority(node, value, self.name, self._slot.value)  # type: ignore[union-attr]  # `mine` holds only when _slot is set
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
