"""Row ids on emitted messages and the subscriber-side de-duplication they make possible.

Theory of operation. Spark delivers at least once: a failed task is re-run, a streaming batch
may be replayed after a restart. Every message the bridge emits therefore carries the id of
its row under the reserved key :data:`ROW_ID_KEY` (``"$spark"``) of its map:
``[job, batch, partition, row]`` — the write job's id (a random hex string for a batch write,
the streaming query's id for a streaming write), the micro-batch id (0 for batch writes), the
Spark partition and the row's index within that partition. A re-run task recomputes the same
partition with the same row order, so its rows carry the same ids (docs/spark.md, "Exactly once
for receivers"). :class:`Deduplicator` remembers, per (job, batch, partition), the rows it has
seen: a contiguous low-water mark plus the set of rows seen above it, so memory stays small when
rows arrive in order. No I/O here and no pyspark: edge nodes use this without Spark installed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any, Self

from ..endpoint.events import Message

__all__ = ["ROW_ID_KEY", "RowId", "row_id", "Deduplicator", "DeduplicatorStatistics", "dedup", "Deduplicated"]

#: The reserved map key that carries ``[job, batch, partition, row]`` on emitted messages.
ROW_ID_KEY = "$spark"


@dataclass(frozen=True, slots=True)
class RowId:
    """Where an emitted row came from: unique per row of one write job or streaming query."""

    job: str  #: batch write: a random id per ``save()``; streaming: the query id
    batch: int  #: streaming micro-batch id; 0 for batch writes
    partition: int  #: Spark partition id
    row: int  #: index of the row within its partition (0-based)


def row_id(data: Any, *, key: str = ROW_ID_KEY) -> RowId | None:
    """The :class:`RowId` a message's data carries, or None if it carries none (or a bad one)."""
    if isinstance(data, dict):
        value = data.get(key)
        if isinstance(value, list) and len(value) == 4:
            job, batch, partition, row = value
            if isinstance(job, str) and all(type(x) is int for x in (batch, partition, row)):
                return RowId(job, batch, partition, row)
    return None


class _Seen:
    """Row indices seen of one partition: every index < ``low``, plus those in ``above``."""

    __slots__ = ("low", "above")

    def __init__(self) -> None:
        self.low = 0
        self.above: set[int] = set()

    def add(self, row: int) -> bool:
        if row < self.low or row in self.above:
            return False
        if row == self.low:
            low = row + 1
            above = self.above
            while low in above:
                above.remove(low)
                low += 1
            self.low = low
        else:
            self.above.add(row)
        return True


@dataclass(slots=True)
class DeduplicatorStatistics:
    passed: int = 0  #: messages let through (first copies and messages without a row id)
    dropped: int = 0  #: repeats dropped
    without_id: int = 0  #: messages that carried no row id (always passed)
    partitions: int = 0  #: (job, batch, partition) entries remembered now
    evicted: int = 0  #: entries forgotten because of ``max_partitions``


class Deduplicator:
    """Drops repeated rows: ``if dedup.is_new(msg.data): handle(msg)``.

    Not thread-safe; no I/O. Messages without a row id are always new. Memory: one entry per
    (job, batch, partition) seen, small when rows of a partition arrive mostly in order. At most
    ``max_partitions`` entries are kept, least recently used first out; a repeat that arrives
    after its entry was evicted is passed again (size the bound to cover the span over which
    Spark can retry: a job, or a few streaming batches).
    """

    def __init__(self, *, max_partitions: int = 100_000, key: str = ROW_ID_KEY) -> None:
        if max_partitions < 1:
            raise ValueError("max_partitions must be at least 1")
        self.max_partitions = max_partitions
        self.key = key
        self._seen: OrderedDict[tuple[str, int, int], _Seen] = OrderedDict()
        self._stats = DeduplicatorStatistics()

    def is_new(self, data: Any) -> bool:
        """True the first time a row id is seen (and for data without a row id), else False."""
        rid = row_id(data, key=self.key)
        stats = self._stats
        if rid is None:
            stats.without_id += 1
            stats.passed += 1
            return True
        part_key = (rid.job, rid.batch, rid.partition)
        seen = self._seen.get(part_key)
        if seen is None:
            seen = self._seen[part_key] = _Seen()
            if len(self._seen) > self.max_partitions:
                self._seen.popitem(last=False)
                stats.evicted += 1
        else:
            self._seen.move_to_end(part_key)
        if seen.add(rid.row):
            stats.passed += 1
            return True
        stats.dropped += 1
        return False

    def statistics(self) -> DeduplicatorStatistics:
        s = self._stats
        return DeduplicatorStatistics(s.passed, s.dropped, s.without_id, len(self._seen), s.evicted)


class Deduplicated:
    """An async iterator over the messages of ``source`` without repeats (see :func:`dedup`)."""

    def __init__(self, source: AsyncIterable[Message], deduplicator: Deduplicator) -> None:
        self._source: AsyncIterator[Message] = aiter(source)
        self.deduplicator = deduplicator

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        is_new = self.deduplicator.is_new
        while True:
            msg = await anext(self._source)
            if is_new(msg.data):
                return msg


def dedup(source: AsyncIterable[Message], deduplicator: Deduplicator | None = None) -> Deduplicated:
    """Wrap a subscription: ``async with ep.subscribe("/x") as sub: async for msg in dedup(sub)``.

    Yields each row once, in the order the subscription delivers; repeats are dropped. The
    subscription still owns the resources: closing it ends the iteration.
    """
    return Deduplicated(source, deduplicator or Deduplicator())
