"""Writes that many tasks place, in rounds that are answered and woken together (``ElectedStore``).

A task places write ``n`` (:meth:`WriteRounds.place`) and waits for its outcome
(:meth:`WriteRounds.outcome`). The writes placed before the store's pump next runs make a round of at
most :data:`ROUND_WRITES`, with one event for all of them rather than one each; the replica answers
whole rounds at once (:meth:`WriteRounds.answer`), since a master sends each round as one log message
and answers it once that is acknowledged.

When several rounds are answered together, :meth:`WriteRounds.wake` wakes the first round's tasks
at once and each next round's one pass of the event loop later (:meth:`WriteRounds.run`): the writes
the first round's tasks place then leave, a log message of their own, before the next round's tasks
run. The master applies new writes while the followers apply the last ones, where waking every
round at once made them take turns (``docs/elected-stores.md`` § 8).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import anyio
import anyio.lowlevel

from .replica_messages import LOG_GROUP

__all__ = ["ROUND_WRITES", "WriteRounds"]

#: writes placed together that are answered together at most (a round): one log message's worth
ROUND_WRITES = LOG_GROUP

#: a write's outcome: ("ok", its answer) or ("error", the exception to raise)
Outcome = tuple[str, Any]


class WriteRounds:
    """The writes placed and not yet answered, by round. Not thread-safe: one event loop."""

    def __init__(self, round_writes: int = ROUND_WRITES) -> None:
        self.round_writes = round_writes
        self._waiting: dict[int, anyio.Event] = {}  # write n -> the event it waits on (its round's)
        self._outcomes: dict[int, Outcome] = {}
        self._round: anyio.Event | None = None  # the event of the round being placed
        self._placed = 0  # writes placed in it
        self._answered: dict[anyio.Event, None] = {}  # rounds answered since the last wake()
        self._to_wake: deque[anyio.Event] = deque()  # answered rounds run() sets, one a loop pass
        self._wake_more = anyio.Event()
        # a round woken with some of its writes still unanswered: its event, and the one those wait
        # on next (shared, as the round's was; its tasks run one after another when it is set)
        self._regrouped: tuple[anyio.Event | None, anyio.Event | None] = (None, None)

    def place(self, n: int) -> bool:
        """Note write ``n`` in the current round. True when it opens a round: the caller then makes
        its pump run, which sends this round's writes (and ends the round, :meth:`end_round`)."""
        event = self._round
        opened = False
        if event is None or self._placed >= self.round_writes:
            event = self._round = anyio.Event()
            self._placed = 0
            opened = True
        self._placed += 1
        self._waiting[n] = event
        return opened

    def end_round(self) -> None:
        """The pump ran: the writes placed from now on are the next round."""
        self._round = None

    async def outcome(self, n: int) -> Outcome:
        """Wait until write ``n`` (placed) is answered; its outcome. Cancelling forgets it."""
        event = self._waiting[n]
        try:
            while (outcome := self._outcomes.pop(n, None)) is None:
                await event.wait()
                if n not in self._outcomes:  # woken with writes placed beside it: its answer is still to come
                    old, new = self._regrouped
                    if old is not event or new is None or new.is_set():
                        new = anyio.Event()
                        self._regrouped = (event, new)
                    event = self._waiting[n] = new
        finally:
            self._waiting.pop(n, None)
            self._outcomes.pop(n, None)
        return outcome

    def answer(self, n: int, outcome: Outcome) -> None:
        """Write ``n`` is answered (its task wakes at the next :meth:`wake`); ignored when its caller
        was cancelled or it was answered already."""
        event = self._waiting.get(n)
        if event is not None:
            self._outcomes[n] = outcome
            self._answered[event] = None

    def wake(self) -> None:
        """Wake the tasks of the rounds answered since the last call: the first round's now, the
        others one round per pass of the event loop (:meth:`run`)."""
        if not self._answered:
            return
        idle = not self._to_wake
        self._to_wake.extend(self._answered)
        self._answered.clear()
        if idle:
            self._to_wake.popleft().set()
            if self._to_wake:
                self._wake_more.set()

    async def run(self) -> None:
        """Wake the rounds :meth:`wake` left, one per pass of the event loop; runs until cancelled."""
        while True:
            await self._wake_more.wait()
            self._wake_more = anyio.Event()
            while self._to_wake:
                self._to_wake.popleft().set()
                await anyio.lowlevel.checkpoint()

    def fail_all(self, outcome: Outcome) -> None:
        """Answer every write still waiting with ``outcome`` and wake them all now (the store closed)."""
        for n, event in self._waiting.items():
            self._outcomes.setdefault(n, outcome)  # (an answer already in stands)
            event.set()
