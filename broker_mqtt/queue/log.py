"""Log readers of a work queue: the anyio layer (``docs/queues.md``, "Log readers").

Theory of operation:

* A log reader is a name registered in the queue's replicated state (key ``"reader/<name>"``, its
  *pointer*: the last id it committed). While it is registered, an accepted message it has not read
  past is kept (state ``done``) instead of erased; the commands of :mod:`.commands` decide, at the
  master, what is kept and what is erased.
* :class:`LogReader` (``async with queue.read_log("audit") as log: async for entry in log``) asks the
  master for the pointer (one write, so it is the authoritative one, whichever node committed it
  last), then reads the *local replica* from the id after it, in id order, every message whatever its
  state (ready, acquired, done or dead), and waits for new ones when it has read everything. It needs
  a replica (``attach_queue(..., replica=False)`` handles cannot read).
* Committing is explicit: ``await log.commit(entry.id)`` (or ``commit()``: the last entry read) is a
  write that moves the pointer (never backwards) and lets the master erase what every reader has
  passed. Concurrent commits of one reader share writes (only the largest id travels). Nothing is
  committed implicitly, not even when the block is left: a reader that stops (or dies) between
  reading and committing reads those entries again next time (at-least-once).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

import anyio
import anyio.abc

from ..store.errors import StoreError
from ..store.packing import detached
from .batching import GroupCommit
from .commands import CommitReader
from .errors import QueueError, UnknownReader
from .model import NEXT_ID, MessageRecord, MessageState, is_message_key

if TYPE_CHECKING:
    from ..store.commands import WriteCommand
    from ..store.elected import ElectedStore


class LogSource(Protocol):
    """What a :class:`LogReader` reads through: a work-queue handle (declared here, so that this
    module does not import the handle built on it)."""

    name: str
    store: ElectedStore | None
    closed: bool
    poll_interval: float
    _arrivals: int

    @property
    def stopped(self) -> bool: ...

    async def write(self, command: WriteCommand) -> Any: ...

    def _listen(self, delta: int) -> None: ...

    async def _await_arrival(self, seen: int, timeout: float) -> None: ...

__all__ = ["LogEntry", "LogReader", "POLL"]

POLL = 1.0  # s: default poll_interval: a waiting consumer or reader looks again at least this often (a safety net; arrivals wake it)
_STEP = 1024  # ids looked up one by one before a sparse stretch is skipped with one scan of the keys


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One message as a log reader read it: ``id``, ``data``, and its ``state`` in the local replica
    at the time it was read (``READY``, ``ACQUIRED``, ``DONE``: accepted, or ``DEAD``, with
    ``reason``); ``delivery_count``: how often consumers acquired it by then."""

    id: int
    data: Any
    state: MessageState
    delivery_count: int
    reason: str | None = None


def raise_for(answer: Any) -> int:
    """The pointer a log-reader command answered, or raise what it answered instead."""
    if isinstance(answer, int) and not isinstance(answer, bool):
        return answer
    if isinstance(answer, list) and len(answer) == 2 and answer[0] == "unknown-reader":
        raise UnknownReader(str(answer[1]))
    raise QueueError(str(answer[1]) if isinstance(answer, list) and len(answer) == 2 else f"bad answer {answer!r:.80}")


class LogReader:
    """``async with queue.read_log(name) as log: async for entry in log: ...; await log.commit()``.

    Entering asks the master where reader ``name`` is (raises :class:`~.errors.UnknownReader` if it
    is not registered, QueueError without a replica, StoreError such as NoMaster if no master
    answers). Iterating yields :class:`LogEntry` s in id order from the id after the pointer and
    waits for new messages; it ends only when the block is left. ``position`` is the committed
    pointer as last answered by the master. Several readers of one name at once all read the same
    entries (their commits only ever move the pointer forward): a name is meant for one reader at a
    time.
    """

    def __init__(self, queue: LogSource, name: str) -> None:
        if queue.store is None:
            raise QueueError(f"queue {queue.name!r}: reading a log needs a replica; this handle keeps none "
                             f"(replica=False): read on one that does")
        self.queue = queue
        self.name = name
        self.position: int | None = None
        self._cursor = 0  # the next id to look at
        self._last: int | None = None  # the id of the last entry handed out
        self._committer = GroupCommit(self._commit_batch, in_flight=1)
        self._tg: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Self:
        self.position = raise_for(await self.queue.write(CommitReader(self.name, 0)))
        self._cursor = self.position + 1
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._committer.run)
        self.queue._listen(1)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        assert self._tg is not None
        self.queue._listen(-1)
        self._tg.cancel_scope.cancel()
        return await self._tg.__aexit__(exc_type, exc, tb)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> LogEntry:
        if self._tg is None:
            raise QueueError("use the log reader in 'async with queue.read_log(name) as log'")
        while True:
            seen = self.queue._arrivals
            entry = self._next_local()
            if entry is not None:
                self._last = entry.id
                return entry
            if self.queue.stopped:
                raise StopAsyncIteration
            await self.queue._await_arrival(seen, self.queue.poll_interval)

    async def commit(self, upto: int | None = None) -> int:
        """Persist that every id up to ``upto`` (default: the last entry read) is read: a reader of
        this name that starts later, anywhere, continues after it. Returns the pointer once durable
        (it never moves back: a smaller ``upto`` changes nothing). Raises UnknownReader if the reader
        was removed, QueueError for an id past the last published, ValueError if nothing was read."""
        if upto is None:
            upto = self._last
            if upto is None:
                raise ValueError(f"log reader {self.name!r}: nothing read yet, nothing to commit")
        if isinstance(upto, bool) or not isinstance(upto, int) or upto < 0:
            raise ValueError(f"a log position is an id >= 0, not {upto!r}")
        pointer = raise_for(await self._committer.submit(upto))
        self.position = max(self.position or 0, pointer)
        return pointer

    async def _commit_batch(self, items: list[int]) -> list[Any]:
        answer = await self.queue.write(CommitReader(self.name, max(items)))
        return [answer] * len(items)

    def _next_local(self) -> LogEntry | None:
        """The first message at or after the cursor in the local replica (the cursor moves past it)."""
        assert self.queue.store is not None
        state = self.queue.store.replica.state
        try:
            end = state.get(NEXT_ID)
        except StoreError:
            return None
        if not is_message_key(end):
            return None
        steps = 0
        while self._cursor < end:
            if steps == _STEP:  # a long run of erased ids (accepted before the reader existed): skip it
                keys = state.keys()  # a list (VersionedState is not a mapping)
                later = [k for k in keys if is_message_key(k) and self._cursor <= k < end]
                self._cursor = min(later, default=end)
                steps = 0
                if self._cursor >= end:
                    break
            steps += 1
            msg_id = self._cursor
            self._cursor += 1
            wire = state.value(msg_id)
            rec = None if wire is None else MessageRecord.from_wire(wire)
            if rec is not None:
                return LogEntry(msg_id, detached(rec.data), rec.state, rec.count, rec.reason)  # (a copy: the state's)
        return None

    def __repr__(self) -> str:
        return f"LogReader({self.name!r}, position={self.position}, next={self._cursor})"
