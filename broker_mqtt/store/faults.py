"""Fault injection for attached stores, for tests: drop and delay (reorder) incoming store messages.

A handle given ``faults=Faults(...)`` passes every decoded incoming message through a
:class:`FaultInjector` before its core sees it: with probability ``loss`` the message is dropped,
with probability ``reorder`` it is held for a random time up to ``max_delay`` seconds (later
messages overtake it), otherwise it passes at once. Draws come from ``random.Random(seed)``, so a
seed replays the same choices. The handle's timer loop delivers held messages when ``due`` and
wakes at ``next_deadline``. No I/O and no clock here: the caller passes ``now``.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from dataclasses import dataclass
from typing import Any

__all__ = ["Faults", "FaultInjector"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Faults:
    """Drop (``loss``) and delay by up to ``max_delay`` s (``reorder``) incoming store messages."""

    loss: float = 0.0
    reorder: float = 0.0
    max_delay: float = 0.02
    seed: int = 0


class FaultInjector:
    """Applies one :class:`Faults` to a stream of incoming messages; counts what it dropped and delayed."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.rng = random.Random(faults.seed)
        self.held: list[tuple[float, int, Any, Any]] = []
        self.counter = itertools.count()
        self.dropped = 0
        self.delayed = 0

    def filter(self, msg: Any, sender: Any, now: float) -> list[tuple[Any, Any]]:
        """What to deliver now of ``msg`` (from ``sender``): itself, or nothing (dropped or held)."""
        r = self.rng.random()
        if r < self.faults.loss:
            self.dropped += 1
        elif r < self.faults.loss + self.faults.reorder:
            self.delayed += 1
            heapq.heappush(self.held, (now + self.rng.random() * self.faults.max_delay, next(self.counter),
                                       msg, sender))
        else:
            return [(msg, sender)]
        return []

    def due(self, now: float) -> list[tuple[Any, Any]]:
        """The held messages due at ``now``, in order of their release time (removed from the hold)."""
        out = []
        while self.held and self.held[0][0] <= now:
            _, _, msg, sender = heapq.heappop(self.held)
            out.append((msg, sender))
        return out

    @property
    def next_deadline(self) -> float:
        """When the next held message is due (``math.inf``: none held)."""
        return self.held[0][0] if self.held else math.inf
