"""Node histories: who pinged recently, newest first, and how two histories relate.

Theory of operation
-------------------
Every node keeps the same move-to-front list of recent pingers (the *chain*, at most ``nodes``
long) because every node sees the same pings.  A ping carries its sender's list cut to ``splits``
entries.  Comparing that with the local list classifies the ping (docs/asyncactor.md §4):

* ``REPEAT``: the sender holds the current slot and pings again (lone node, sticky holder).
* ``SUCCESSION``: the sender saw the current slot's ping (its holder is ``remote[1]``): a
  normal new slot.  Slots are named by their holder, so this needs no more of the history.
  Never a reason to cut the current "it" short (minimum tenure).
* ``COLLISION``: the sender did not see the current slot's ping but answered the same previous
  slot (see :func:`answers`; a one-entry history answers anything): two pings crossed; the
  core's collision order (``ActorCore._beats``, §4) picks one.
* ``DIVERGED``: the sender answered a slot we never saw: the two sides of a healed split.
  (Comparing whole histories instead raises false alarms after merges and collisions, where
  views legitimately differ beyond their heads.)
* ``FRESH``: we know nothing yet; adopt the sender's view.

A newcomer (empty history) or a re-enabled node (it kept tracking pings) is never DIVERGED.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

__all__ = ["Relation", "answers", "relate", "compatible", "merge", "without"]


class Relation(enum.Enum):
    FRESH = "fresh"
    REPEAT = "repeat"
    SUCCESSION = "succession"
    COLLISION = "collision"
    DIVERGED = "diverged"


def without(history: Sequence[str], *nodes: str) -> tuple[str, ...]:
    return tuple(n for n in history if n not in nodes)


def compatible(a: Sequence[str], b: Sequence[str]) -> bool:
    """True if ``a`` and ``b`` agree on their common prefix."""
    k = min(len(a), len(b))
    return tuple(a[:k]) == tuple(b[:k])


def merge(front: Sequence[str], back: Sequence[str], limit: int | None) -> tuple[str, ...]:
    """``front`` followed by the entries of ``back`` it lacks, cut to ``limit`` (None: no cut)."""
    seen = set(front)
    out = list(front) + [n for n in back if n not in seen]
    return tuple(out if limit is None else out[:limit])


def answers(remote: Sequence[str], head: str | None) -> bool:
    """True if a ping with history ``remote`` answers the slot held by ``head`` (None: no slot
    yet).  A pinger puts itself in front of the holder it saw, or stays in front if it was the
    holder (a repeat); a history of one entry carries no information and answers anything."""
    if len(remote) == 1:
        return True
    return remote[0] == head or remote[1] == head


def relate(remote: Sequence[str], local: Sequence[str], parent: Sequence[str]) -> Relation:
    """Classify a ping whose sender's history is ``remote`` (``remote[0]`` is the sender).

    ``local``: our history, ``local[0]`` the holder of the current slot; ``parent``: our history
    before the current slot's ping was added (the slot that ping answered).  The classification
    depends only on which slot the ping answers, so every node that saw the same pings resolves
    a collision the same way whatever the arrival order."""
    if not local:
        return Relation.FRESH
    sender, current = remote[0], local[0]
    if sender == current:
        return Relation.REPEAT
    if len(remote) > 1 and remote[1] == current:
        return Relation.SUCCESSION
    head = parent[0] if parent else None
    if answers(remote, head):
        return Relation.COLLISION
    return Relation.DIVERGED
