"""The recent records a replica keeps to catch other replicas up by tail instead of by snapshot.

Bounded by ops, not by records: a record of a batch (``["many", [op, ...]]``: a queue's publish of
256 messages, say) counts each of its ops, so what the log holds in memory, and what the garbage
collector walks through, grows with the work done, not with how it was batched. The oldest records
go first; the newest one always stays. A replica that is further behind than the log reaches is
caught up by snapshot instead (``Replica``), which is slower but equally correct.

The log holds each record as a plain tuple of its fields, not as the :class:`~.versioned.Record`: a
tuple of atoms (a put of a str key and a scalar value) is one the garbage collector stops tracking,
so the ``keep`` records a busy replica holds are not walked by every collection (a ``Record`` is a
slotted object, always tracked: at 40,000 writes a second the log's 20,000 records made about a
third of a full collection's work). Records are built again only when read (a tail, a snapshot's
touched keys), which is rare.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any, Final

from .versioned import Record

__all__ = ["RecordLog", "op_count"]


def op_count(op: tuple[Any, ...]) -> int:
    """How many ops a record's op stands for (a ``many`` op: its parts; every record at least one)."""
    return max(len(op[1]), 1) if op[0] == "many" else 1


_Fields = tuple[int, Any, int, str, str, int, tuple[Any, ...], Any]  # a Record's, in field order
_SEQ: Final = 0  # the indexes of seq, writer, n, op and result in _Fields
_WRITER: Final = 4
_N: Final = 5
_OP: Final = 6
_RESULT: Final = 7


class RecordLog:
    """Records in ``seq`` order, at most ``keep`` ops (but always the newest record)."""

    __slots__ = ("_records", "keep", "ops")

    def __init__(self, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"log_keep must be >= 1 op, not {keep!r}")
        self._records: deque[_Fields] = deque()  # see the module docstring: tuples, not Records
        self.keep = keep
        self.ops = 0  # ops held

    def append(self, record: Record) -> None:
        op = record.op
        self._records.append((record.seq, record.epoch, record.hlc, record.origin, record.writer, record.n, op,
                              record.result))
        self.ops += op_count(op)
        records = self._records
        while self.ops > self.keep and len(records) > 1:
            self.ops -= op_count(records.popleft()[_OP])

    def clear(self) -> None:
        self._records.clear()
        self.ops = 0

    def covers(self, after: int, last: int) -> bool:
        """True when the log holds every record after ``seq`` ``after`` up to ``last``."""
        records = self._records
        return bool(records) and records[0][_SEQ] <= after + 1 and records[-1][_SEQ] == last

    def after(self, seq: int, *, chunk_ops: int = 256) -> list[list[Record]]:
        """The records after ``seq``, oldest first, in chunks of at most ``chunk_ops`` ops (or one
        record, if it alone has more); one empty chunk when there are none."""
        chunks: list[list[Record]] = [[]]
        ops = 0
        for fields in self._records:
            if fields[_SEQ] <= seq:
                continue
            n = op_count(fields[_OP])
            if chunks[-1] and ops + n > chunk_ops:
                chunks.append([])
                ops = 0
            chunks[-1].append(Record(*fields))
            ops += n
        return chunks

    def results_of(self, writer: str, first: int, last: int) -> dict[int, Any]:
        """The answers (a record's ``result``, None for most) of ``writer``'s writes ``first`` to
        ``last`` that the log holds, by write number. Looks at every record: for the rare case of a
        write whose answer the state no longer keeps."""
        return {fields[_N]: fields[_RESULT] for fields in self._records
                if fields[_WRITER] == writer and first <= fields[_N] <= last}

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        return (Record(*fields) for fields in self._records)
