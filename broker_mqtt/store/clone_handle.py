"""A clone of an attached store: :class:`CloneStore` and ``attach_clone(ep, name)`` (``docs/stores.md`` § 6).

Theory of operation: a :class:`CloneStore` is a :class:`.StoreHandle` around a sans-io
:class:`.Clone`, on a local copy in memory. Reads are local (``Stale`` while not synchronised).
Discovery: a clone asks ``["store_query", id]`` whenever it is stale (every heartbeat interval)
and switches to any master id it learns (answer, announcement, or a broadcast from a new producer
on ``/$store/<name>/m``) that is not one it left: it builds a new core on the same local copy and
re-queues there every write the old master had not acknowledged (at-least-once across a master
restart), then resyncs by snapshot. Errors: writes are checked against the local copy
(``TypeClash``/``NoSuchKey``, :meth:`.Clone.precheck`) and otherwise are accepted for the master
(``WriteBufferFull`` past the bound); ``put_unique`` waits for the master's answer or raises
``Timeout``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from .. import channel as ch
from ..endpoint.attaching import attaching
from ..wire.message import Kind
from .backend import MemoryBackend
from .clock import clock
from .clone import (
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_WRITE_BUFFER,
    Clone,
    CloneWriteFailed,
    PutUniqueAnswered,
    RequestError,
    Synced,
    WentStale,
)
from .commands import PutUnique, WriteCommand
from .discovery import MasterIs, Query
from .errors import Stale, StoreError
from .events import MasterChanged, StaleChanged, WriteRejected
from .faults import Faults
from .handle import DEFAULT_EVENT_BUFFER, StoreHandle, channel_config
from .master import Envelope
from .observed import ObservedBackend

if TYPE_CHECKING:
    from ..endpoint.endpoint import Endpoint

__all__ = ["CloneStore", "attach_clone"]


class _Waiter:
    __slots__ = ("event", "result", "error")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class CloneStore(StoreHandle):
    """A clone of store ``name``: reads local (``Stale`` while not synchronised), writes via the master."""

    role = "clone"

    def __init__(self, ep: Endpoint, name: str, *, config: ch.ChannelConfig, faults: Faults | None,
                 event_buffer: int, write_buffer: int, request_timeout: float) -> None:
        super().__init__(ep, name, config=config, faults=faults, event_buffer=event_buffer)
        self.observed = ObservedBackend(MemoryBackend(), name)
        self.write_buffer = write_buffer
        self.request_timeout = request_timeout
        self._incarnation = 0
        self._left: set[str] = {""}
        self._waiters: dict[int, _Waiter] = {}
        self._next_query = 0.0
        self._stale = True
        self.core = self._make_core("", clock())

    def _make_core(self, master: str, now: float) -> Clone:
        core = Clone(self.name, self.id, master, now, backend=self.observed,
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
        await self.endpoint.send_node(Kind.COMMAND, self._t_clones, Query(self.id).to_wire())

    def _switch(self, master: str, now: float) -> None:
        """Bind to a new master: fresh core on the same copy; re-queue unacknowledged writes."""
        old = self.core
        self._left.add(old.master)
        pending = old.unacknowledged()
        self.core = self._make_core(master, now)
        moved: dict[int, _Waiter] = {}
        for cmd in pending:
            rid = self.core.execute(cmd, now)  # type: ignore[arg-type]  # unacknowledged() holds only writes
            if isinstance(cmd, PutUnique) and rid is not None and cmd.request_id in self._waiters:
                moved[rid] = self._waiters.pop(cmd.request_id)
        for waiter in self._waiters.values():  # answered by the old master, answer lost
            waiter.error = Stale(f"master of {self.name!r} changed before it answered; outcome unknown")
            waiter.event.set()
        self._waiters = moved
        self._status(MasterChanged(self.name, master, None))
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
                case CloneWriteFailed(error=error):
                    self._status(WriteRejected(self.name, error))
        return look

    async def _deliver(self, msg: Any, origin: Any, now: float) -> None:
        match msg:
            case MasterIs(master=master):
                if master != self.core.master and master not in self._left:
                    self._switch(master, now)
                    await self._flush(self._take())
                return
            case Query():
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
        await self._query(clock())

    def _fail_waiters(self) -> None:
        for w in self._waiters.values():
            w.error = StoreError(f"clone of {self.name!r} closed before the master answered")
            w.event.set()
        self._waiters.clear()

    # writes

    async def _write(self, command: WriteCommand) -> Any:
        self._check_open()
        self._check_size(command)
        self.core.precheck(command)
        rid = self.core.execute(command, clock())
        await self._wrote()
        return rid

    async def put_unique(self, key: Any, value: Any, *, expiry: float | None = None) -> bool:
        """Put only if ``key`` is absent at the master; return whether it inserted (a round trip).

        Raises Timeout after ``request_timeout`` (the outcome is then unknown), the master's
        error, or WriteBufferFull. Cancelling leaves the write queued.
        """
        self._check_open()
        self._check_size(PutUnique(key, value, expiry, "", 0))
        rid = self.core.put_unique(key, value, clock(), expiry=expiry)
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

    def exists_nowait(self, key: Any, *, allow_stale: bool = False) -> bool:
        self._check_open()
        return self.core.exists(key, allow_stale=allow_stale)

    async def keys(self, *, allow_stale: bool = False) -> list[Any]:
        self._check_open()
        return self.core.keys(allow_stale=allow_stale)

    def keys_nowait(self, *, allow_stale: bool = False) -> list[Any]:
        self._check_open()
        return self.core.keys(allow_stale=allow_stale)

    async def await_synced(self, timeout: float | None = None) -> bool:
        """Wait until the clone holds a snapshot from a master (not stale); False on timeout."""
        return await self._wait_until(lambda: not self.core.stale, timeout)

    def __repr__(self) -> str:
        return f"<CloneStore {self.name!r} {self.id} master={self.core.master or None} stale={self.stale}>"



@attaching
async def attach_clone(ep: Endpoint, name: str, *, channel: ch.ChannelConfig | None = None,
                       write_buffer: int = DEFAULT_WRITE_BUFFER, request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                       faults: Faults | None = None, event_buffer: int = DEFAULT_EVENT_BUFFER,
                       wait: float | None = None) -> CloneStore:
    """Attach a clone of store ``name`` to ``ep``. Returns at once (stale until synchronised), or
    after at most ``wait`` seconds of waiting for the first snapshot (still stale if none came)."""
    handle = CloneStore(ep, name, config=channel_config(channel), faults=faults, event_buffer=event_buffer,
                        write_buffer=write_buffer, request_timeout=request_timeout)
    result: CloneStore = await ep.start_service(handle._service)
    if wait is not None:
        await result.await_synced(wait)
    return result

