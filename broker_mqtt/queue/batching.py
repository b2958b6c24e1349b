"""Group commit: concurrent submissions travel together in one write (anyio layer).

While up to ``in_flight`` writes are on their way, new items gather in the next batch; when a write
returns, the gathered batch goes out as one write. Under load a batch grows to what arrived during
one round trip; alone, an item goes out at once. Items keep their submission order within and across
batches (writes of one writer are applied in the order they are placed).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

__all__ = ["GroupCommit"]


class _Batch:
    __slots__ = ("items", "cost", "reports", "done", "results", "error")

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.cost = 0
        self.reports: list[tuple[int, Callable[[Any], None]]] = []  # items submitted without waiting
        self.done = anyio.Event()
        self.results: list[Any] = []
        self.error: BaseException | None = None


class GroupCommit:
    """``await submit(item)`` returns ``send(batch)[i]`` for the item's place ``i`` in its batch, or
    raises what ``send`` raised. ``submit_nowait(item, report)`` places an item without waiting:
    ``report`` is called with that answer, or with the exception, once the batch is decided.
    ``run()`` is the sending task (run it in the owner's task group). Cancelling ``submit`` does not
    withdraw the item: its outcome is then unknown. A batch holds at most ``max_batch`` items and,
    with ``max_cost``, items whose ``cost`` (given with each) adds up to at most that (one item always)."""

    def __init__(self, send: Callable[[list[Any]], Awaitable[list[Any]]], *, in_flight: int = 4,
                 max_batch: int = 1000, max_cost: int | None = None) -> None:
        self._send = send
        self._in_flight = anyio.Semaphore(in_flight)
        self._max_batch = max_batch
        self._max_cost = max_cost
        self._open: deque[_Batch] = deque()
        self._wake = anyio.Event()
        self._waking = False  # _wake is set: items were placed since run() last waited for it
        self._busy = 0
        self._idle = anyio.Event()
        self._idle.set()

    def _place(self, item: Any, cost: int) -> tuple[_Batch, int]:
        open_ = self._open
        if not open_:
            if not self._busy and self._idle.is_set():  # (else it is not: see _one)
                self._idle = anyio.Event()
            open_.append(_Batch())
        elif len(open_[-1].items) >= self._max_batch or (
                self._max_cost is not None and open_[-1].cost + cost > self._max_cost):
            open_.append(_Batch())
        batch = open_[-1]
        batch.items.append(item)
        batch.cost += cost
        if not self._waking:  # (an Event's set() is two calls: once, not for every item)
            self._waking = True
            self._wake.set()
        return batch, len(batch.items) - 1

    def submit_nowait(self, item: Any, report: Callable[[Any], None], cost: int = 0) -> None:
        batch, i = self._place(item, cost)
        batch.reports.append((i, report))

    async def submit(self, item: Any, cost: int = 0) -> Any:
        batch, i = self._place(item, cost)
        await batch.done.wait()
        if batch.error is not None:
            raise batch.error
        return batch.results[i]

    @property
    def busy(self) -> bool:
        """Whether items are gathered or a batch is in flight."""
        return bool(self._busy or self._open)

    async def wait_idle(self) -> None:
        """Until nothing is gathered or in flight."""
        await self._idle.wait()

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                await self._in_flight.acquire()
                while not self._open:
                    await self._wake.wait()
                    self._wake = anyio.Event()
                    self._waking = False
                self._busy += 1
                tg.start_soon(self._one, self._open.popleft())

    async def _one(self, batch: _Batch) -> None:
        try:
            results = await self._send(batch.items)
            if len(results) != len(batch.items):
                raise RuntimeError(f"a batch of {len(batch.items)} got {len(results)} answers")
            batch.results = results
        except Exception as exc:  # handed to every submitter of the batch
            batch.error = exc
        except BaseException:  # cancelled on its way: no answers, and the outcome is unknown
            batch.error = RuntimeError(f"a write of {len(batch.items)} items was cancelled on its way: "
                                       f"outcome unknown")
            raise
        finally:
            for i, report in batch.reports:
                report(batch.error if batch.error is not None else batch.results[i])
            batch.done.set()
            self._busy -= 1
            self._in_flight.release()
            if not self._busy and not self._open:
                self._idle.set()
