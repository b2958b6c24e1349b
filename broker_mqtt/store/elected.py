"""Elected stores on an :class:`~broker_mqtt.Endpoint`: the anyio layer (``docs/elected-stores.md``).

Theory of operation:

* :func:`~.elected_attach.attach_store` starts, as a service of the endpoint, one :class:`~.replication.Replica` and one
  :class:`asyncactor.Actor` over MQTT on the store's election topic ``<namespace>/actor/store/<name>/<client id>`` (each node on its own; ``MQTTTransport(bound=True)``).
  The actor's tag makes the replica master (``TagEvent`` → ``tagged``; ``UntagEvent``/``DetagEvent`` →
  ``untagged``). ``mode="sticky"`` keeps the master while it lives; ``mode="rotate"`` moves it every slot.
* Replication messages are node messages of kind COMMAND on topic ``/$store/<name>/e``, broadcast
  to every replica of the store, one message per list (the endpoint coalesces them into PUBLISHes);
  writes go to the master's endpoint only, on ``/$store/<name>/ew``; the master's announcements are
  copied to ``/$store/<name>/em`` and answers to writers without a replica go to their endpoint on
  ``/$store/<name>/ea`` (:mod:`.routes`). Every replica subscribes to ``e``, ``ew`` and ``ea``.
* A receive loop, an election loop, a peer-status loop (a peer's last will tells the replica at once
  that its nodes are gone) and a timer loop feed the replica; after each call the handle drains the
  replica's events (writes answered, data changes, master changes, conflicts) and its messages
  (one drainer at a time, in order).
* A replica whose file fails (a :class:`BackendError` from SQLite: a full disk, an I/O error) stops,
  and only it: its writes raise the error, its streams yield :class:`StoreFailed` and end, and the
  endpoint with its other stores and channels goes on (before, the error tore down the endpoint's
  task group). The other replicas go on as after a crash.
* Node ids are ``<endpoint uuid hex>.<random>``: a restarted process is a new writer, so its write
  numbers never collide with those of its previous life.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import uuid
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
import anyio.to_thread

from ..endpoint.event_stream import EventStream
from ..endpoint.events import PeerLost, PeerRemoved
from ..errors import ForgedMessage, peer_repr
from ..wire.identity import node_endpoint
from ..wire.message import Kind
from .clock import clock, loop_time
from .commands import PutUnique, WriteCommand
from .errors import BackendError, StoreDecodeError, StoreError, Timeout
from .events import (
    ConflictResolved,
    ElectedEvent,
    Erased,
    EventsDropped,
    Expired,
    Inserted,
    MasterChanged,
    StaleChanged,
    StoreFailed,
    Updated,
)
from .operations import WriteOperations
from .packing import detached, detached_key
from .replication import (
    ConflictsFound,
    DataChanged,
    Replica,
    ReplicaStatistics,
    ResolverRefused,
    WriteDone,
    WriteFailed,
)
from .replication import MasterChanged as ReplicaMasterChanged
from .replication import StaleChanged as ReplicaStaleChanged
from .routes import answers_topic, replication_topic, writes_topic
from .versioned import Change, Epoch
from .write_rounds import WriteRounds
from .writer import send_routed
from .writer_core import RECORD_SLACK

if TYPE_CHECKING:
    from asyncactor import Actor

    from ..election.transport import MQTTTransport
    from ..endpoint.endpoint import Endpoint

log = logging.getLogger("broker_mqtt.store.elected")

#: the stores each endpoint holds a replica of: one per endpoint and store (a second one would
#: share the first's topics and never get the answers to its own writes)
_replicas: weakref.WeakKeyDictionary[Endpoint, set[str]] = weakref.WeakKeyDictionary()

__all__ = ["ElectedStore"]


@functools.lru_cache(maxsize=4096)
def _endpoint(node: str | None) -> uuid.UUID | None:
    try:
        return None if node is None else uuid.UUID(hex=node[:32])
    except ValueError:
        return None


class ElectedStore(WriteOperations):
    """A replica of an elected store; see the module docstring and ``docs/elected-stores.md``.

    Reads are local (``await get``/``get_nowait``, and so ``exists``, ``keys``, ``items``); every write goes to the current
    master and returns once it is durable per the store's ``durability`` (raising the master's
    :class:`StoreError`, or :class:`~.replication.NoMaster` when no master took it within
    ``write_timeout``). ``master``, ``epoch``, ``is_master`` and ``stale`` say where things stand.
    """

    def __init__(self, ep: Endpoint, name: str, replica: Replica, *, mode: str, election: dict[str, Any],
                 allow_short_cycle: bool, candidate: bool = True) -> None:
        self.endpoint = ep
        self.name = name
        self.replica = replica
        replica.state.record_limit = ep.max_payload - RECORD_SLACK  # (and at each drain: a CONNACK may change it)
        self.mode = mode
        self.candidate = candidate
        self._election = election
        self._allow_short_cycle = allow_short_cycle
        self.topic = replication_topic(name)
        self.actor_topic = ep.layout.election(name)
        # writes placed here and not answered: the event each waits on, shared by the writes placed
        # together (one per pump round, not one per write); their outcomes ("ok", answer) or ("error", exc)
        self._rounds = WriteRounds()
        self._streams: list[EventStream[ElectedEvent]] = []
        replica.wants_data = self._wants_data  # an installed snapshot builds its changes only if wanted
        self._sendq: list[list[Any]] = []
        self._draining = False
        self._wake = anyio.Event()
        self._pump = anyio.Event()
        self._sleep_until = -math.inf
        self._changed = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._done = anyio.Event()
        self._actor: Any = None
        #: the election's transport while the store takes part in it (its ``forged`` and ``malformed``)
        self.election_transport: MQTTTransport | None = None
        self.malformed = 0
        #: messages dropped because they claim another endpoint than the one their topic names
        self.forged = 0
        self.closed = False
        #: the file's error that stopped this replica (:class:`StoreFailed`); None unless it stopped so
        self.failure: BackendError | None = None

    # -- state ----------------------------------------------------------------------------------------

    @property
    def node_id(self) -> str:
        return self.replica.id

    @property
    def master(self) -> str | None:
        """The node id of the active master (None while there is none)."""
        return self.replica.master

    @property
    def master_endpoint(self) -> uuid.UUID | None:
        return _endpoint(self.replica.master)

    @property
    def epoch(self) -> Epoch | None:
        """``(term, master node id)`` of the current mastership."""
        return self.replica.epoch

    @property
    def is_master(self) -> bool:
        return self.replica.is_master

    @property
    def stale(self) -> bool:
        return self.replica.stale

    @property
    def election(self) -> Actor | None:
        """The store's election actor while it runs (None: not a candidate, or closed): ``is_it``,
        ``current`` (the tag holder as seen here), ``statistics()``."""
        actor: Actor | None = self._actor
        return actor

    def statistics(self) -> ReplicaStatistics:
        """A copy of the replica's counters (handovers, data moved, malformed messages)."""
        return dataclasses.replace(self.replica.stats, malformed=self.malformed + self.replica.stats.malformed)

    def events(self, *, buffer: int = 10_000, data: bool = True) -> EventStream[ElectedEvent]:
        """Data changes (:class:`Inserted`, :class:`Updated`, :class:`Erased`, :class:`Expired`),
        :class:`MasterChanged`, :class:`ConflictResolved` and :class:`StaleChanged` events, in order.

        ``data=False``: no data changes (cheap on a busy store: a data event is built for each
        changed key only while some stream wants them; the stream's ``data`` may be changed while it
        is open). Past ``buffer`` unread events new ones are dropped, and the stream then yields
        :class:`EventsDropped` with their count, where the gap is."""
        stream: EventStream[ElectedEvent] = EventStream(self._streams, buffer, dropped=EventsDropped, data=data)
        if self.closed:  # (one opened after the stop ends at once, with why)
            stream._close(self._last_event())
        return stream

    async def await_idle(self, timeout: float | None = None) -> bool:
        """Wait until no write is pending here and the copy is current (at the master: every live
        replica confirmed the latest record); False on timeout, or once the store is closed or stopped
        (:attr:`failure`)."""
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while not self.replica.idle:
                if self.closed:
                    return False
                await self._wait_change()
            return True
        return False

    async def await_master(self, timeout: float | None = None) -> bool:
        """Wait until a master is active and this copy follows it; False on timeout, or once the store
        is closed or stopped (:attr:`failure`)."""
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while self.replica.master is None or self.replica.stale:
                if self.closed:
                    return False
                await self._wait_change()
            return True
        return False

    async def wait_change(self) -> None:
        """Wait until this replica next handles something (a message, a timer, a write): its state,
        master or staleness may then have changed. Always blocks until that next change, except once
        the store is closed or stopped: then it returns at once."""
        await self._changed.wait()

    # -- reads (local) ------------------------------------------------------------------------------
    # Each read has the shape it has on master and clone handles: ``await op()`` and ``op_nowait()``,
    # the same local read (it never waits; the async form is for code that reads any store kind).

    async def get(self, key: Any) -> Any:
        """The local value of ``key`` (a copy of a list or dict: changing it changes no replica);
        raise :class:`NoSuchKey`."""
        return detached(self.replica.state.get(key))

    def get_nowait(self, key: Any) -> Any:
        """The local value of ``key`` (a copy, as :meth:`get`); raise :class:`NoSuchKey`."""
        return detached(self.replica.state.get(key))

    async def exists(self, key: Any) -> bool:
        return self.replica.state.exists(key)

    def exists_nowait(self, key: Any) -> bool:
        return self.replica.state.exists(key)

    async def keys(self) -> list[Any]:
        return self.replica.state.keys()

    def keys_nowait(self) -> list[Any]:
        return self.replica.state.keys()

    async def items(self) -> list[tuple[Any, Any]]:
        """Every live ``(key, value)`` (values copied, as :meth:`get`)."""
        return self.items_nowait()

    def items_nowait(self) -> list[tuple[Any, Any]]:
        """Every live ``(key, value)`` (values copied, as :meth:`get`)."""
        return [(key, detached(value)) for key, value in self.replica.state.items()]

    def __len__(self) -> int:
        return len(self.replica.state)

    # -- writes ---------------------------------------------------------------------------------------

    async def put_unique(self, key: Any, value: Any, *, expiry: float | None = None) -> bool:
        """Put only if ``key`` is absent; return whether it inserted (decided by the master). Raises
        :class:`AnswerForgotten` (a StoreError) when the answer was forgotten (a repeat, answered by a
        later master after more than the 64 answers the state keeps per writer): the write was
        applied, and whether it inserted is unknown (read the key). A master of an earlier build
        answers such a repeat None: that raises StoreError too."""
        answer = await self.write(PutUnique(key, value, expiry, "", 0))
        if not isinstance(answer, bool):
            raise StoreError(f"store {self.name!r}: the answer of put_unique({peer_repr(key, 40)}) was "
                             "forgotten (a repeat answered by a later master); whether it inserted is unknown")
        return answer

    async def write(self, command: WriteCommand) -> Any:
        """Place any write command; return its answer (put_unique: inserted) once durable. Raises the
        master's StoreError, NoMaster, StoreError once closed, a :class:`BackendError` whose
        ``__cause__`` is the one that stopped this replica (:attr:`failure`), and, queuing nothing,
        BackendError for a key or value outside the data model and PayloadTooLarge for a write the
        broker could not carry."""
        if self.failure is not None:  # (a new one each time: raising one again grows its traceback)
            raise BackendError(str(self.failure)) from self.failure
        if self.closed:
            raise StoreError(f"store {self.name!r} is closed")
        # (check_size: PayloadTooLarge now for a write the broker would refuse to carry, in the log
        # record or the follower's message to the master; raised later, in the loop that sends it,
        # it tore down the endpoint)
        n = self.replica.write(command, loop_time(), check_size=self.endpoint.check_payload_size)
        if self._rounds.place(n):
            self._pump.set()  # the first write of a round: the pump drains and sends it
        kind, value = await self._rounds.outcome(n)
        if kind == "error":
            raise value
        return value

    _write = write  # the write operations' hook (put, erase, ...): a coroutine frame less per write

    # -- lifecycle ------------------------------------------------------------------------------------

    async def handoff(self) -> bool:
        """Pass mastership on at once (graceful shutdown); True if this node was master. Raises the
        :class:`BackendError` that stops this replica if its file fails meanwhile."""
        if self._actor is None or not self.replica.is_master:
            return False
        await self._actor.handoff()
        self.replica.untagged(anyio.current_time())
        try:
            self._drain()
        except BackendError as exc:  # (a drain commits first: the file may fail then too)
            await self._fail(exc)
            raise
        await self._flush()
        return True

    async def close(self) -> None:
        """Hand mastership over if held, then stop. Idempotent."""
        if self.closed:
            return
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(2.0):
                with contextlib.suppress(BackendError):  # (handoff stopped the store: stopping anyway)
                    await self.handoff()
                await self.endpoint.flush(1.0)
        self.closed = True
        if self._scope is not None:
            self._scope.cancel()
        await self._done.wait()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # -- the service ------------------------------------------------------------------------------------

    async def _service(self, *, task_status: anyio.abc.TaskStatus[Any]) -> None:
        from asyncactor import Actor
        from broker_mqtt.election import MQTTTransport

        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                # the replication topic, writes sent to this endpoint as the master's (every replica:
                # any candidate may become master, the others ignore them), and answers sent to this
                # endpoint while it was not seen as live; writes also from this endpoint (a writer
                # without a replica beside the master), never the log this replica sends
                writes = writes_topic(self.name)
                async with self.endpoint.subscribe(self.topic, writes, answers_topic(self.name), local=(writes,),
                                             kind=Kind.COMMAND, buffer=4096) as sub, \
                        self.endpoint.status() as status, contextlib.AsyncExitStack() as stack:
                    if self.candidate:  # only candidates take part in the election
                        transport = self.election_transport = MQTTTransport(self.endpoint, self.actor_topic,
                                                                            bound=True)
                        self._actor = await stack.enter_async_context(Actor(
                            transport, name=self.replica.id, cfg=self._election, value=0,
                            sticky=self.mode == "sticky", allow_short_cycle=self._allow_short_cycle))
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._guarded, self._receive_loop, sub)
                        if self._actor is not None:
                            tg.start_soon(self._guarded, self._election_loop, self._actor)
                        tg.start_soon(self._guarded, self._status_loop, status)
                        tg.start_soon(self._guarded, self._timer_loop)
                        tg.start_soon(self._guarded, self._pump_loop)
                        tg.start_soon(self._rounds.run)
                        task_status.started(self)
        finally:
            self.closed = True
            _replicas.get(self.endpoint, set()).discard(self.name)
            self._actor = None
            self._rounds.fail_all(("error", self._unanswered()))
            try:
                self.replica.state.close()
            except Exception as exc:  # (a failed file may fail to close too: the stop goes on)
                log.warning("store %s: closing its file failed: %s", self.name, exc)
            last = self._last_event()
            for s in list(self._streams):
                s._close(last)  # (held even by a stream that fell behind)
            self._changed.set()  # the waiters look again: closed
            self._done.set()

    def _last_event(self) -> StoreFailed | None:
        """The event that ends a stream of a stopped store: why it stopped (None: it was closed)."""
        return None if self.failure is None else StoreFailed(self.name, self.failure)

    def _unanswered(self) -> StoreError:
        """The error of a write placed and not answered when the service stops."""
        if self.failure is None:
            return StoreError(f"store {self.name!r} is closed")
        # it may have reached the master and been applied there (a follower's, or this master's own
        # before the failure): its outcome is unknown, as after a timeout; not the BackendError, which
        # says that nothing changed
        error = Timeout(f"store {self.name!r}: this replica stopped before the write was answered "
                        f"({self.failure}); the master may have applied it (outcome unknown)")
        error.__cause__ = self.failure
        return error

    async def _guarded(self, loop: Any, *args: Any) -> None:
        """Run one of the service's loops; a failure of the replica's file stops this store only."""
        try:
            await loop(*args)
        except BackendError as exc:
            await self._fail(exc)

    async def _fail(self, exc: BackendError) -> None:
        """The file failed (its transaction rolled back: the file holds what was committed before).
        What the replica holds in memory is ahead of it, so it may not go on: stop the service, and
        send the replica's resignation if it was master (nothing else it holds)."""
        if self.failure is None:
            log.error("store %s: replica %s stops: its state cannot be stored: %s", self.name, self.replica.id, exc)
            self.failure = exc
        with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
            if self._actor is not None:
                await self._actor.handoff()  # the tag on at once, as on close: not after a cycle
            for msg in self.replica.stop(anyio.current_time()):
                await send_routed(self.endpoint, self.name, msg)
        if self._scope is not None:
            self._scope.cancel()

    async def _receive_loop(self, sub: Any) -> None:
        async for msg in sub:
            try:
                self.replica.handle(msg.data, loop_time(), sender=msg.sender_hex)
            except ForgedMessage as exc:
                self.forged += 1
                log.warning("store %s: dropped a forged message: %s", self.name, exc)
            except StoreDecodeError:
                self.malformed += 1
            if sub.buffered and not self.replica.ack_due:
                continue  # the rest of this PUBLISH first: one drain (one log message, say) for all
            self._drain()
            await self._flush()
            if sub.buffered:
                # records applied, more to come: let this ack go out first, so that the master answers
                # (and its writers place the next writes) while this replica applies the rest
                await anyio.lowlevel.checkpoint()

    async def _election_loop(self, actor: Any) -> None:
        from asyncactor import DetagEvent, TagEvent, UntagEvent

        async for event in actor:
            now = anyio.current_time()
            if isinstance(event, TagEvent) and event.node == self.replica.id:
                log.info("store %s: %s holds the tag", self.name, self.replica.id)
                self.replica.tagged(now)
            elif isinstance(event, (UntagEvent, DetagEvent)):
                log.info("store %s: %s lost the tag (%s)", self.name, self.replica.id, event)
                self.replica.untagged(now)
            else:
                continue
            self._drain()
            await self._flush()

    async def _status_loop(self, status: Any) -> None:
        async for event in status:
            if isinstance(event, (PeerLost, PeerRemoved)):
                gone = event.peer.id.hex
                self.replica.peer_gone(gone)
                actor = self._actor
                holder = actor.current if actor is not None else None
                if actor is not None and holder is not None and node_endpoint(holder) == gone:
                    # its last will: bid now rather than when its next ping is overdue
                    await actor.holder_gone(holder)
                self._drain()
                await self._flush()

    async def _pump_loop(self) -> None:
        """Drain and send what writes queued: once for all the writes placed since it last ran (the
        tasks that write together are all run before it), so that a master sends one log message
        for each round of them (:data:`.write_rounds.ROUND_WRITES`) and a follower one message of writes, not one
        each."""
        while True:
            await self._pump.wait()
            self._pump = anyio.Event()
            self._rounds.end_round()
            self._drain()
            await self._flush()

    async def _timer_loop(self) -> None:
        while True:
            now = anyio.current_time()
            delay = self.replica.next_deadline - now
            if delay > 0:
                self._sleep_until = now + min(delay, 1.0)
                with anyio.move_on_after(min(delay, 1.0)):
                    await self._wake.wait()
                self._wake = anyio.Event()
            else:  # due at once, maybe again and again (a key order taken a slice at a time):
                await anyio.lowlevel.checkpoint()  # the other tasks run between the ticks
            self._sleep_until = -math.inf
            self.replica.tick(anyio.current_time(), clock())
            self._drain()
            await self._flush()

    # -- plumbing -----------------------------------------------------------------------------------------

    def _drain(self) -> None:
        self.replica.state.record_limit = self.endpoint.max_payload - RECORD_SLACK  # (for computed commands)
        self._sendq.extend(self.replica.to_send())
        for event in self.replica.events():
            match event:
                case WriteDone(n=n, result=result):
                    self._rounds.answer(n, ("ok", result))
                case WriteFailed(n=n, error=error):
                    self._rounds.answer(n, ("error", error))
                case DataChanged(changes=changes):
                    wanting = [s for s in self._streams if s.data]  # nobody: no events built
                    for c in changes if wanting else ():
                        for stream in wanting:  # (each its own event: one stream's change shows in no other)
                            stream._put(self._data_event(c))
                case ReplicaMasterChanged(master=master, epoch=epoch):
                    log.info("store %s: %s sees master %s, epoch %s", self.name, self.replica.id, master, epoch)
                    self._emit(MasterChanged(self.name, master, epoch))
                case ConflictsFound(conflicts=conflicts):
                    log.warning("store %s: %s merged diverged histories: %d conflicts", self.name, self.replica.id,
                                len(conflicts))
                    for conflict in conflicts:
                        for stream in self._streams:  # (each its own copies of the values, as data events)
                            stream._put(ConflictResolved(self.name, conflict.key, conflict.chosen.copied(),
                                                         conflict.other.copied()))
                case ResolverRefused(errors=refusals):
                    for why in refusals:
                        log.error("store %s: %s merged diverged histories: the resolver's answer was refused, "
                                  "last writer wins decided instead: %s", self.name, self.replica.id, why)
                case ReplicaStaleChanged(stale=stale, reason=reason):
                    self._emit(StaleChanged(self.name, stale, reason))
        self._rounds.wake()
        if self.replica.next_deadline < self._sleep_until:
            self._wake.set()  # the timer sleeps past the replica's new deadline
        self._changed.set()
        self._changed = anyio.Event()

    def _data_event(self, c: Change) -> Any:
        """The data event of change ``c``, its key and values copied (they are the state's and the log's)."""
        publisher = _endpoint(c.origin)
        key = detached_key(c.key)
        if c.exists and c.existed:
            return Updated(self.name, key, detached(c.old), detached(c.new), publisher)
        if c.exists:
            return Inserted(self.name, key, detached(c.new), publisher)
        if c.expired:
            return Expired(self.name, key, detached(c.old))
        return Erased(self.name, key, detached(c.old), publisher)

    def _wants_data(self) -> bool:
        return any(s.data for s in self._streams)

    def _emit(self, event: Any) -> None:
        for s in self._streams:
            s._put(event)

    async def _wait_change(self) -> None:
        await self._changed.wait()

    async def _flush(self) -> None:
        """Send queued messages in order; one drainer at a time."""
        if self._draining:
            return
        self._draining = True
        try:
            while self._sendq:
                batch, self._sendq = self._sendq, []
                for msg in batch:
                    await send_routed(self.endpoint, self.name, msg)
        finally:
            self._draining = False
