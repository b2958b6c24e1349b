"""The publishes of one queue handle (anyio layer; ``docs/queues.md``, "Sizes").

Concurrent publishes share writes (:class:`~.batching.GroupCommit`). Every item is checked when
published: outside the data model (BackendError), or too large to be delivered (MessageTooLarge:
the record of the acquire that delivers a message carries it twice, beside up to half of
RECORD_BYTES of others: :func:`~.commands.largest_acquire`); such an item fails alone. The rest go in
one ``Publish`` write, or in halves (and halves of them) while its record would be larger than the
broker carries, so that no record stops the master's sending.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import PayloadTooLarge
from ..store.commands import WriteCommand
from ..store.errors import BackendError
from ..store.packing import checked_copy, checked_size
from ..store.writer_core import RECORD_SLACK
from .batching import GroupCommit
from .commands import Publish
from .errors import MessageTooLarge
from .model import new_marker
from .record_sizes import PUBLISHED_OVERHEAD, largest_acquire

__all__ = ["Publisher"]


class Publisher:
    """``publish``/``publish_many`` through ``write`` (the queue's write) with ``check_size`` (the
    endpoint's ``check_payload_size``); ``run()`` is the sending task of the group commit."""

    def __init__(self, write: Callable[[WriteCommand], Awaitable[Any]], check_size: Callable[[int], None],
                 max_deliveries: int | None) -> None:
        self._write = write
        self._check = check_size
        self.max_deliveries = max_deliveries
        self._group = GroupCommit(self._publish_batch, in_flight=4)

    async def run(self) -> None:
        await self._group.run()

    async def publish(self, data: Any) -> int:
        """See :meth:`.attached.WorkQueue.publish`."""
        first: int | Exception = await self._group.submit(data)
        if isinstance(first, Exception):
            raise first
        return first

    async def publish_many(self, items: list[Any]) -> list[int]:
        """See :meth:`.attached.WorkQueue.publish_many`."""
        if not items:
            return []
        bad, size = self._check_items(items)
        if bad:
            raise next(iter(bad.values()))
        assert size is not None
        self._check(size + PUBLISHED_OVERHEAD * len(items) + RECORD_SLACK)
        first: int = await self._write(Publish(list(items), self.max_deliveries, new_marker()))
        return list(range(first, first + len(items)))

    def _check_items(self, items: list[Any]) -> tuple[dict[int, Exception], int | None]:
        """The items that cannot be published, each with why: outside the data model (BackendError),
        or too large to be delivered (MessageTooLarge: see :func:`.commands.largest_acquire`); and
        the items' size bound if all can be. All are bounded together first; one by one only if that
        fails."""
        check = self._check
        try:
            size = checked_size(items)
            check(largest_acquire(size) + RECORD_SLACK)
            return {}, size
        except (PayloadTooLarge, BackendError):
            pass
        bad: dict[int, Exception] = {}
        for i, item in enumerate(items):
            try:
                size = checked_size(item)
            except BackendError as exc:
                bad[i] = exc
                continue
            try:
                check(largest_acquire(size) + RECORD_SLACK)
            except PayloadTooLarge as exc:
                bad[i] = MessageTooLarge(size, exc.limit)
                bad[i].__cause__ = exc
        return bad, None

    async def _publish_batch(self, items: list[Any]) -> list[int | Exception]:
        """Publish a group-committed batch: an item that cannot be published fails alone (its answer
        is the exception), the rest go in one write, or in parts while the record that carries them
        would be too large for the broker."""
        bad, size = self._check_items(items)
        if not bad:
            return await self._publish_in_parts(items, size)
        return await self._publish_without(items, bad)

    async def _publish_without(self, items: list[Any], bad: dict[int, Exception]) -> list[int | Exception]:
        """Publish the items whose index is not in ``bad``; the answers of all, in order: ``bad[i]``
        for the others."""
        good = [item for i, item in enumerate(items) if i not in bad]
        ids = iter(await self._publish_in_parts(good) if good else ())
        return [bad[i] if i in bad else next(ids) for i in range(len(items))]

    async def _publish_in_parts(self, items: list[Any], size: int | None = None) -> list[int | Exception]:
        """Publish ``items`` (their size bound: ``size``) in one write, else in halves (and halves of
        them) while the broker would refuse the record; in order. A part that fails after one was
        published answers its own items with the exception."""
        try:
            if size is None:
                size = checked_size(items)
            self._check(size + PUBLISHED_OVERHEAD * len(items) + RECORD_SLACK)
            first: int = await self._write(Publish(items, self.max_deliveries, new_marker()))
        except PayloadTooLarge:  # together too large for one record
            if len(items) == 1:
                raise
            half = len(items) // 2
            head = await self._publish_in_parts(items[:half])
            try:
                tail = await self._publish_in_parts(items[half:])
            except Exception as exc:  # the head is published: only the tail fails
                tail = [exc] * (len(items) - half)
            return [*head, *tail]
        except BackendError:  # refused when placed (nothing queued): which item?
            if len(items) == 1:
                raise
            bad: dict[int, Exception] = {}
            for i, item in enumerate(items):
                try:  # (as the write's placing checks it: in a Publish's wire, two lists deep)
                    checked_copy(Publish([item], self.max_deliveries).to_wire())
                except BackendError as exc:
                    bad[i] = exc
            if not bad:
                raise  # not an item's fault (a stopped store, say)
            return await self._publish_without(items, bad)
        return list(range(first, first + len(items)))
