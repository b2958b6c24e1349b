"""Work queues on an :class:`~broker_mqtt.Endpoint`: the anyio layer (``docs/queues.md``).

Theory of operation:

* :func:`attach_queue` joins the elected store ``queue-<name>`` (replication, election, fencing,
  handover, durability and SQLite persistence are the store's) and starts the queue's service:
  a publish group-commit task, a watcher that wakes consumers when messages arrive in the local
  replica, and the master's duties, done by whichever node is the store's master at the time:
  on ``PeerLost``/``PeerRemoved`` of an endpoint, release what its consumers held; every
  ``min(1 s, lease/4)``, release what consumers whose lease ran out held; tell replica-less handles
  that messages are ready (a hint on ``/$queue/<name>/ready``, at most one every ``LINGER``).
* ``replica=False``: the handle keeps no copy; it writes through a
  :class:`~broker_mqtt.store.writer.StoreWriter` and waits for the master's hints.
* Consumers (``async with queue.consume(prefetch=10) as deliveries``) are :mod:`.consumer`'s; the
  handle wakes them (and log readers) when messages arrive.
* Every operation is a write to the store's master, answered once durable per the store's
  ``durability``; the effects are computed by :mod:`.commands`.
* Log readers (:meth:`WorkQueue.register_reader`, :meth:`WorkQueue.read_log`): named read pointers
  in the replicated state that keep accepted messages until read; the reading is :mod:`.log`'s.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import anyio
import anyio.abc

from ..endpoint.attaching import attaching
from ..endpoint.events import PeerLost, PeerRemoved
from ..errors import BrokerMQTTError
from ..store.clock import clock
from ..store.commands import WriteCommand
from ..store.elected import ElectedStore
from ..store.elected_attach import attach_store
from ..store.errors import StoreError
from ..store.events import EventsDropped, Inserted, MasterChanged, Updated
from ..store.packing import detached
from ..store.writer import StoreWriter
from ..wire.message import Kind
from .commands import (
    START_NEXT,
    START_OLDEST,
    Forget,
    RegisterReader,
    ReleaseOwner,
    RemoveReader,
    Sweep,
    check_reader_name,
)
from .consumer import LINGER, Consumer, Delivery
from .errors import QueueError
from .log import POLL, LogReader
from .model import READER_PREFIX, MessageRecord, MessageState, index_for, is_message_key, is_pointer
from .publishing import Publisher
from .record_sizes import MAX_ERASES
from .split_merge import QueueResolver

if TYPE_CHECKING:
    from ..endpoint.endpoint import Endpoint

log = logging.getLogger("broker_mqtt.queue")
CHORE_RECORDS = 8  # records of each kind the master's chores write a round at most (forget, sweep)
RELEASE_RECORDS = 64  # records a release of one owner's messages writes at most (4 MiB of messages)

TOMBSTONE_TTL = 60.0  # s the master keeps an erased key's tombstone (merges after a split need it)

# Consumer and Delivery (from .consumer) stay importable from here, as before the split
__all__ = ["WorkQueue", "Consumer", "Delivery", "DeadLetter", "QueueStatistics", "attach_queue"]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message in the dead-letter queue: rejected, or released after ``max_deliveries`` deliveries."""

    id: int
    data: Any
    delivery_count: int
    reason: str | None


@dataclass(frozen=True, slots=True)
class QueueStatistics:
    """Counts in the local replica (it may lag the master a little)."""

    ready: int
    acquired: int
    dead: int
    retained: int = 0  # accepted, kept until every log reader has read past them
    redeliveries: int = 0  # deliveries beyond the first of the messages not yet accepted (ready, acquired, dead)


