"""Data stores attached to an :class:`~broker_mqtt.Endpoint`: the anyio I/O layer (``docs/stores.md`` § 6).

Theory of operation:

* A handle (:class:`MasterStore` or :class:`CloneStore`) wraps one sans-io core (:class:`.Master` /
  :class:`.Clone`) and runs as a service of its endpoint (``Endpoint.start_service``): a receive
  loop feeds every store message to the core, a timer loop calls ``tick`` at the core's
  ``next_deadline`` (at least every ``ack_interval``), and after every core call the handle drains
  ``to_send()`` into ``Endpoint.send_node(Kind.COMMAND, ...)`` in order (one drainer at a time);
  the cores send runs of consecutive channel events as one ``EventBatch`` message. An
  application write is sent at once unless it follows the previous one within ``_BURST_GAP``:
  then a sender task drains it as soon as the writer yields (inline every ``_DRAIN_EVERY``
  writes), so a burst leaves as a few large messages and a lone write without delay.
* Topics of store ``name`` (node messages of kind COMMAND): ``/$store/<name>/m`` master → clones
  (broadcast, and unicast handshakes/retransmissions/writer ACKs), ``/$store/<name>/c`` clones →
  master (unicast; discovery queries are broadcast there), ``/$store/<name>/a`` discovery answers
  and master announcements.
* Discovery: node ids are ``<endpoint uuid hex>.<random incarnation>``, so a restarted master is a
  new channel producer. A master first asks ``["store_query", id]`` and waits
  ``discovery_timeout``: an answer from another master raises :class:`MasterExists`; otherwise
  it announces ``["store_master", id]`` and answers every later query. A clone asks whenever it
  is stale (every heartbeat interval) and switches to any master id it learns (answer,
  announcement, or a broadcast from a new producer on ``/m``) that is not one it left: it builds
  a new core on the same local copy and re-queues there every write the old master had not
  acknowledged (at-least-once across a master restart), then resyncs by snapshot.
* Errors: master operations raise at once; clone writes are checked against the local copy
  (``TypeClash``/``NoSuchKey``) and otherwise are accepted for the master (``WriteBufferFull``
  past the bound); ``put_unique`` waits for the master's answer or raises ``Timeout``.
* A :class:`Faults` wrapper between transport and core can drop and delay (reorder) incoming
  store messages with a seeded ``random.Random``, for tests.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import secrets
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
import anyio.lowlevel

from .. import channel as ch
from ..endpoint.attaching import attaching
from ..errors import PayloadTooLarge
from ..wire import codec
from ..wire.message import Kind
from .backend import Backend, Entry, MemoryBackend, SQLiteBackend, _pack
from .clone import (
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_WRITE_BUFFER,
    Clone,
    PutUniqueAnswered,
    RequestError,
    Synced,
    WentStale,
    WriteFailed,
)
from .commands import Clear, Erase, Expire, Put, PutUnique, WriteCommand, decode_command, decode_control
from .errors import MasterExists, NoSuchKey, Stale, StoreDecodeError, StoreError
from .master import CloneAttached, CloneLost, Envelope, Master, RemoteWriteFailed, WritesLost, _new_value
from .operations import WriteOperations

if TYPE_CHECKING:
    from ..endpoint.endpoint import Endpoint

__all__ = [
    "DEFAULT_CHANNEL", "Faults", "Inserted", "Updated", "Erased", "Expired", "EventsDropped", "StoreEvent",
    "StaleChanged", "MasterFound", "MasterConflict", "WriteRejected", "StoreStatus", "StoreStatistics", "MasterStore", "CloneStore",
    "attach_master", "attach_clone",
]

#: Channel timers of attached stores: ACKs every 50 ms (so ``await_idle`` answers quickly), a
#: heartbeat per second, a peer silent for 5 s is dead.
DEFAULT_CHANNEL = ch.ChannelConfig(heartbeat_interval=1.0, ack_interval=0.05, connection_timeout=5)
DEFAULT_EVENT_BUFFER = 10_000

_SCALARS = (int, float, bool, type(None))  # small by nature: no size check on the hot path
_ENVELOPE_SLACK = 512  # channel message, node message and topic around a command's own encoding
_CHANNEL_KINDS = frozenset(k.value for k in ch.MessageKind)
_DRAIN_EVERY = 256  # writes queued in a core before the writer drains it itself
_UNCHECKED = frozenset({Put, PutUnique, Erase, Clear})  # writes that cannot fail at the master (types)
_BURST_GAP = 100e-6  # seconds between application writes below which they are sent together
_WALL_OFFSET = time.time() - time.monotonic()


def _clock() -> float:
    """Monotonic seconds aligned with wall-clock time at import (expiries survive restarts)."""
    return time.monotonic() + _WALL_OFFSET


_ENDPOINTS: dict[str, uuid.UUID] = {}


def _endpoint_of(node_id: str) -> uuid.UUID:
    """The endpoint of a node id (``<uuid hex>.<incarnation>``, writers ``…/w<n>``); ValueError if
    ``node_id`` has no such form."""
    ep = _ENDPOINTS.get(node_id)
    if ep is None:
        ep = uuid.UUID(hex=node_id[:32])
        if len(_ENDPOINTS) < 10_000:
            _ENDPOINTS[node_id] = ep
    return ep


def _endpoint_or_none(node_id: str) -> uuid.UUID | None:
    try:
        return _endpoint_of(node_id)
    except ValueError:
        return None


# -- events ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Inserted:
    """``key`` was created with ``value``. ``publisher``: the endpoint that wrote it at the master
    (None: unknown, as for changes a clone takes from a resync snapshot)."""

    store: str
    key: Any
    value: Any
    publisher: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class Updated:
    store: str
    key: Any
    old_value: Any
    new_value: Any
    publisher: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class Erased:
    """``key`` was erased (``erase``, ``clear``, or gone from a resync snapshot)."""

    store: str
    key: Any
    old_value: Any
    publisher: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class Expired:
    store: str
    key: Any
    old_value: Any


@dataclass(frozen=True, slots=True)
class EventsDropped:
    """This stream fell ``count`` events behind its buffer; they are gone (never silently)."""

    count: int


StoreEvent = Inserted | Updated | Erased | Expired | EventsDropped


@dataclass(frozen=True, slots=True)
class StaleChanged:
    """A clone became stale (``stale=True``: reads raise :class:`Stale`) or synchronised again."""

    store: str
    stale: bool
    reason: str


@dataclass(frozen=True, slots=True)
class MasterFound:
    """A clone bound itself to master ``master`` (first discovery, or a restarted master)."""

    store: str
    master: str


@dataclass(frozen=True, slots=True)
class MasterConflict:
    """A master heard another master ``other`` announce itself for the same store."""

    store: str
    other: str


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """Counters of a store handle since it was attached (see ``statistics()``)."""

    malformed: int  #: store messages that did not decode or broke the protocol (ignored)
    fault_dropped: int  #: incoming messages a :class:`Faults` injector dropped
    fault_delayed: int  #: incoming messages a :class:`Faults` injector delayed
    queued: int  #: outgoing messages waiting for the endpoint


@dataclass(frozen=True, slots=True)
class WriteRejected:
    """The master refused one of this clone's writes that was already accepted locally (e.g. an
    ``increment`` of a string, judged at the master); nothing changed anywhere."""

    store: str
    error: StoreError


StoreStatus = StaleChanged | MasterFound | MasterConflict | WriteRejected | CloneAttached | CloneLost \
    | RemoteWriteFailed | WritesLost


class _Stream:
    """A bounded queue of items for one consumer; overflow is counted and reported in-band."""

    def __init__(self, owner: list[_Stream], limit: int, *, report_drops: bool) -> None:
        self._owner = owner
        self._limit = limit
        self._items: deque[Any] = deque()
        self._dropped = 0
        self._report = report_drops
        self._wake = anyio.Event()
        self._closed = False

    def _put(self, item: Any) -> None:
        if len(self._items) >= self._limit:
            self._dropped += 1
        else:
            self._items.append(item)
        self._wake.set()

    def _close(self) -> None:
        self._closed = True
        self._wake.set()

    async def __aenter__(self) -> Self:
        self._owner.append(self)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self in self._owner:
            self._owner.remove(self)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        while True:
            if self._dropped and self._report:
                n, self._dropped = self._dropped, 0
                return EventsDropped(n)
            if self._items:
                return self._items.popleft()
            if self._closed:
                raise StopAsyncIteration
            self._wake = anyio.Event()
            await self._wake.wait()


# -- fault injection ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Faults:
    """Drop (``loss``) and delay by up to ``max_delay`` s (``reorder``) incoming store messages."""

    loss: float = 0.0
    reorder: float = 0.0
    max_delay: float = 0.02
    seed: int = 0


class _Injector:
    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.rng = random.Random(faults.seed)
        self.held: list[tuple[float, int, Any, Any]] = []
        self.counter = itertools.count()
        self.dropped = 0
        self.delayed = 0

    def filter(self, msg: Any, sender: Any, now: float) -> list[tuple[Any, Any]]:
        r = self.rng.random()
        if r < self.faults.loss:
            self.dropped += 1
        elif r < self.faults.loss + self.faults.reorder:
            self.delayed += 1
            heapq.heappush(self.held, (now + self.rng.random() * self.faults.max_delay, next(self.counter),
                                       msg, sender))
        else:
            return [(msg, sender)]
        return []

    def due(self, now: float) -> list[tuple[Any, Any]]:
        out = []
        while self.held and self.held[0][0] <= now:
            _, _, msg, sender = heapq.heappop(self.held)
            out.append((msg, sender))
        return out

    @property
    def next_deadline(self) -> float:
        return self.held[0][0] if self.held else math.inf


# -- wire --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Query:
    asker: str


@dataclass(frozen=True, slots=True)
class _MasterIs:
    master: str


def _decode(wire: Any) -> Any:
    """Any store message: channel, attach_clone, or discovery; raise StoreDecodeError/ChannelDecodeError."""
    if isinstance(wire, list) and wire:
        head = wire[0]
        if head in _CHANNEL_KINDS:
            return ch.decode_message(wire)
        if head in ("store_query", "store_master"):
            if len(wire) != 2 or not isinstance(wire[1], str) or len(wire[1]) < 32:
                raise StoreDecodeError(f"malformed {head}: {wire!r:.200}")
            return _Query(wire[1]) if head == "store_query" else _MasterIs(wire[1])
    return decode_control(wire)


# -- a backend that reports changes --------------------------------------------------------------------


class _Observed:
    """Wraps a backend; when someone listens, turns every mutation into store events."""

    def __init__(self, inner: Backend, store: str) -> None:
        self.inner = inner
        self.store = store
        self.streams: list[_Stream] = []
        self.publisher: uuid.UUID | None = None  # at a master: who writes now
        self.clone: Clone | None = None  # at a clone: its applying command (Expire vs Erase, publisher)
        self._closed = False

    def _publisher(self) -> uuid.UUID | None:
        """The endpoint that wrote the change being applied."""
        clone = self.clone
        if clone is None:
            return self.publisher
        node = getattr(clone.applying, "publisher", None)  # a broadcast names a clone that wrote
        return _endpoint_or_none(clone.master if node is None else node)

    def _emit(self, event: Any) -> None:
        for s in self.streams:
            s._put(event)

    # reads
    @property
    def last_seq(self) -> int:
        return self.inner.last_seq

    def get(self, key: Any) -> Any:
        return self.inner.get(key)

    def get_entry(self, key: Any) -> Entry | None:
        return self.inner.get_entry(key)

    def exists(self, key: Any) -> bool:
        return self.inner.exists(key)

    def keys(self) -> list[Any]:
        return self.inner.keys()

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.inner)

    def snapshot(self) -> list[Entry]:
        return self.inner.snapshot()

    def next_expiry(self) -> float | None:
        return self.inner.next_expiry()

    def set_last_seq(self, seq: int) -> None:
        self.inner.set_last_seq(seq)

    def close(self) -> None:
        """Close the wrapped backend, once (later calls do nothing: a backend's own ``close`` need
        not be idempotent)."""
        if not self._closed:
            self._closed = True
            self.inner.close()

    # writes
    def put(self, key: Any, value: Any, expiry: float | None = None, *, seq: int | None = None) -> None:
        if not self.streams:
            self.inner.put(key, value, expiry, seq=seq)
            return
        old = self.inner.get_entry(key)
        self.inner.put(key, value, expiry, seq=seq)
        if old is None:
            self._emit(Inserted(self.store, key, value, self._publisher()))
        else:
            self._emit(Updated(self.store, key, old.value, value, self._publisher()))

    def erase(self, key: Any, *, seq: int | None = None) -> bool:
        if not self.streams:
            return self.inner.erase(key, seq=seq)
        old = self.inner.get_entry(key)
        existed = self.inner.erase(key, seq=seq)
        if old is not None:
            if self.clone is not None and isinstance(self.clone.applying, Expire):
                self._emit(Expired(self.store, key, old.value))
            else:
                self._emit(Erased(self.store, key, old.value, self._publisher()))
        return existed

    def clear(self, *, seq: int | None = None) -> None:
        old = self.inner.snapshot() if self.streams else []
        self.inner.clear(seq=seq)
        publisher = self._publisher() if old else None
        for e in old:
            self._emit(Erased(self.store, e.key, e.value, publisher))

    def expire(self, now: float, *, seq: int | None = None) -> list[Any]:
        if not self.streams:
            return self.inner.expire(now, seq=seq)
        due = [e for e in self.inner.snapshot() if e.expiry is not None and e.expiry <= now]
        keys = self.inner.expire(now, seq=seq)
        for e in due:
            self._emit(Expired(self.store, e.key, e.value))
        return keys

    def replace_all(self, entries: list[Entry], *, seq: int | None = None) -> None:
        if not self.streams:
            self.inner.replace_all(entries, seq=seq)
            return
        old = {_pack(e.key): e for e in self.inner.snapshot()}
        self.inner.replace_all(entries, seq=seq)
        for e in entries:
            prev = old.pop(_pack(e.key), None)
            if prev is None:
                self._emit(Inserted(self.store, e.key, e.value, None))
            elif prev.value != e.value:
                self._emit(Updated(self.store, e.key, prev.value, e.value, None))
        for prev in old.values():
            self._emit(Erased(self.store, prev.key, prev.value, None))


# -- the common part of both handles -----------------------------------------------------------------


class _Waiter:
    __slots__ = ("event", "result", "error")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class _Handle(WriteOperations):
    """Service loop, sending, idle waiting, event and status streams."""

    role = "?"

    def __init__(self, ep: Endpoint, name: str, *, config: ch.ChannelConfig, faults: Faults | None,
                 event_buffer: int) -> None:
        self.endpoint = ep
        self.name = name
        base = f"/$store/{name}"
        self._t_master, self._t_clones, self._t_answers = base + "/m", base + "/c", base + "/a"
        self.config = config
        self.id = f"{ep.id.hex}.{secrets.token_hex(4)}"
        self._injector = _Injector(faults) if faults is not None else None
        self._event_buffer = event_buffer
        self._status_streams: list[_Stream] = []
        self._sendq: deque[Envelope] = deque()
        self._unsent = 0  # application writes in the core not drained yet
        self._last_write = 0.0  # time.perf_counter() of the latest application write
        self._kick_event = anyio.Event()
        self._kicked = False
        self._draining = False
        self._drain_waiter: anyio.Event | None = None
        self._changed = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._done = anyio.Event()
        self.closed = False
        self.malformed = 0
        self.observed: _Observed  # set by subclasses

    # -- public ----------------------------------------------------------------------------------

    def events(self, *, buffer: int | None = None) -> _Stream:
        """Changes of this replica: ``async with s.events() as ev: async for e in ev``.

        Inserted/Updated/Erased/Expired in the order applied here. A stream ``buffer`` events
        behind loses the newest and then yields one :class:`EventsDropped` with their count.
        """
        return _Stream(self.observed.streams, buffer or self._event_buffer, report_drops=True)

    def status(self, *, buffer: int = 1000) -> _Stream:
        """Status events (:data:`StoreStatus`): staleness, master changes, clones, failed writes."""
        return _Stream(self._status_streams, buffer, report_drops=True)

    async def await_idle(self, timeout: float | None = None) -> bool:
        """Wait until this replica is idle (``docs/stores.md`` § 3/4); False on timeout.

        Cancelling it changes nothing. Idle is a moment: a later write makes it busy again.
        False at once once the handle is closed.
        """
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while not self._core_idle():
                if self.closed:
                    return False
                self._changed = anyio.Event() if self._changed.is_set() else self._changed
                await self._changed.wait()
            return True
        return False

    def statistics(self) -> StoreStatistics:
        inj = self._injector
        return StoreStatistics(self.malformed, inj.dropped if inj else 0, inj.delayed if inj else 0,
                               len(self._sendq))

    async def close(self) -> None:
        """Detach: stop the service (what is not sent yet is not sent) and close the backend."""
        if self._scope is not None:
            self._scope.cancel()
        await self._done.wait()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # -- internals -------------------------------------------------------------------------------

    def _core_idle(self) -> bool:
        raise NotImplementedError

    def _status(self, event: Any) -> None:
        for s in self._status_streams:
            s._put(event)

    def _notify(self) -> None:
        self._changed.set()

    def _check_open(self) -> None:
        if self.closed:
            raise StoreError(f"store {self.name!r} ({self.role}) is closed")

    def _take(self) -> list[Envelope]:
        """Drain the core (every caller of ``to_send`` goes through here)."""
        self._unsent = 0
        return self.core.to_send()  # type: ignore[attr-defined, no-any-return]  # set by subclasses

    async def _wrote(self) -> None:
        """After an application write: a lone write is sent at once (no added latency); a write
        within ``_BURST_GAP`` of the previous one is left for the sender task, which runs as soon
        as the writer yields, so a burst leaves as a few large messages (inline every
        ``_DRAIN_EVERY`` writes). Either way every write is sent, in order."""
        self._unsent += 1
        now = time.perf_counter()
        burst, self._last_write = now - self._last_write < _BURST_GAP, now
        if self._kicked:  # the sender task will drain
            if self._unsent >= _DRAIN_EVERY:
                await self._flush(self._take())
        elif burst:
            self._kicked = True
            self._kick_event.set()
        else:
            await self._flush(self._take())

    async def _sender_loop(self) -> None:
        while True:
            await self._kick_event.wait()
            self._kick_event = anyio.Event()
            self._kicked = False
            await self._flush(self._take())

    async def _flush(self, envelopes: list[Envelope]) -> None:
        """Send envelopes in order; one drainer at a time, later callers wait if it is far behind."""
        if not envelopes:
            return
        q = self._sendq
        q.extend(envelopes)
        if self._draining:
            while self._draining and len(q) > 10_000:
                if self._drain_waiter is None:
                    self._drain_waiter = anyio.Event()
                await self._drain_waiter.wait()
            return
        self._draining = True
        try:
            while q:
                batch = list(q)
                q.clear()
                for env in batch:
                    await self._send_split(env)
        finally:
            self._draining = False
            if self._drain_waiter is not None:
                self._drain_waiter.set()
                self._drain_waiter = None

    async def _send_split(self, env: Envelope) -> None:
        """Send; a batch of events too large for the broker goes as two halves (recursively)."""
        msg = env.message
        try:
            await self._send(env)
        except PayloadTooLarge:
            if not isinstance(msg, ch.EventBatch) or len(msg.payloads) < 2:
                raise
            half = len(msg.payloads) // 2
            for first, payloads in ((msg.first_seq, msg.payloads[:half]),
                                    (msg.first_seq + half, msg.payloads[half:])):
                part = ch.EventBatch(msg.producer, first, payloads) if len(payloads) > 1 else \
                    ch.Event(msg.producer, first, payloads[0])
                await self._send_split(Envelope(part, env.to))

    async def _send(self, env: Envelope) -> None:
        raise NotImplementedError

    async def _service(self, *, task_status: anyio.abc.TaskStatus[Any]) -> None:
        try:
            with anyio.CancelScope() as self._scope:
                async with self.endpoint.subscribe(*self._prefixes(), kind=Kind.COMMAND, local=True,
                                                   buffer=1024) as sub:
                    await self._setup(sub)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._timer_loop)
                        tg.start_soon(self._sender_loop)
                        task_status.started(self)
                        await self._receive_loop(sub)
                        tg.cancel_scope.cancel()
        finally:
            self.closed = True
            for s in [*self._status_streams, *self.observed.streams]:
                s._close()
            self._fail_waiters()
            self._notify()
            self.observed.close()
            self._done.set()

    def _prefixes(self) -> tuple[str, ...]:
        raise NotImplementedError

    async def _setup(self, sub: Any) -> None:
        pass

    def _fail_waiters(self) -> None:
        pass

    async def _receive_loop(self, sub: Any) -> None:
        async for msg in sub:
            try:
                decoded = _decode(msg.data)
            except (StoreDecodeError, ch.ChannelDecodeError):
                self.malformed += 1
                continue
            now = _clock()
            if self._injector is None:
                await self._deliver(decoded, msg, now)
            else:
                for m, origin in self._injector.filter(decoded, msg, now):
                    await self._deliver(m, origin, now)
            self._notify()

    async def _deliver(self, msg: Any, origin: Any, now: float) -> None:
        """Handle one decoded store message; ``origin`` is the endpoint Message it came in
        (``origin.sender`` is the sending endpoint; read only when needed, it costs a UUID)."""
        raise NotImplementedError

    def _next_deadline(self) -> float:
        raise NotImplementedError

    async def _tick(self, now: float) -> None:
        raise NotImplementedError

    async def _timer_loop(self) -> None:
        cap = self.config.ack_interval
        while True:
            now = _clock()
            if self._injector is not None:
                for m, sender in self._injector.due(now):
                    await self._deliver(m, sender, now)
            deadline = self._next_deadline()
            if self._injector is not None:
                deadline = min(deadline, self._injector.next_deadline)
            if deadline <= now:
                await self._tick(now)
                self._notify()
                await anyio.lowlevel.checkpoint()
                continue
            await anyio.sleep(min(deadline - now, cap))

    # -- the operations (writes go through _write) ----------------------------------------------------

    async def _write(self, command: WriteCommand) -> Any:
        raise NotImplementedError

    def _check_size(self, command: WriteCommand) -> None:
        """Raise PayloadTooLarge now for a write whose message the broker would refuse (it would
        otherwise fail later in the sender task, after the core accepted it). Scalars need no check."""
        for value in (getattr(command, "key", None), getattr(command, "value", None),
                      getattr(command, "index", None)):
            if value is not None and not isinstance(value, _SCALARS):
                try:
                    size = len(codec.encode(command.to_wire()))
                except codec.EncodeError:
                    return  # not data: the backend refuses it with its own error
                self.endpoint._check_size(size + _ENVELOPE_SLACK)
                return


# -- master --------------------------------------------------------------------------------------------


class MasterStore(_Handle):
    """The master of store ``name`` on an endpoint. Reads and writes apply here at once."""

    role = "master"

    def __init__(self, ep: Endpoint, name: str, backend: Backend, *, config: ch.ChannelConfig,
                 faults: Faults | None, event_buffer: int, discovery_timeout: float) -> None:
        super().__init__(ep, name, config=config, faults=faults, event_buffer=event_buffer)
        self.observed = _Observed(backend, name)
        self.observed.publisher = ep.id
        self._discovery_timeout = discovery_timeout
        self._conflicts: set[str] = set()
        self.core = Master(name, self.id, self.observed, _clock(), config=config)  # type: ignore[arg-type]

    def _prefixes(self) -> tuple[str, ...]:
        return (self._t_clones, self._t_answers)

    @property
    def stale(self) -> bool:
        """A master is never stale."""
        return False

    def _core_idle(self) -> bool:
        return self.core.idle

    async def _setup(self, sub: Any) -> None:
        """Ask for another master of this name; raise MasterExists if one answers."""
        await self.endpoint.send_node(Kind.COMMAND, self._t_clones, ["store_query", self.id])
        with anyio.move_on_after(self._discovery_timeout):
            async for msg in sub:
                try:
                    m = _decode(msg.data)
                except (StoreDecodeError, ch.ChannelDecodeError):
                    continue
                if isinstance(m, _MasterIs) and m.master != self.id:
                    raise MasterExists(f"store {self.name!r} already has master {m.master}")
        await self.endpoint.send_node(Kind.COMMAND, self._t_answers, ["store_master", self.id])

    async def _send(self, env: Envelope) -> None:
        wire = env.message.to_wire()
        if env.to is None:
            await self.endpoint.send_node(Kind.COMMAND, self._t_master, wire)
        elif (peer := _endpoint_or_none(env.to)) is not None:  # a clone id not naming an endpoint: dropped
            await self.endpoint.send_node(Kind.COMMAND, self._t_master, wire, receivers=(peer,))

    async def _deliver(self, msg: Any, origin: Any, now: float) -> None:
        match msg:
            case _Query(asker=asker):
                if asker != self.id:
                    await self.endpoint.send_node(Kind.COMMAND, self._t_answers, ["store_master", self.id],
                                                  receivers=(origin.sender,))
                return
            case _MasterIs(master=other):
                if other != self.id and other not in self._conflicts:
                    self._conflicts.add(other)
                    self._status(MasterConflict(self.name, other))
                return
            case ch.Event(producer=producer) | ch.EventBatch(producer=producer) | ch.Handshake(producer=producer) \
                    | ch.RetransmitFailed(producer=producer):
                self.observed.publisher = _endpoint_or_none(producer)
        try:
            events = self.core.handle(msg, now)
        except (ch.ChannelError, StoreError):  # a peer broke the protocol; state is unchanged
            self.malformed += 1
            events = []
        finally:
            self.observed.publisher = self.endpoint.id
        for e in events:
            self._status(e)
        await self._flush(self._take())

    def _next_deadline(self) -> float:
        return self.core.next_deadline

    async def _tick(self, now: float) -> None:
        for e in self.core.tick(now):
            self._status(e)
        await self._flush(self._take())

    async def _write(self, command: WriteCommand) -> Any:
        self._check_open()
        self._check_size(command)
        result = self.core.execute(command, _clock())
        await self._wrote()
        return result

    async def put(self, key: Any, value: Any, *, expiry: float | None = None) -> None:
        """Set ``key`` to ``value``; ``expiry``: seconds from now (None: never). Resets the expiry.

        Applied (and for SQLite synced to disk) when it returns; the broadcast is queued.
        """
        if self.closed:
            self._check_open()
        if not isinstance(value, _SCALARS) or not isinstance(key, _SCALARS):
            self._check_size(Put(key, value, expiry))
        self.core.execute(Put(key, value, expiry), _clock())
        await self._wrote()

    async def put_unique(self, key: Any, value: Any, *, expiry: float | None = None) -> bool:
        """Put only if ``key`` is absent (or expired); return whether it inserted."""
        return bool(await self._write(PutUnique(key, value, expiry, self.id, 0)))

    # reads: local, never stale
    async def get(self, key: Any) -> Any:
        """The value of ``key``; raises NoSuchKey (absent or expired) or BackendError."""
        return self.get_nowait(key)

    def get_nowait(self, key: Any) -> Any:
        self._check_open()
        entry = self.observed.get_entry(key)
        if entry is None or (entry.expiry is not None and entry.expiry <= _clock()):
            raise NoSuchKey(key)
        return entry.value

    async def exists(self, key: Any) -> bool:
        try:
            self.get_nowait(key)
        except NoSuchKey:
            return False
        return True

    async def keys(self) -> list[Any]:
        self._check_open()
        return self.observed.keys()

    def __repr__(self) -> str:
        return f"<MasterStore {self.name!r} {self.id}>"


# -- clone ---------------------------------------------------------------------------------------------


class CloneStore(_Handle):
    """A clone of store ``name``: reads local (``Stale`` while not synchronised), writes via the master."""

    role = "clone"

    def __init__(self, ep: Endpoint, name: str, *, config: ch.ChannelConfig, faults: Faults | None,
                 event_buffer: int, write_buffer: int, request_timeout: float) -> None:
        super().__init__(ep, name, config=config, faults=faults, event_buffer=event_buffer)
        self.observed = _Observed(MemoryBackend(), name)
        self.write_buffer = write_buffer
        self.request_timeout = request_timeout
        self._incarnation = 0
        self._left: set[str] = {""}
        self._waiters: dict[int, _Waiter] = {}
        self._next_query = 0.0
        self._stale = True
        self.core = self._make_core("", _clock())

    def _make_core(self, master: str, now: float) -> Clone:
        core = Clone(self.name, self.id, master, now, backend=self.observed,  # type: ignore[arg-type]
                     config=self.config, write_buffer=self.write_buffer, request_timeout=self.request_timeout,
                     incarnation=self._incarnation)
        self._incarnation += 1
        self.observed.clone = core
        return core

    def _prefixes(self) -> tuple[str, ...]:
        return (self._t_master, self._t_answers)

    @property
    def stale(self) -> bool:
        """Not synchronised with a master: reads raise Stale (unless ``allow_stale=True``)."""
        return self.core.stale

    @property
    def master(self) -> str | None:
        """The id of the master this clone is bound to (None before discovery)."""
        return self.core.master or None

    def _core_idle(self) -> bool:
        return self.core.idle

    async def _send(self, env: Envelope) -> None:
        if not env.to:
            return  # no master known yet: the channel repeats once there is one
        # Published on the topic (only masters subscribe to it; the message names its master):
        # the endpoint batches topic deliveries, while unicasts reach subscribers one by one.
        await self.endpoint.send_node(Kind.COMMAND, self._t_clones, env.message.to_wire())

    async def _query(self, now: float) -> None:
        self._next_query = now + self.config.heartbeat_interval
        await self.endpoint.send_node(Kind.COMMAND, self._t_clones, ["store_query", self.id])

    def _switch(self, master: str, now: float) -> None:
        """Bind to a new master: fresh core on the same copy; re-queue unacknowledged writes."""
        old = self.core
        self._left.add(old.master)
        pending: list[Any] = []
        writer = old._writer
        if writer is not None:
            acked = writer.acked(old.master) if old.master in writer.consumers else 0
            pending = writer.buffered_payloads(acked)
        self.core = self._make_core(master, now)
        moved: dict[int, _Waiter] = {}
        for payload in pending:
            cmd = decode_command(payload)
            rid = self.core.execute(cmd, now)  # type: ignore[arg-type]
            if isinstance(cmd, PutUnique) and rid is not None and cmd.request_id in self._waiters:
                moved[rid] = self._waiters.pop(cmd.request_id)
        for waiter in self._waiters.values():  # answered by the old master, answer lost
            waiter.error = Stale(f"master of {self.name!r} changed before it answered; outcome unknown")
            waiter.event.set()
        self._waiters = moved
        self._status(MasterFound(self.name, master))
        self._update_stale("attaching to master " + master)

    def _update_stale(self, reason: str) -> None:
        if self.core.stale != self._stale:
            self._stale = self.core.stale
            self._status(StaleChanged(self.name, self._stale, reason))

    def _events(self, events: list[Any], now: float) -> bool:
        """Handle core events; return True if the clone should look for a master now."""
        look = False
        for e in events:
            match e:
                case Synced():
                    self._update_stale("synchronised")
                case WentStale(reason=reason):
                    self._update_stale(reason)
                    look = True
                case PutUniqueAnswered(request_id=rid, inserted=inserted):
                    w = self._waiters.pop(rid, None)
                    if w is not None:
                        w.result = inserted
                        w.event.set()
                case RequestError(request_id=rid, error=error):
                    w = self._waiters.pop(rid, None)
                    if w is not None:
                        w.error = error
                        w.event.set()
                case WriteFailed(error=error):
                    self._status(WriteRejected(self.name, error))
        return look

    async def _deliver(self, msg: Any, origin: Any, now: float) -> None:
        match msg:
            case _MasterIs(master=master):
                if master != self.core.master and master not in self._left:
                    self._switch(master, now)
                    await self._flush(self._take())
                return
            case _Query():
                return
            case ch.Event(producer=p) | ch.EventBatch(producer=p) | ch.Heartbeat(producer=p) \
                    | ch.Handshake(producer=p) | ch.RetransmitFailed(producer=p):
                if p != self.core.master:
                    if p in self._left or "/w" in p:
                        return
                    self._switch(p, now)
        try:
            events = self.core.handle(msg, now)
        except (ch.ChannelError, StoreError):  # a peer broke the protocol; state is unchanged
            self.malformed += 1
            events = []
        look = self._events(events, now)
        await self._flush(self._take())
        if look:
            await self._query(now)

    def _next_deadline(self) -> float:
        deadline = self.core.next_deadline
        if self.core.stale:
            deadline = min(deadline, self._next_query)
        return deadline

    async def _tick(self, now: float) -> None:
        look = self._events(self.core.tick(now), now)
        await self._flush(self._take())
        if look or (self.core.stale and now >= self._next_query):
            await self._query(now)

    async def _setup(self, sub: Any) -> None:
        await self._query(_clock())

    def _fail_waiters(self) -> None:
        for w in self._waiters.values():
            w.error = StoreError(f"clone of {self.name!r} closed before the master answered")
            w.event.set()
        self._waiters.clear()

    # writes

    def _precheck(self, command: WriteCommand) -> None:
        """Refuse at once what the master would refuse, judged on the local copy.

        Only while synced with no own write in flight (else the copy may not show that write yet,
        and the master alone judges: a failure there comes back as a WriteRejected status event).
        """
        if type(command) in _UNCHECKED or self.core.stale or self.core.unacked_writes:
            return
        entry = self.observed.get_entry(command.key)
        _new_value(None if entry is None else entry.value, entry is not None, command)

    async def _write(self, command: WriteCommand) -> Any:
        self._check_open()
        self._check_size(command)
        self._precheck(command)
        rid = self.core.execute(command, _clock())
        await self._wrote()
        return rid

    async def put_unique(self, key: Any, value: Any, *, expiry: float | None = None) -> bool:
        """Put only if ``key`` is absent at the master; return whether it inserted (a round trip).

        Raises Timeout after ``request_timeout`` (the outcome is then unknown), the master's
        error, or WriteBufferFull. Cancelling leaves the write queued.
        """
        self._check_open()
        rid = self.core.put_unique(key, value, _clock(), expiry=expiry)
        waiter = self._waiters[rid] = _Waiter()
        # sent at once, never held for a burst: its caller waits, and concurrent callers' requests
        # overlap best one by one (measured: holding them for a batch halved the rate)
        await self._flush(self._take())
        await waiter.event.wait()
        if waiter.error is not None:
            raise waiter.error
        return bool(waiter.result)

    # reads

    async def get(self, key: Any, *, allow_stale: bool = False) -> Any:
        """The local value of ``key``; raises NoSuchKey, or Stale while not synchronised."""
        self._check_open()
        return self.core.get(key, allow_stale=allow_stale)

    def get_nowait(self, key: Any, *, allow_stale: bool = False) -> Any:
        self._check_open()
        return self.core.get(key, allow_stale=allow_stale)

    async def exists(self, key: Any, *, allow_stale: bool = False) -> bool:
        self._check_open()
        return self.core.exists(key, allow_stale=allow_stale)

    async def keys(self, *, allow_stale: bool = False) -> list[Any]:
        self._check_open()
        return self.core.keys(allow_stale=allow_stale)

    async def await_synced(self, timeout: float | None = None) -> bool:
        """Wait until the clone holds a snapshot from a master (not stale); False on timeout."""
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while self.core.stale:
                if self.closed:
                    return False
                self._changed = anyio.Event() if self._changed.is_set() else self._changed
                await self._changed.wait()
            return True
        return False

    def __repr__(self) -> str:
        return f"<CloneStore {self.name!r} {self.id} master={self.core.master or None} stale={self.stale}>"


# -- attaching -----------------------------------------------------------------------------------------


def _config(channel: ch.ChannelConfig | None) -> ch.ChannelConfig:
    return channel if channel is not None else DEFAULT_CHANNEL


@attaching
async def attach_master(ep: Endpoint, name: str, *, backend: str | Backend = "memory",
                        path: str | Path | None = None, channel: ch.ChannelConfig | None = None,
                        discovery_timeout: float = 0.25, faults: Faults | None = None,
                        event_buffer: int = DEFAULT_EVENT_BUFFER) -> MasterStore:
    """Attach the master of store ``name`` to ``ep``; it lives until ``close()`` or the endpoint ends.

    ``backend``: ``"memory"``, ``"sqlite"`` (with ``path``) or a :class:`Backend`. Waits
    ``discovery_timeout`` for another master; raises :class:`MasterExists` if one answers, and
    :class:`BackendError` if the backend cannot be opened. The master owns the backend (also one
    passed in): it is closed when the master detaches, and when attaching fails or is cancelled.
    """
    if isinstance(backend, str):
        if backend == "memory":
            store_backend: Backend = MemoryBackend()
        elif backend == "sqlite":
            if path is None:
                raise ValueError("backend='sqlite' needs path=")
            store_backend = SQLiteBackend(path)
        else:
            raise ValueError(f"unknown backend {backend!r} (memory or sqlite)")
    else:
        store_backend = backend
    observed: _Observed | None = None
    try:
        handle = MasterStore(ep, name, store_backend, config=_config(channel), faults=faults,
                             event_buffer=event_buffer, discovery_timeout=discovery_timeout)
        observed = handle.observed
        # the service closes the backend when it ends; but a service that never ran (the endpoint
        # is closed, or this call was cancelled before the task's first step) cannot
        result: MasterStore = await ep.start_service(handle._service)
    except BaseException:
        if observed is not None:
            observed.close()  # once, whether or not the service got to close it
        else:
            store_backend.close()
        raise
    return result


@attaching
async def attach_clone(ep: Endpoint, name: str, *, channel: ch.ChannelConfig | None = None,
                       write_buffer: int = DEFAULT_WRITE_BUFFER, request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                       faults: Faults | None = None, event_buffer: int = DEFAULT_EVENT_BUFFER,
                       wait: float | None = None) -> CloneStore:
    """Attach a clone of store ``name`` to ``ep``. Returns at once (stale until synchronised), or
    after at most ``wait`` seconds of waiting for the first snapshot (still stale if none came)."""
    handle = CloneStore(ep, name, config=_config(channel), faults=faults, event_buffer=event_buffer,
                        write_buffer=write_buffer, request_timeout=request_timeout)
    result: CloneStore = await ep.start_service(handle._service)
    if wait is not None:
        await result.await_synced(wait)
    return result

