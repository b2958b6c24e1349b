"""Healed splits (docs/asyncactor.md §7): episodes, ``hist`` broadcasts, one decision per node.

Theory of operation
-------------------
A message whose history answers a slot we never saw comes from the other side of a healed split
and opens an :class:`Episode` (or joins the one open; an episode lasts ``3 * cycle``).  Each side
re-broadcasts its history once as ``hist``: a node schedules its own at ``prio * gap`` (its place
on its side's chain) and drops it as soon as one of its own side's arrives, so one ``hist`` goes
out per side.  ``1.5 * gap`` after a node knows a hist of each side it decides: the best hist by
``has_priority`` names the winning side.  Every node sees the same broadcasts, so every node
picks the same winner, and each reports at most one :class:`RecoverEvent` per episode.

Pings of the other side that arrive *before* the decision are held, in arrival order.  If the
other side wins they are handed back with the decision: the protocol replays them on top of the
winners' hist, exactly as if it had decided before they came (it follows the first and relates
the rest to it).  Setting them aside instead let a loser follow whichever winner's ping came
*after* its decision: when two of theirs crossed, that could be the collision's loser, and the
loser side then answered a slot nobody else held, which opened a second episode (a second
RecoverEvent and a double "it" until it was resolved).  The replay never confirms the loser's
view, though: a winners' ping sent just before the heal reached only the winners, so the losers
may have seen only the loser of a collision among them; the protocol keeps the loser unconfirmed
until a live ping of the winners arrives (docs/asyncactor.md §7).  Likewise two hists of the
winners that answer the same slot come from two of their pingers that collided at the heal: the
best of them by ``has_priority`` need not be the collision's winner, so the decision names the
others (``rivals``) and the losers leave the choice to the winners' next ping.

:class:`SplitRecovery` is a plain object: it takes messages and times and returns decisions; the
protocol (:class:`~asyncactor.protocol.ActorCore`) owns timers, phases and the slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import Config
from .events import RecoverEvent
from .history import Relation, compatible, relate
from .messages import Hist, Ping
from .policy import PriorityFn

__all__ = ["Episode", "Decision", "SplitRecovery"]


@dataclass(slots=True)
class Episode:
    """One healed-split episode as this node sees it."""

    local: tuple[str, ...]  # our side's history when we noticed
    parent: tuple[str, ...]
    until: float  # messages after this start a new episode
    hists: list[tuple[Hist, bool]] = field(default_factory=list)  # (hist, from our side)
    held: list[tuple[Ping, float]] = field(default_factory=list)  # other side's pings before deciding
    decided: bool = False
    remote_wins: bool = False
    reported: bool = False  # our RecoverEvent is out
    followed: bool = False  # the loser side has followed the winners' first real ping
    own_set: set[str] = field(default_factory=set)
    remote_set: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Decision:
    """What a node does when it decides an episode.

    ``event``: its RecoverEvent (None if it has no value or is not on its side's chain);
    ``remote_wins``: the other side continues, so adopt ``best`` and replay ``held`` (the winners'
    pings that arrived before the decision, in arrival order, with their arrival times), dropping
    those that ``best`` already reflects; ``rivals``: the heads of the winners' other hists that
    answer the same slot as ``best`` (two of their pingers collided; the next ping names the
    winner)."""

    remote_wins: bool
    best: Hist
    event: RecoverEvent | None
    held: tuple[tuple[Ping, float], ...]
    rivals: tuple[str, ...] = ()  # heads of other winners' hists answering the same slot as best


class SplitRecovery:
    """The split-recovery state of one node: at most one open episode and our pending ``hist``."""

    def __init__(self, name: str, has_priority: PriorityFn) -> None:
        self.name = name
        self.has_priority = has_priority
        self.episode: Episode | None = None
        self.pending_hist: Hist | None = None  # ours, to broadcast unless our side speaks first

    def active(self, now: float) -> Episode | None:
        ep = self.episode
        return ep if ep is not None and now < ep.until else None

    def open(
        self, now: float, *, history: tuple[str, ...], parent: tuple[str, ...], value: Any, config: Config
    ) -> float | None:
        """Start a new episode from our side's ``history``; returns when to send our ``hist``
        (None: we have no history to tell)."""
        local = history[: config.splits]
        ep = self.episode = Episode(local=local, parent=parent, until=now + 3 * config.cycle)
        ep.own_set.update(local)
        if not local:
            self.pending_hist = None
            return None
        pos = local.index(self.name) if self.name in local else config.splits
        self.pending_hist = Hist(value, local)
        return now + pos * config.gap

    def is_remote(self, ep: Episode, history: Sequence[str]) -> bool:
        theirs = sum(n in ep.remote_set for n in history)
        ours = sum(n in ep.own_set for n in history)
        return theirs > ours

    def add_hist(self, ep: Episode, msg: Hist, *, own: bool) -> bool:
        """Record a hist; True once hists of both sides are known (time to plan the decision)."""
        if ep.decided or any(h.history == msg.history for h, _ in ep.hists):
            return False
        ep.hists.append((msg, own))
        return len({o for _, o in ep.hists}) == 2

    def hold(self, ep: Episode, msg: Ping, now: float) -> None:
        """Keep a ping of the other side that came before the decision (see the module text)."""
        if not ep.decided:
            ep.held.append((msg, now))

    def own_side(self, msg: Hist, history: tuple[str, ...], parent: tuple[str, ...], now: float) -> bool:
        """Is ``msg`` a hist of our own side (our view now, or our view when the episode opened)?"""
        h = msg.history
        if _same_side(h, history, parent):
            return True
        ep = self.active(now)
        return ep is not None and _same_side(h, ep.local, ep.parent)

    def decide(self, value: Any) -> Decision | None:
        """Pick the winning side of the open episode (once); None if there is nothing to decide."""
        ep = self.episode
        if ep is None or ep.decided or not ep.hists:
            return None
        ep.decided = True
        best, best_own = ep.hists[0]
        for h, o in ep.hists[1:]:
            if self.has_priority(h.node, h.value, best.node, best.value) or (
                h.node == best.node and len(h.history) > len(best.history)  # a heal beacon is cut
            ):
                best, best_own = h, o
        ep.remote_wins = not best_own
        remote = next((h for h, o in ep.hists if o == ep.remote_wins), best) if best_own else best
        pos = ep.local.index(self.name) if self.name in ep.local else None
        event = None
        if value is not None and pos is not None and not ep.reported:
            ep.reported = True
            event = RecoverEvent(pos, ep.remote_wins, ep.local, remote.history)
        held: tuple[tuple[Ping, float], ...] = ()
        if ep.remote_wins:
            held = tuple(
                (p, t) for p, t in ep.held if self.is_remote(ep, p.history) and not _reflected(p.history, best.history)
            )
        ep.held = []
        rivals: tuple[str, ...] = ()
        if ep.remote_wins and len(best.history) > 1:
            rivals = tuple(
                h.node for h, o in ep.hists
                if not o and h.node != best.node and h.history[1:2] == best.history[1:2]
            )  # fmt: skip
        return Decision(ep.remote_wins, best, event, held, rivals)


def _same_side(h: tuple[str, ...], history: tuple[str, ...], parent: tuple[str, ...]) -> bool:
    if compatible(h, history) or compatible(h, parent):
        return True
    return bool(history) and relate(h, history, parent) is not Relation.DIVERGED


def _reflected(ping: tuple[str, ...], hist: tuple[str, ...]) -> bool:
    """True if ``hist`` records the very ping whose history is ``ping``: its sender's place in
    ``hist`` is followed by the slot that ping answered.  (A sender at the end of ``hist`` may
    have pinged again since: not provably the same ping, so it is replayed.)"""
    if ping[0] not in hist:
        return False
    i = hist.index(ping[0])
    k = min(len(ping), len(hist) - i)
    return (k >= 2 or len(ping) == 1) and ping[:k] == hist[i : i + k]