class WorkQueue:
    """A handle on work queue ``name``; see the module docstring and ``docs/queues.md``.

    With a replica (``store`` set) it reads locally (:meth:`dead_letters`, :meth:`statistics`) and may
    become the queue's master. Without one (``attach_queue(..., replica=False)``) it only writes, through
    a :class:`~broker_mqtt.store.writer.StoreWriter`: far less work per message for a busy consumer
    or publisher, which then learns of new messages from the master's hints.
    """

    def __init__(self, ep: Endpoint, name: str, store: ElectedStore | None, *, max_deliveries: int | None,
                 lease: float, write_timeout: float = 30.0, tombstone_ttl: float | None = TOMBSTONE_TTL,
                 poll_interval: float = POLL) -> None:
        self.endpoint = ep
        self.name = name
        self.store = store
        self.max_deliveries = max_deliveries
        self.lease = lease
        self.tombstone_ttl = tombstone_ttl
        self.poll_interval = poll_interval
        self.store_name = f"queue-{name}"
        self.hint_topic = f"/$queue/{name}/ready"
        self._write_timeout = write_timeout
        self._writer: StoreWriter | None = None
        self._publisher = Publisher(self.write, ep.check_payload_size, max_deliveries)
        self._arrivals = 0  # messages that became ready (or hints of them) seen so far
        self._listeners = 0  # consumers and log readers of this handle: they need to hear of arrivals
        self._arrival_events: Any = None
        self._arrival = anyio.Event()
        self._arrival_waiters = 0
        self._hint = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._done = anyio.Event()
        self._stopping = anyio.Event()  # set once stopped (see stopped): consumers end
        self.closed = False

    # -- state ----------------------------------------------------------------------------------------

    @property
    def master(self) -> str | None:
        if self.store is not None:
            return self.store.master
        return None if self._writer is None else self._writer.core.master

    @property
    def is_master(self) -> bool:
        return self.store is not None and self.store.is_master

    async def await_master(self, timeout: float | None = None) -> bool:
        """Wait until the queue has an active master (and a replica here follows it); False on timeout."""
        if self.store is not None:
            return await self.store.await_master(timeout)
        assert self._writer is not None
        return await self._writer.await_master(timeout)

    def statistics(self) -> QueueStatistics:
        """Message counts in the local replica. Raises QueueError without a replica."""
        counts = dict.fromkeys(MessageState, 0)
        redeliveries = 0
        for _, rec in self._records():
            counts[rec.state] += 1
            if rec.state is not MessageState.DONE and rec.count > 1:
                redeliveries += rec.count - 1
        return QueueStatistics(counts[MessageState.READY], counts[MessageState.ACQUIRED], counts[MessageState.DEAD],
                               counts[MessageState.DONE], redeliveries)

    def dead_letters(self) -> list[DeadLetter]:
        """The dead-letter queue, in id order, as the local replica holds it (the data copied: changing
        it changes no replica). Raises QueueError without a replica."""
        return [DeadLetter(i, detached(r.data), r.count, r.reason) for i, r in self._records()
                if r.state is MessageState.DEAD]

    def readers(self) -> dict[str, int]:
        """The registered log readers and their pointers (the last id each committed), as the local
        replica holds them. Raises QueueError without a replica."""
        self._need_replica()
        assert self.store is not None
        return {key[len(READER_PREFIX):]: value for key, value in sorted(self.store.replica.state.items(), key=lambda kv: str(kv[0]))
                if isinstance(key, str) and key.startswith(READER_PREFIX) and is_pointer(value)}

    def _need_replica(self) -> None:
        if self.store is None:
            raise QueueError(f"queue {self.name!r}: this handle keeps no replica (replica=False); read on one "
                             f"that does")

    def _records(self) -> list[tuple[int, MessageRecord]]:
        self._need_replica()
        assert self.store is not None
        out = []
        for key, value in self.store.replica.state.items():  # (not copied: what leaves is, dead_letters' data)
            if is_message_key(key):
                rec = MessageRecord.from_wire(value)
                if rec is not None:
                    out.append((key, rec))
        return sorted(out, key=lambda item: item[0])

    @property
    def stopped(self) -> bool:
        """Closed, or its store's replica stopped (its file failed: ``store.failure``): consumers end
        (the deliveries they hold cannot be settled any more), log readers end after what they have
        read, writes raise."""
        return self.closed or (self.store is not None and self.store.closed)

    async def wait_stopped(self) -> None:
        """Return once :attr:`stopped`."""
        await self._stopping.wait()

    def _stopped(self) -> None:
        """Closed, or the store's stream ended: consumers end, and waiting log readers look again (and end)."""
        self._stopping.set()
        self._arrived()

    # -- operations ---------------------------------------------------------------------------------------

    async def write(self, command: WriteCommand) -> Any:
        """Place one write on the queue's store (the commands of :mod:`.commands`); its answer."""
        if self.store is not None:
            return await self.store.write(command)
        if self._writer is None or self.closed:
            raise QueueError(f"queue {self.name!r} is closed")
        return await self._writer.write(command)

    async def publish(self, data: Any) -> int:
        """Append ``data``; return its id once durable. Ids grow in publishing order (calls awaited
        one after another get increasing ids). Concurrent calls share writes (group commit).
        Cancelled, the outcome is unknown. Raises StoreError (NoMaster: no master in time;
        BackendError for ``data`` outside the data model) and :class:`~.errors.MessageTooLarge` for
        ``data`` too large to be delivered (over about half of the broker's maximum packet less
        33 KiB; ``docs/queues.md``, "Sizes"); either for it alone, not the publishes that share its write."""
        return await self._publisher.publish(data)

    async def publish_many(self, items: list[Any]) -> list[int]:
        """Append ``items`` in order in one write; return their (consecutive) ids once durable.
        Raises, publishing none, BackendError or MessageTooLarge for the first item that
        :meth:`publish` would refuse, and PayloadTooLarge if together they would make a record the
        broker refuses (publish them in parts)."""
        return await self._publisher.publish_many(items)

    def consume(self, *, prefetch: int = 10, lease: float | None = None) -> Consumer:
        """A consumer holding at most ``prefetch`` messages, with a lease of ``lease`` s (default: the
        queue's); see :class:`Consumer`."""
        return Consumer(self, prefetch=prefetch, lease=self.lease if lease is None else lease)

    # -- log readers ---------------------------------------------------------------------------------------

    async def register_reader(self, name: str, *, start: str = START_OLDEST) -> int:
        """Register log reader ``name`` (idempotent: an existing reader keeps its pointer) and return
        its pointer (the last id it has read; it reads on from the next). A new reader starts with the
        oldest message the queue still holds (``start="oldest"``: ready, acquired, dead, or accepted
        and kept for other readers; accepted messages already erased are gone) or with the next
        message published (``start="next"``). From then on, messages it has not read past are kept
        when accepted: a reader nobody reads any more keeps them until :meth:`remove_reader`.
        Raises ValueError for a bad name or ``start``."""
        _reader_name(name)
        if start not in (START_OLDEST, START_NEXT):
            raise ValueError(f"start is {START_OLDEST!r} or {START_NEXT!r}, not {start!r}")
        pointer, _created = await self.write(RegisterReader(name, start))
        return int(pointer)

    async def remove_reader(self, name: str) -> bool:
        """Remove log reader ``name``: the accepted messages only it still had to read are erased.
        Returns whether it existed. Raises ValueError for a bad name."""
        return bool(await self.write(RemoveReader(_reader_name(name))))

    def read_log(self, name: str) -> LogReader:
        """Read as log reader ``name`` (registered with :meth:`register_reader`):
        ``async with queue.read_log(name) as log: async for entry in log: ...; await log.commit()``;
        see :class:`~.log.LogReader`. Raises ValueError for a bad name, QueueError without a replica."""
        return LogReader(self, _reader_name(name))

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop the queue's service and close its store (handing mastership over). Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._stopped()
        if self._scope is not None:
            self._scope.cancel()
        await self._done.wait()
        if self.store is not None:
            await self.store.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the service --------------------------------------------------------------------------------------

    async def _service(self, *, task_status: anyio.abc.TaskStatus[Any]) -> None:
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with contextlib.AsyncExitStack() as stack:
                    if self.store is None:
                        self._writer = await stack.enter_async_context(StoreWriter(
                            self.endpoint, self.store_name, f"{self.endpoint.id.hex}.{secrets.token_hex(4)}",
                            write_timeout=self._write_timeout))
                        hints = await stack.enter_async_context(  # local: the master may be on this endpoint
                            self.endpoint.subscribe(self.hint_topic, kind=Kind.COMMAND, local=True))
                    tg = await stack.enter_async_context(anyio.create_task_group())  # left first: the rest lives
                    tg.start_soon(self._publisher.run)
                    if self.store is None:
                        tg.start_soon(self._hint_receiver, hints)
                    else:
                        tg.start_soon(self._arrival_loop)
                        tg.start_soon(self._hint_sender)
                        tg.start_soon(self._peer_loop)
                        tg.start_soon(self._lease_loop)
                    task_status.started(self)
        finally:
            self._done.set()

    def _listen(self, delta: int) -> None:
        """A consumer or log reader of this handle starts (1) or stops (-1) waiting for arrivals."""
        self._listeners += delta
        self._want_data()

    def _want_data(self) -> None:
        """The arrival loop needs the store's data events only on a replica that is not the master and
        has consumers or log readers: the master learns of arrivals from its index (no event per key),
        and a busy queue's standby replica builds none."""
        if self._arrival_events is not None and self.store is not None:
            self._arrival_events.data = not self.store.is_master and self._listeners > 0

    def _arrived(self) -> None:
        self._arrivals += 1
        if self._arrival_waiters:
            self._arrival.set()
            self._arrival = anyio.Event()

    async def _arrival_loop(self) -> None:
        """Wake waiting consumers when a message becomes ready here (or a new master takes over)."""
        assert self.store is not None
        async with self.store.events() as events, anyio.create_task_group() as tg:
            self._arrival_events = events
            self._want_data()
            tg.start_soon(self._master_arrivals)
            async for e in events:
                match e:
                    case Inserted(key=key, value=value) | Updated(key=key, new_value=value):
                        ready = is_message_key(key) and isinstance(value, dict) and value.get("state") == "ready"
                    case MasterChanged() | EventsDropped():
                        self._want_data()
                        ready = True
                    case _:
                        ready = False
                if ready:
                    self._arrived()
                    if self.store.is_master:
                        self._hint.set()
            self._stopped()  # the store's stream ended: it is closed or stopped
            tg.cancel_scope.cancel()

    async def _master_arrivals(self) -> None:
        """At the master: after each change of the store, a message that became ready (the index
        counts them as the master computes its writes) wakes consumers here and hints the others."""
        assert self.store is not None
        last: tuple[int, int] | None = None
        while True:
            await self.store.wait_change()
            if self.store.closed:
                return  # (stopped: wait_change returns at once from now on)
            if not self.store.is_master:
                last = None
                continue
            idx = index_for(self.store.replica.state)
            mark = (id(idx), idx.readied)  # a rebuilt index (new object) counts anew
            if mark != last and idx.ready:
                self._arrived()
                self._hint.set()
            last = mark

    async def _hint_sender(self) -> None:
        """At the master: tell replica-less handles that messages are ready (at most every LINGER s)."""
        while True:
            await self._hint.wait()
            self._hint = anyio.Event()
            await anyio.sleep(LINGER)
            try:
                await self.endpoint.send_node(Kind.COMMAND, self.hint_topic, ["ready"])
            except BrokerMQTTError as exc:  # lost hints cost latency only (consumers poll every poll_interval)
                log.debug("queue %s: hint not sent: %s", self.name, exc)

    async def _hint_receiver(self, hints: Any) -> None:
        async for _ in hints:
            self._arrived()

    async def _await_arrival(self, seen: int, timeout: float) -> None:
        """Until a message became ready after the count ``seen`` (or ``timeout``)."""
        self._arrival_waiters += 1
        try:
            with anyio.move_on_after(timeout):
                while self._arrivals == seen:
                    await self._arrival.wait()
        finally:
            self._arrival_waiters -= 1

    async def _peer_loop(self) -> None:
        assert self.store is not None
        async with self.endpoint.status() as status, anyio.create_task_group() as tg:
            async for e in status:
                if isinstance(e, (PeerLost, PeerRemoved)) and self.store.is_master:
                    for owner in index_for(self.store.replica.state).owners_of_endpoint(e.peer.id.hex):
                        tg.start_soon(self._release, owner, f"consumer's endpoint {e.peer.id} is gone", False)

    async def _lease_loop(self) -> None:
        """The master's chores, every ``min(1 s, lease/4)``: release what expired leases held, forget
        the tombstones of keys erased more than ``tombstone_ttl`` s ago, and erase the accepted
        messages every log reader has passed that a commit left, or write the id counter back above
        every id in use after a healed split (Sweep); CHORE_RECORDS records of each at most."""
        assert self.store is not None
        while True:
            await anyio.sleep(min(1.0, self.lease / 4))
            if self.store.is_master:
                state = self.store.replica.state
                for owner in index_for(state).expired_owners(clock()):
                    await self._release(owner, "lease expired", True)
                forget = None if self.tombstone_ttl is None else Forget(self.tombstone_ttl)
                idx = index_for(state)
                try:
                    for _ in range(CHORE_RECORDS):  # each a record's worth
                        if not (forget is not None and forget.keys(state, clock(), limit=1)):
                            break
                        await self.write(forget)
                    for _ in range(CHORE_RECORDS):
                        if not (idx.done_upto(idx.low_water(), 1) or idx.counter_behind(state)):
                            break
                        await self.write(Sweep(MAX_ERASES))
                except StoreError as exc:  # e.g. mastership moved on: the next master does it
                    log.warning("queue %s: forgetting tombstones or sweeping accepted messages failed: %s",
                                self.name, exc)

    async def _release(self, owner: str, reason: str, if_expired: bool) -> None:
        try:
            released = 0
            for _ in range(RELEASE_RECORDS):  # a record's worth each (an owner still acquiring: the rest later)
                n = await self.write(ReleaseOwner(owner, reason, if_expired))
                if not n:
                    break
                released += n
            if released:
                log.info("queue %s: released %d messages of %s: %s", self.name, released, owner, reason)
        except StoreError as exc:  # e.g. mastership moved on: the next master does it
            log.warning("queue %s: releasing %s failed: %s", self.name, owner, exc)


