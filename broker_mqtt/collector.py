"""Python's cyclic garbage collector, set for a node's load (``docs/queues.md`` § 5).

A replica decodes and applies log messages of up to 64 KB: thousands of container objects at a
time (a record of a queue's 256 publishes is about a thousand), alive until the batch is applied.
With Python's default thresholds (a collection of the youngest generation every 700 net allocations
of containers, 3.11 and 3.12) most of a batch is still alive at some collection, so it is promoted,
and the older generations, which hold the state, are walked over and over: on the 2-core bench
machine about a fifth of a queue's standby replica's CPU went to collections.

:func:`tune_garbage_collector` is what ``broker-mqtt node`` (and the benchmarks' node processes)
do once connected, before they join their stores and queues (so that a join's snapshot is decoded
with it too). A library does not change its host process's collector by itself: an application
that embeds endpoints, stores or queues may call it, once in its start-up, before its replicas join.
"""

from __future__ import annotations

import gc

__all__ = ["NODE_THRESHOLDS", "tune_garbage_collector"]

#: (youngest, middle, oldest): what :func:`tune_garbage_collector` sets, for ``gc.set_threshold``
NODE_THRESHOLDS = (20_000, 20, 10)


def tune_garbage_collector(thresholds: tuple[int, int, int] = NODE_THRESHOLDS) -> tuple[int, int, int]:
    """Collect once, freeze what is left (``gc.freeze()``: modules, classes, the start-up's objects;
    the collector no longer walks them, and a garbage cycle among them is never freed; plain objects
    still are, as their last reference goes) and collect less often (``gc.set_threshold(*thresholds)``):
    batches of decoded messages then die before a collection sees them, instead of being promoted.
    Call it once, in start-up, before replicas join. Changes the whole process; returns the thresholds it
    replaced (``gc.unfreeze()`` and ``gc.set_threshold(*returned)`` undo it). Raises ValueError, and
    changes nothing, for thresholds that are not a tuple of three ints >= 1."""
    if not (isinstance(thresholds, tuple) and len(thresholds) == 3
            and all(type(t) is int and t >= 1 for t in thresholds)):
        raise ValueError(f"thresholds are a tuple of three ints >= 1 (youngest, middle, oldest), not {thresholds!r}")
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    return before
