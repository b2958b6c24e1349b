"""Consumers of a work queue: the delivery side of the anyio layer (``docs/queues.md``).

Theory of operation:

* A :class:`Consumer` (``async with queue.consume(prefetch=10) as deliveries``) has its own owner id
  ``<endpoint uuid hex>.<random>`` and task group: it acquires the free part of its ``prefetch``
  window in one write once a quarter of it is free (two acquires in flight at most), renews its
  lease every ``lease/3`` s while it holds messages, and gathers settlements (accept, release,
  reject, with or without waiting) into group-committed writes, one in flight at a time (what is
  settled during a round trip goes in the next write). While settlements are on their way, the
  acquire rides on them: the settle write that finds a quarter of the window free acquires the difference in
  the same write and record (:class:`~.commands.SettleAndAcquire`; a master of an earlier version
  refuses it, and the consumer then writes them apart). Leaving the block gives back everything it
  still holds.
* An acquire whose outcome is unknown (its answer forgotten, ``NoMaster`` after ``write_timeout``)
  may have taken messages the consumer never learns of. Acquiring on as the same owner would keep
  them for ever: each acquire that gets a message restarts the owner's lease. So the owner is
  retired: acquires go on under a new owner id, the old one is renewed only while this consumer
  holds messages it got as that owner (each :class:`Delivery` settles as the owner it was acquired
  by), and then its lease runs out and the master hands the unknown messages out again.
* A :class:`Delivery` is one acquired message; settling it is a write to the store's master (the
  effects are computed by :mod:`.commands`), answered once durable.
* A consumer that found the queue empty waits for an arrival, which its :class:`ConsumerSource`
  (the work-queue handle of :mod:`.attached`) reports; ``poll_interval`` bounds the wait when such
  a wake-up is lost.
"""

from __future__ import annotations

import functools
import itertools
import logging
import secrets
from collections import deque
from operator import itemgetter
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

import anyio
import anyio.abc
import anyio.lowlevel

from ..errors import peer_repr
from ..store.errors import StoreError, StoreProtocolError
from ..wire.codec import size_bound
from .batching import GroupCommit
from .commands import (
    MAX_REASON,
    RECORD_BYTES,
    Acquire,
    ReleaseOwner,
    Renew,
    Settle,
    SettleAndAcquire,
    acquired_cost,
    settled_cost,
)
from .errors import AlreadySettled, NotHeld, QueueError

if TYPE_CHECKING:
    from ..endpoint.endpoint import Endpoint
    from ..store.commands import WriteCommand

log = logging.getLogger("broker_mqtt.queue")

_YIELD_EVERY = 64  # deliveries a consumer hands out between two full checkpoints
LINGER = 0.02  # s a consumer that found the queue empty waits after an arrival (fewer, fuller acquires)
RETIRED_KEPT = 16  # retired owners a consumer releases when it leaves (older ones: their lease runs out)
#: messages an acquire's record carries, below which (large messages) acquires ask for a record's
#: worth and go beside settle writes, two in flight, instead of riding on them (:meth:`Consumer._worth`)
FEW_A_RECORD = 32

__all__ = ["Consumer", "ConsumerSource", "Delivery", "LINGER"]


def _in_records(items: list[tuple[list[Any], int]]) -> list[list[list[Any]]]:
    """Settlements ``(item, cost)`` as the settles they go in: each at most RECORD_BYTES (one item always)."""
    parts: list[list[list[Any]]] = []
    room = 0
    for item, cost in items:
        room -= cost
        if room < 0 or not parts:
            parts.append([])
            room = RECORD_BYTES - cost
        parts[-1].append(item)
    return parts


class ConsumerSource(Protocol):
    """What a :class:`Consumer` consumes through: a work-queue handle (declared here, so that this
    module does not import the handle built on it; compare :class:`~.log.LogSource`)."""

    endpoint: Endpoint
    name: str
    poll_interval: float
    _arrivals: int

    @property
    def stopped(self) -> bool: ...

    @property
    def master(self) -> str | None: ...

    async def wait_stopped(self) -> None: ...

    async def write(self, command: WriteCommand) -> Any: ...

    def _listen(self, delta: int) -> None: ...

    async def _await_arrival(self, seen: int, timeout: float) -> None: ...


