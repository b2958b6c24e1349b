"""The clock of attached stores: monotonic seconds aligned with wall-clock time at import.

Monotonic, so timers never jump; offset to the wall clock, so an expiry stored as an absolute time
(``Entry.expiry`` in a SQLite backend) still means the same moment after a restart. The sans-io
cores never read it: the I/O layer passes ``now`` to them.
"""

from __future__ import annotations

import time

__all__ = ["clock"]

_WALL_OFFSET = time.time() - time.monotonic()


def clock() -> float:
    """Monotonic seconds aligned with wall-clock time at import (expiries survive restarts)."""
    return time.monotonic() + _WALL_OFFSET
