"""Reconnect backoff: how long an endpoint waits before its next connection attempt.

Theory of operation. After every failed attempt or dropped connection the wait doubles, from
``low`` up to the cap ``high`` (the endpoint's ``reconnect_delay=(low, high)``), and each wait is
multiplied by a jitter factor drawn uniformly from [0.5, 1.5) so that a fleet cut off together
does not reconnect in step. The backoff goes back to ``low`` only after a connection that
*lived*: one that stayed up at least ``stable_after`` seconds (by default the larger of 2 s and
twice the cap). A link that flaps (connects, then drops at once) therefore keeps backing off
instead of reconnecting in a tight loop, while a node whose long-lived connection breaks
retries quickly. The cap bounds the time from a heal to the next attempt: at most ``1.5 * high``
(plus the connect itself), which is what sets the time to rejoin after an outage.

Sans-io: time is passed in (``now``) and randomness comes from an injected ``random.Random``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..errors import UsageError

__all__ = ["Backoff", "DEFAULT_RECONNECT_DELAY"]

#: ``reconnect_delay`` when none is given: heal to rejoined p99 <= 2 s (bench/rejoin.py)
DEFAULT_RECONNECT_DELAY = (0.05, 1.0)


@dataclass(slots=True)
class Backoff:
    """Exponential backoff with jitter, reset only after a connection that lived.

    ``low`` > 0 and ``high`` >= ``low`` (raises :class:`UsageError` otherwise). Call
    :meth:`connected` when a connection opens and :meth:`next_delay` when an attempt failed or a
    connection dropped: it returns the seconds to wait before the next attempt.
    """

    low: float
    high: float
    stable_after: float | None = None
    rng: random.Random = field(default_factory=random.Random)
    delay: float = field(init=False)
    _since: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if not 0 < self.low <= self.high:
            raise UsageError(f"reconnect_delay must be (low, high) with 0 < low <= high, not ({self.low}, {self.high})")
        if self.stable_after is None:
            self.stable_after = max(2.0, 2 * self.high)
        self.delay = self.low

    def connected(self, now: float) -> None:
        """A connection opened at ``now`` (it has not lived yet)."""
        self._since = now

    def next_delay(self, now: float) -> float:
        """The attempt failed or the connection dropped at ``now``: seconds to wait (jittered)."""
        assert self.stable_after is not None
        if self._since is not None and now - self._since >= self.stable_after:
            self.delay = self.low  # the connection lived: start over
        self._since = None
        wait = self.delay * (0.5 + self.rng.random())
        self.delay = min(self.delay * 2, self.high)
        return wait
