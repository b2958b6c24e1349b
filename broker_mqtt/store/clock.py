"""The clock of stores and queues: the event loop's clock, aligned with wall-clock time.

:func:`clock` is ``anyio.current_time()`` plus an offset to the wall clock taken once per event
loop (at its first call in that loop). The event loop's clock, so timers never jump and a test on
trio's ``MockClock`` drives every timer and expiry in simulated time; offset to the wall clock, so
an expiry stored as an absolute time (``Entry.expiry`` in a SQLite backend, a queue's leases) still
means the same wall-clock moment after a restart, and a hybrid logical clock over it stays close to
the wall clock of the other nodes. Like a monotonic clock, it does not follow steps of the system
clock made while the loop runs. Outside an event loop it is the process's monotonic clock aligned
at import. The sans-io cores never read it: the I/O layer passes ``now`` (and ``wall``) to them.
"""

from __future__ import annotations

import time
from asyncio import _get_running_loop
from typing import Any

import anyio
from anyio.lowlevel import RunVar

sniffio: Any
try:  # as anyio: without sniffio, a running asyncio loop means the asyncio backend
    import sniffio
except ModuleNotFoundError:  # pragma: no cover
    sniffio = None

__all__ = ["clock", "loop_time"]

_WALL_OFFSET = time.time() - time.monotonic()
_offset: RunVar[float] = RunVar("broker_mqtt.store.clock offset")
# asyncio's loop.time() is what anyio.current_time() returns there: a fast path for the last loop
_asyncio_loop: object = None
_asyncio_offset = 0.0


def clock() -> float:
    """The event loop's time (``anyio.current_time()``) plus its offset to the wall clock, seconds
    since the epoch; see the module docstring."""
    global _asyncio_loop, _asyncio_offset
    loop = _get_running_loop()
    if loop is not None and loop is _asyncio_loop:
        return loop.time() + _asyncio_offset
    try:
        now = anyio.current_time()
    except RuntimeError:  # no event loop (anyio's NoEventLoopError): as before, monotonic + offset
        return time.monotonic() + _WALL_OFFSET
    offset = _offset.get(None)
    if offset is None:
        offset = time.time() - now
        _offset.set(offset)
    if loop is not None and (sniffio is None or sniffio.current_async_library() == "asyncio"):
        # the asyncio backend (not trio running as a guest of an asyncio loop)
        _asyncio_loop, _asyncio_offset = loop, offset
    return now + offset


def loop_time() -> float:
    """``anyio.current_time()``, with :func:`clock`'s fast path on the asyncio loop it saw last (no
    backend lookup per call: a store reads it once per write)."""
    loop = _get_running_loop()
    if loop is not None and loop is _asyncio_loop:
        return loop.time()
    return anyio.current_time()