class Delivery:
    """One acquired message: ``id`` (assigned by the master, the same on every replica), ``data``,
    ``delivery_count`` (1 on the first delivery). Settle it once with :meth:`accept`, :meth:`release`
    or :meth:`reject`; each returns once the master's decision is durable and raises
    :class:`~.errors.NotHeld` if the message had been taken back (then another consumer gets it)."""

    __slots__ = ("_consumer", "_owner", "_size", "_made", "id", "data", "delivery_count", "settled", "seen")

    def __init__(self, consumer: Consumer, msg_id: int, data: Any, delivery_count: int, owner: str,
                 size: int) -> None:
        self._consumer = consumer
        self._owner = owner  # the owner id it was acquired as (settled as it)
        self._size = size  # size_bound(data): what its acquire and its settlement cost (record_sizes)
        self._made = 0  # the number of its settlement made without waiting (Consumer.drain)
        self.id = msg_id
        self.data = data
        self.delivery_count = delivery_count
        self.settled = False
        self.seen = False  # handed to the application

    async def accept(self) -> None:
        """Done with it: the message is removed from the queue."""
        await self._consumer._settle(self, "accept", None)

    async def release(self) -> None:
        """Give it back: it is delivered again (to any consumer), or dead-lettered once it was
        delivered ``max_deliveries`` times."""
        await self._consumer._settle(self, "release", None)

    async def reject(self, reason: str = "rejected") -> None:
        """Never deliver it again: it moves to the dead-letter queue with ``reason``."""
        await self._consumer._settle(self, "reject", str(reason)[:MAX_REASON])

    def accept_nowait(self) -> None:
        """:meth:`accept` without waiting: the settlement joins the consumer's next settle write and
        this returns at once. Its outcome is reported by :meth:`Consumer.drain`. The fast way to
        consume: no task and no round trip per message."""
        self._consumer._settle_nowait(self, "accept", None)

    def release_nowait(self) -> None:
        """:meth:`release` without waiting (see :meth:`accept_nowait`)."""
        self._consumer._settle_nowait(self, "release", None)

    def reject_nowait(self, reason: str = "rejected") -> None:
        """:meth:`reject` without waiting (see :meth:`accept_nowait`)."""
        self._consumer._settle_nowait(self, "reject", str(reason)[:MAX_REASON])

    def __repr__(self) -> str:
        return f"Delivery(id={self.id}, delivery_count={self.delivery_count}, data={self.data!r:.60})"


