"""The recent records a replica keeps to catch other replicas up by tail instead of by snapshot.

Bounded by ops, not by records: a record of a batch (``["many", [op, ...]]``: a queue's publish of
256 messages, say) counts each of its ops, so what the log holds in memory, and what the garbage
collector walks through, grows with the work done, not with how it was batched. The oldest records
go first; the newest one always stays. A replica that is further behind than the log reaches is
caught up by snapshot instead (``Replica``), which is slower but equally correct.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from .versioned import Record

__all__ = ["RecordLog", "op_count"]


def op_count(op: tuple[Any, ...]) -> int:
    """How many ops a record's op stands for (a ``many`` op: its parts; every record at least one)."""
    return max(len(op[1]), 1) if op[0] == "many" else 1


class RecordLog:
    """Records in ``seq`` order, at most ``keep`` ops (but always the newest record)."""

    __slots__ = ("_records", "keep", "ops")

    def __init__(self, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"log_keep must be >= 1 op, not {keep!r}")
        self._records: deque[Record] = deque()
        self.keep = keep
        self.ops = 0  # ops held

    def append(self, record: Record) -> None:
        self._records.append(record)
        self.ops += op_count(record.op)
        while self.ops > self.keep and len(self._records) > 1:
            self.ops -= op_count(self._records.popleft().op)

    def clear(self) -> None:
        self._records.clear()
        self.ops = 0

    def covers(self, after: int, last: int) -> bool:
        """True when the log holds every record after ``seq`` ``after`` up to ``last``."""
        records = self._records
        return bool(records) and records[0].seq <= after + 1 and records[-1].seq == last

    def after(self, seq: int, *, chunk_ops: int = 256) -> list[list[Record]]:
        """The records after ``seq``, oldest first, in chunks of at most ``chunk_ops`` ops (or one
        record, if it alone has more); one empty chunk when there are none."""
        chunks: list[list[Record]] = [[]]
        ops = 0
        for record in self._records:
            if record.seq <= seq:
                continue
            n = op_count(record.op)
            if chunks[-1] and ops + n > chunk_ops:
                chunks.append([])
                ops = 0
            chunks[-1].append(record)
            ops += n
        return chunks

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self._records)
