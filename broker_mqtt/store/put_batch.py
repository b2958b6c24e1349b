"""Small puts placed together, applied as one record (the master's own writes; ``docs/elected-stores.md`` § 8).

A master applies each write as a record of its own: the record's stamps (seq, epoch, hlc, origin,
writer, n) travel with it, each follower decodes and applies them, and each holds it in its log.
Consecutive plain puts of one writer, in ``n`` order, are instead applied as one record whose op is
a ``many`` of their puts and whose ``n`` is the last: exactly what the followers apply already (a
work queue's records are such), and what a writer's ``n`` order means (the record applies writes
``first..n`` of the writer, the ``applied`` table's ``n`` moves to the last). A put joins a batch
only when its size is known to be small without encoding it (:func:`small_put_size`), and a batch
holds at most :data:`BATCH_BYTES`, so that its record fits any broker that carries this store's
log messages (which a record cannot be split across).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .packing import is_small_int
from .replica_messages import LOG_GROUP

__all__ = ["BATCH_BYTES", "small_put_size", "batch_length"]

BATCH_BYTES = 16 * 1024  #: bytes of puts one record holds at most (their bound by small_put_size)
SMALL_ITEM = 1024  #: characters of a key or value that small_put_size takes without encoding it


def _item_size(x: Any) -> int | None:
    """A bound of the encoding of ``x``, for the usual keys and values only (else None)."""
    t = type(x)
    if t is str:
        return len(x) + 3 if len(x) <= SMALL_ITEM and x.isascii() else None
    if t is int:
        return 9 if is_small_int(x) else None
    if t is float or t is bool or x is None:
        return 9
    if t is bytes:
        return len(x) + 3 if len(x) <= SMALL_ITEM else None
    return None


def small_put_size(command: Any) -> int | None:
    """A bound of the bytes a put adds to a record, for a put's wire (``["put", key, value, None]``)
    of a small key and value, no expiry; None for any other write."""
    if type(command) is not list or len(command) != 4 or command[0] != "put" or command[3] is not None:
        return None
    key, value = _item_size(command[1]), _item_size(command[2])
    if key is None or value is None:
        return None
    return key + value + 8  # (the op's list and its kind, the expiry)


def batch_length(writes: Sequence[tuple[int, Any]], start: int, next_n: int) -> int:
    """How many of ``writes`` (``(n, command wire)`` of one writer, in order) from ``start`` make one
    batch: small puts numbered ``next_n``, ``next_n + 1``, ... (at most LOG_GROUP, BATCH_BYTES in
    all); 0 or 1: no batch."""
    budget = BATCH_BYTES
    end = min(len(writes), start + LOG_GROUP)
    i = start
    while i < end:
        n, command = writes[i]
        size = small_put_size(command)
        if size is None or size > budget or n != next_n + (i - start):
            break
        budget -= size
        i += 1
    return i - start