class Consumer:
    """``async with queue.consume(prefetch=10) as deliveries: async for d in deliveries: ...``.

    Iterating blocks until a message is delivered. At most ``prefetch`` messages are held (delivered
    and not settled) at a time; once a quarter of them are settled, one write acquires the difference (the
    write that carries those settlements, if they are still on their way).
    ``await d.accept()`` (and release, reject) waits for the master (one round trip, shared with
    concurrent settlements): settle in concurrent tasks for throughput, or use ``d.accept_nowait()``
    (no wait, no task) and collect the outcomes with :meth:`drain`. Leaving the block (normally, by
    an exception or by cancellation) waits for the settlements made so far, then releases what is
    still held, within a few seconds; messages held when the process dies go back when the master
    sees its endpoint gone, or at the latest when the lease runs out.
    """

    def __init__(self, queue: ConsumerSource, *, prefetch: int, lease: float) -> None:
        if prefetch < 1:
            raise ValueError(f"prefetch must be >= 1, not {prefetch}")
        if not lease > 0:
            raise ValueError(f"lease must be > 0 s, not {lease}")
        self.queue = queue
        self.prefetch = prefetch
        self._refill = max(1, prefetch // 4)  # free places that make an acquire worth placing
        self._per_record: int | None = None  # messages the last acquire cut by its record's size carried
        self.lease = lease
        self.owner = self._new_owner()  # acquires go as this owner (a new one after an unknown outcome)
        self._retired: deque[str] = deque(maxlen=RETIRED_KEPT)  # released on leaving (the rest: by their lease)
        self._ready: deque[Delivery] = deque()  # acquired, not yet handed to the application
        self._delivered = anyio.Event()
        self._closed = False
        self._leaving = False  # closing: no more acquires
        self._since_yield = 0
        self._held: dict[int, Delivery] = {}
        self._room = anyio.Event()
        self._settler = GroupCommit(self._settle_batch, in_flight=1, max_cost=RECORD_BYTES)
        self._tg: anyio.abc.TaskGroup | None = None
        self._acquiring: anyio.CancelScope | None = None
        self._asked = 0  # messages asked for by acquires in flight
        self._combine = True  # settle writes carry the acquire (False: a master refused SettleAndAcquire)
        self._refused_by: str | None = None  # that master: another one is asked again
        self._acquirers: anyio.abc.TaskGroup | None = None  # the acquire loop's (its waits for an arrival)
        self._in_flight = 0
        self._idle_wait = False  # an acquire found nothing: the next waits for an arrival
        self._failures: list[tuple[Delivery, StoreError]] = []  # of settlements made without waiting
        self._nowait_made = 0
        self._nowait_decided = 0
        self._decided = anyio.Event()

    @property
    def held(self) -> int:
        return len(self._held)

    def _new_owner(self) -> str:
        return f"{self.queue.endpoint.id.hex}.{secrets.token_hex(4)}"

    def _retire_owner(self, owner: str, why: str) -> None:
        """An acquire as ``owner`` has an unknown outcome (``why``): acquire as a new owner from now on."""
        if owner != self.owner:
            return  # (retired already: another acquire in flight as it failed too)
        self.owner = self._new_owner()
        self._retired.append(owner)
        log.warning("queue %s: an acquire as %s %s; acquiring as %s from now on (what it took, if anything, "
                    "is delivered again once that lease runs out)", self.queue.name, owner, why, self.owner)

    async def __aenter__(self) -> Self:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self.queue._listen(1)
        self._tg.start_soon(self._acquire_loop)
        self._tg.start_soon(self._renew_loop)
        self._tg.start_soon(self._settler.run)
        self._tg.start_soon(self._end_when_stopped)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        assert self._tg is not None
        self._leaving = True  # no acquire is placed from now on (a cancelled scope lets a task run on a step)
        if self._acquiring is not None:
            self._acquiring.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            await self._settler.wait_idle()  # (first: a settle write in flight may acquire more)
            unseen: dict[str, list[tuple[list[Any], int]]] = {}
            for d in self._held.values():
                if not d.seen:
                    unseen.setdefault(d._owner, []).append(([d.id, "return", None, d.delivery_count],
                                                            settled_cost(d.data, None, size=d._size)))
            for d, error in self._failures:
                log.warning("queue %s: settling message %d failed: %s", self.queue.name, d.id, error)
            try:
                for owner, items in unseen.items():
                    for part in _in_records(items):  # acquired, never handed out: back, delivery count as it was
                        await self.queue.write(Settle(owner, part))
            except StoreError:
                pass
            for owner in (self.owner, *self._retired):  # (the current owner first: it holds the most)
                try:  # placed after every acquire (writes apply in order): releases all we got
                    while await self.queue.write(ReleaseOwner(owner, "consumer closed", False)):
                        pass  # (a record's worth each)
                except StoreError as err:
                    log.warning("queue %s: could not release %s's messages (%s); their lease will",
                                self.queue.name, owner, err)
                    break
        self.queue._listen(-1)
        self._tg.cancel_scope.cancel()
        self._closed = True
        self._delivered.set()
        return await self._tg.__aexit__(exc_type, exc, tb)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Delivery:
        # Deliveries wait in a deque: taking one already there costs no trip through the event loop
        # (a cancellation point each time, a full checkpoint every _YIELD_EVERY so that a busy
        # consumer does not starve the other tasks).
        while True:
            if self._closed:
                raise StopAsyncIteration
            if not self._ready:
                while not self._ready and not self._closed:
                    if self._delivered.is_set():  # (replaced only once set: every task waiting on it woke)
                        self._delivered = anyio.Event()
                    await self._delivered.wait()
                self._since_yield = 0
                continue
            elif self._since_yield >= _YIELD_EVERY:
                self._since_yield = 0
                await anyio.lowlevel.checkpoint()
                continue  # the deque may have changed meanwhile (closed, say)
            else:
                await anyio.lowlevel.checkpoint_if_cancelled()
            self._since_yield += 1
            d = self._ready.popleft()
            if not d.settled:
                d.seen = True
                return d

    # -- tasks ---------------------------------------------------------------------------------------

    async def _end_when_stopped(self) -> None:
        """The queue was closed, or its store stopped (its file failed): iteration ends (what this
        consumer holds cannot be settled any more either)."""
        await self.queue.wait_stopped()
        self._closed = True
        self._delivered.set()

    async def _acquire_loop(self) -> None:
        """Keep up to ``prefetch`` messages held or asked for: an acquire goes out (two at most in
        flight) once a quarter of the window is free, so the window refills while it drains; while
        settlements are on their way, in their write (:meth:`_settle_batch`), not in one of its own
        (but while acquires are cut by their size: :meth:`_worth`)."""
        with anyio.CancelScope() as scope:
            self._acquiring = scope
            async with anyio.create_task_group() as tg:
                self._acquirers = tg
                while True:
                    n = self._acquirable()
                    if not n or (self._combine and self._settler.busy and self._per_record is None):
                        await self._room.wait()
                        self._room = anyio.Event()
                        continue
                    self._asked += n
                    self._in_flight += 1
                    tg.start_soon(self._acquire, n)

    async def _acquire(self, n: int) -> None:
        seen = self.queue._arrivals
        got: list[Any] = []
        owner = self.owner
        try:
            if self._leaving:  # placed after the release of all held, it would hold messages until the lease ends
                return
            answer = await self.queue.write(Acquire(owner, n, self.lease))
            if isinstance(answer, list):
                got = answer
            else:  # its answer was forgotten (a repeat answered None by a master of an earlier build;
                # now AnswerForgotten, below)
                log.warning("queue %s: an acquire was answered %s, not its messages", self.queue.name,
                            peer_repr(answer, 40))
                self._retire_owner(owner, "was answered without its messages")
                await anyio.sleep(0.5)
        except StoreError as exc:  # AnswerForgotten; NoMaster after write_timeout, say: keep trying
            if self.queue.stopped:
                return  # (_end_when_stopped ends the iteration)
            log.warning("queue %s: acquire failed: %s", self.queue.name, exc)
            self._retire_owner(owner, f"failed ({type(exc).__name__}: outcome unknown)")
            await anyio.sleep(0.5)
        finally:
            self._asked -= n
            self._in_flight -= 1
        if self._take(owner, got, n, 0):
            await self._wait_for_arrival(seen)
        self._room.set()

    def _take(self, owner: str, got: list[Any], n: int, before: int) -> bool:
        """Hand out ``got``, what an acquire of ``n`` as ``owner`` answered; whether the queue ran
        dry (fewer than ``n``, and the record, ``before`` bytes of it a settle's at most, was not
        full: an answer cut at RECORD_BYTES // 2 has at least that). An answer its messages' size
        cut sets how many a record carries (:meth:`_worth`)."""
        cost = 0
        for msg_id, data, count in got:
            size = size_bound(data)
            cost += acquired_cost(data, owner, size=size)
            d = Delivery(self, msg_id, data, count, owner, size)
            self._held[msg_id] = d
            self._ready.append(d)
        if got:
            self._delivered.set()
        if len(got) >= n:
            if cost < RECORD_BYTES // 4 and (self._per_record is None or n >= self._per_record):
                self._per_record = None  # a record's worth of small messages (again): ask for the free places
            return False
        if before + cost < RECORD_BYTES // 2:
            return True  # dry
        if cost >= RECORD_BYTES // 4:  # cut by the size of its messages (not only by settlements before them)
            # what a record of its own carries: behind settlements (``before``), the answer had less
            # room, so its count alone says too few (and asks of that many are never cut again to
            # correct it); the master adds messages while under RECORD_BYTES // 2, so at their
            # average cost a record carries ceil(RECORD_BYTES // 2 / average)
            per_record = len(got) if not before else max(len(got), -(-(RECORD_BYTES // 2) * len(got) // cost))
            if per_record < FEW_A_RECORD:  # (small messages: a record's worth keeps the window fed)
                self._per_record = per_record
        return False

    async def _wait_for_arrival(self, seen: int) -> None:
        """The queue ran dry: no acquire until a message arrives (after ``seen`` arrivals), and a few
        gathered."""
        self._idle_wait = True
        try:
            if self.queue._arrivals == seen:
                await self.queue._await_arrival(seen, self.queue.poll_interval)  # a safety net
            await anyio.sleep(LINGER)
        finally:
            self._idle_wait = False
            self._room.set()

    async def _renew_loop(self) -> None:
        while True:
            await anyio.sleep(self.lease / 3)
            # each owner this consumer holds messages as (a retired one's lease then runs out: see the module)
            for owner in {d._owner: None for d in self._held.values()}:
                try:
                    await self.queue.write(Renew(owner, self.lease))
                except StoreError as exc:
                    log.warning("queue %s: lease renewal failed: %s", self.queue.name, exc)

    # -- settling ---------------------------------------------------------------------------------------

    def _settlement(self, d: Delivery, action: str, reason: str | None) -> tuple[tuple[str, list[Any], int], int]:
        """Take ``d`` out of the window for settling it (AlreadySettled if it was); the item the settler
        takes, ``(owner, settlement, cost)``, and its cost."""
        if d.settled:
            raise AlreadySettled(f"message {d.id} was settled already")
        d.settled = True
        self._held.pop(d.id, None)
        self._made_room()
        cost = settled_cost(d.data, reason, size=d._size)
        return (d._owner, [d.id, action, reason, d.delivery_count], cost), cost

    async def _settle(self, d: Delivery, action: str, reason: str | None) -> None:
        item, cost = self._settlement(d, action, reason)
        answer = await self._settler.submit(item, cost)
        if isinstance(answer, StoreError):  # (its owner's settle write failed, another's went through)
            raise answer
        if answer is not None:
            raise NotHeld(answer)

    def _settle_nowait(self, d: Delivery, action: str, reason: str | None) -> None:
        item, cost = self._settlement(d, action, reason)
        self._nowait_made += 1
        d._made = self._nowait_made
        self._settler.submit_nowait(item, functools.partial(self._settled, d), cost)

    def _made_room(self) -> None:
        """A settlement freed a place in the window: wake the acquire loop once it would place an
        acquire (not once a message: a task switch each would cost more than settling it)."""
        if self._free() >= self._worth():
            self._room.set()

    def _asking(self, free: int) -> int:
        """How many an acquire asks for: the free places, or what one record carries while acquires
        are cut by their size (asking for more would hold places a second acquire could ask for)."""
        return free if self._per_record is None else min(free, self._per_record)

    def _worth(self) -> int:
        """Free places that make an acquire worth placing: a quarter of the window, or fewer while acquires
        are cut by their record's size to fewer than FEW_A_RECORD messages (large messages: one
        carries only that many, so waiting for the window's quarter, or for a settle write to carry
        it, would leave the application waiting for messages)."""
        per_record = self._per_record
        return self._refill if per_record is None else max(1, min(self._refill, per_record))

    def _free(self) -> int:
        """Places of the window neither held nor asked for by an acquire in flight."""
        return self.prefetch - len(self._held) - self._asked

    def _settled(self, d: Delivery, outcome: Any) -> None:
        """The answer to a settlement made without waiting: None when done."""
        self._nowait_decided += 1
        self._decided.set()
        if isinstance(outcome, StoreError):
            self._failures.append((d, outcome))
        elif isinstance(outcome, BaseException):
            self._failures.append((d, QueueError(f"settling message {d.id} failed: {outcome!r}")))
        elif outcome is not None:
            self._failures.append((d, NotHeld(outcome)))

    async def drain(self) -> list[tuple[Delivery, StoreError]]:
        """Wait until every settlement made without waiting (``*_nowait``) so far is decided; return
        the failures among them that no earlier drain returned, as ``(delivery, error)`` pairs (and
        forget them): :class:`~.errors.NotHeld` (the message had been taken back: another consumer
        gets it) or :class:`~broker_mqtt.store.errors.StoreError` (the write failed: its outcome is
        unknown, and a message not accepted comes back when the lease runs out). A failure of a
        settlement made after this call is left for a later drain, also one decided meanwhile."""
        target = self._nowait_made
        while self._nowait_decided < target:
            if self._decided.is_set():  # (as in __anext__: concurrent drains share the event)
                self._decided = anyio.Event()
            await self._decided.wait()
        failures = self._failures
        if any(d._made > target for d, _ in failures):
            self._failures = [f for f in failures if f[0]._made > target]
            return [f for f in failures if f[0]._made <= target]
        self._failures = []
        return failures

    async def _settle_batch(self, items: list[tuple[str, list[Any], int]]) -> list[Any]:
        """One settle write per owner of ``items`` (``(owner, settlement, cost)``, in order; one write
        but right after an owner was retired), the current owner's carrying the acquire that refills
        the window if one is due (:meth:`_settle_and_acquire`). A write that fails after another went
        through answers its own settlements with the error (the others keep their answers); the first
        failing raises."""
        answers: list[Any] = []
        try:
            for owner, run in itertools.groupby(items, key=itemgetter(0)):
                group = list(run)
                part = [settlement for _, settlement, _ in group]
                cost = sum(c for _, _, c in group)
                try:
                    n = self._acquire_due() if owner == self.owner and cost < RECORD_BYTES // 2 else 0
                    if n:
                        answers += await self._settle_and_acquire(owner, part, n, cost)
                    else:
                        answers += await self.queue.write(Settle(owner, part))
                except StoreError as exc:
                    if not answers:
                        raise
                    answers += [exc] * len(part)
        finally:
            # the acquire loop waits while settlements are on their way; by its turn the settler
            # may be idle (nothing left to carry an acquire): it then places one itself
            self._room.set()
        return answers

    def _acquire_due(self) -> int:
        """How many to acquire with a settle write now: the free part of the window once a quarter of it
        is free (0: none due, or the acquire loop's to place). After a master refused to (an earlier
        version), its successor is asked again: the replicas are upgraded after the consumers, say."""
        if self._leaving:
            return 0
        if not self._combine:
            master = self.queue.master
            if master is None or master == self._refused_by:
                return 0
            self._combine = True
            log.info("queue %s: a new master (%s): settle writes carry the acquire again", self.queue.name, master)
        return self._acquirable()

    def _acquirable(self) -> int:
        """How many an acquire placed now would ask for: 0 while two are in flight, the queue ran dry,
        or fewer places are free than make one worth placing (:meth:`_worth`)."""
        if self._in_flight >= 2 or self._idle_wait:
            return 0
        free = self._free()
        return self._asking(free) if free >= self._worth() else 0

    async def _settle_and_acquire(self, owner: str, part: list[list[Any]], n: int, cost: int) -> list[Any]:
        """Settle ``part`` (``cost`` bytes by :func:`settled_cost` at most) and acquire ``n`` as
        ``owner`` in one write; the settlements' answers. The acquire's outcome follows the
        settlements': unknown if the write failed (the owner is retired, as after a failed acquire)."""
        seen = self.queue._arrivals
        master = self.queue.master  # (the one it goes to: another may be master by its answer)
        self._asked += n
        self._in_flight += 1
        try:
            try:
                answer = await self.queue.write(SettleAndAcquire(owner, part, n, self.lease))
            except StoreProtocolError as exc:
                # refused, nothing applied (a master answers an error only with a noop record); a
                # master of an earlier version refuses the unknown kind so: its StoreDecodeError
                # reaches the writer as StoreProtocolError (the wire carries the code, and
                # StoreDecodeError has none of its own)
                self._combine = False
                self._refused_by = master
                log.info("queue %s: the master (%s) does not know settle-and-acquire writes (%s); settling and "
                         "acquiring in writes of their own while it is master", self.queue.name, self._refused_by, exc)
                result: list[Any] = await self.queue.write(Settle(owner, part))
                return result
            except StoreError as exc:
                self._retire_owner(owner, f"failed with settlements ({type(exc).__name__}: outcome unknown)")
                raise
            if not (isinstance(answer, list) and len(answer) == 2 and isinstance(answer[0], list)
                    and len(answer[0]) == len(part) and isinstance(answer[1], list)):
                self._retire_owner(owner, "was answered without its messages")
                raise StoreProtocolError(f"a settle-and-acquire was answered {peer_repr(answer, 60)}")
        finally:
            self._asked -= n
            self._in_flight -= 1
            self._room.set()
        if self._take(owner, answer[1], n, cost) and self._acquirers is not None and not self._leaving:
            self._idle_wait = True  # (at once: no acquire before the wait begins)
            self._acquirers.start_soon(self._wait_for_arrival, seen)
        settled: list[Any] = answer[0]
        return settled