def _reader_name(name: str) -> str:
    """``name`` if it can name a log reader; else ValueError saying why."""
    why = check_reader_name(name)
    if why is not None:
        raise ValueError(why)
    return name


@attaching
async def attach_queue(
    ep: Endpoint,
    name: str,
    *,
    backend: str = "memory",
    path: str | Path | None = None,
    max_deliveries: int | None = 10,
    lease: float = 30.0,
    election: dict[str, Any] | None = None,
    mode: str = "sticky",
    durability: str = "one",
    write_timeout: float = 30.0,
    candidate: bool = True,
    replica: bool = True,
    tombstone_ttl: float | None = TOMBSTONE_TTL,
    poll_interval: float = POLL,
) -> WorkQueue:
    """Join work queue ``name`` on ``ep``: a replica of the elected store ``queue-<name>``.

    ``max_deliveries``: a message released (or taken back) after that many deliveries goes to the
    dead-letter queue (None: never; fixed per message when it is published). ``lease``: how long a
    consumer's messages stay its own without a renewal (consumers renew every ``lease/3`` s).
    ``replica=False``: keep no copy here, only write (publish and consume), like a
    :class:`~broker_mqtt.store.writer.StoreWriter`; such a handle never becomes master, does not count
    for durability and cannot read the dead-letter queue. The other options are
    :func:`~broker_mqtt.store.elected_attach.attach_store`'s. ``tombstone_ttl``: an accepted message
    leaves a tombstone (so that a merge after a split knows it was erased); the master forgets
    tombstones older than this many seconds, so that the queue does not grow with every message
    (None: keep them all). ``poll_interval``: a consumer or log reader that found nothing waits this
    long at most before it looks again; arrivals (and, on a handle without a replica, the master's
    hints) wake it at once, so this only bounds the delay when such a wake-up is lost.
    Raises ValueError for bad options. If attaching fails or is cancelled after the replica joined,
    the replica is closed again (with its SQLite file).
    """
    if max_deliveries is not None and max_deliveries < 1:
        raise ValueError(f"max_deliveries must be None or >= 1, not {max_deliveries}")
    if not lease > 0:
        raise ValueError(f"lease must be > 0 s, not {lease}")
    if tombstone_ttl is not None and not tombstone_ttl >= 0:
        raise ValueError(f"tombstone_ttl must be None or >= 0 s, not {tombstone_ttl}")
    if not poll_interval > 0:
        raise ValueError(f"poll_interval must be > 0 s, not {poll_interval}")
    if not name or "/" in name or "+" in name or "#" in name:
        raise ValueError(f"bad queue name {name!r}")
    store = None
    if replica:
        # tombstone_ttl=None: the queue forgets its own tombstones (Forget, keeping its index current)
        store = await attach_store(ep, f"queue-{name}", backend=backend, path=path, election=election, mode=mode,
                                   durability=durability, write_timeout=write_timeout, candidate=candidate,
                                   tombstone_ttl=None, resolver=QueueResolver())
    try:
        queue = WorkQueue(ep, name, store, max_deliveries=max_deliveries, lease=lease,
                          write_timeout=write_timeout, tombstone_ttl=tombstone_ttl, poll_interval=poll_interval)
        await ep.start_service(queue._service)
    except BaseException:
        if store is not None:  # no replica (nor its SQLite file) outlives a failed or cancelled attach
            with anyio.CancelScope(shield=True):
                await store.close()
        raise
    return queue
