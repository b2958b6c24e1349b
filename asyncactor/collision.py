"""Crossing pings (docs/asyncactor.md §4): who wins a collision, and how much of a view is exact.

Theory of operation
-------------------
Two pings that answer the same slot collide.  Every node that shares the history before that
slot (the *parent*) must pick the same winner whatever the arrival order, so :func:`beats` looks
only at the two pings and the parent:

1. a None value loses to a value;
2. the pinger further back in the parent wins (longer since its last turn); not there at all (a
   newcomer) is furthest back, the holder of the answered slot repeating itself is nearest;
3. otherwise (two newcomers) ``has_priority``.

A view adopted from one message (``unsure``) lacks the pingers' old places; each ping's history
shows where the *other* pinger was, which settles it unless they were neighbours (or both were
cut off the wire): then :func:`beats` returns None and the next ping names the winner.  Only the
leading ``pknown`` entries of a parent that came off the wire are trusted (:func:`moved`,
:func:`wire_known` keep that count).
"""

from __future__ import annotations

from typing import Protocol

from .messages import Ping
from .policy import PriorityFn

__all__ = ["ALL", "beats", "moved", "wire_known"]

ALL = 1 << 30  # "every entry is known"


class _Pinged(Protocol):
    node: str
    value: object
    history: tuple[str, ...]


def beats(
    his: Ping,
    mine: _Pinged,
    *,
    unsure: bool,
    parent: tuple[str, ...],
    pknown: int,
    splits: int,
    has_priority: PriorityFn,
) -> bool | None:
    """True if ``his`` ping wins over the slot ``mine``; None if this view cannot tell."""
    if (his.value is None) != (mine.value is None):
        return mine.value is None
    inf = ALL
    if unsure:
        his_age = mine.history.index(his.node) if his.node in mine.history else inf
        my_age = his.history.index(mine.node) if mine.node in his.history else inf
        cut = max(len(his.history), len(mine.history)) >= splits
        if his_age == my_age and (his_age != inf or cut):
            return None
    else:
        # a node not among the exact leading entries counts as furthest back, as for every
        # node whose parent came off the wire
        his_age, my_age = (parent.index(n) if n in parent[:pknown] else inf for n in (his.node, mine.node))
    if his_age != my_age:
        return his_age > my_age
    return has_priority(his.node, his.value, mine.node, mine.value)


def moved(node: str, history: tuple[str, ...], known: int) -> int:
    """How many leading entries stay known when ``node`` moves to the front of ``history``."""
    return known if known >= ALL or node in history[:known] else known + 1


def wire_known(history: tuple[str, ...], splits: int) -> int:
    """A ping's history is its sender's view cut to ``splits``: complete if shorter."""
    return len(history) if len(history) >= splits else ALL
