"""The master of an attached store: :class:`MasterStore` and ``attach_master(ep, name)`` (``docs/stores.md`` § 6).

Theory of operation: a :class:`MasterStore` is a :class:`.StoreHandle` around a sans-io
:class:`.Master`. Reads and writes apply to its backend at once; the core broadcasts them to the
clones on ``/$store/<name>/m``. Discovery: node ids are ``<endpoint uuid hex>.<random incarnation>``,
so a restarted master is a new channel producer. Before it serves, a master asks
``["store_query", id]`` and waits ``discovery_timeout``: an answer from another master raises
:class:`.MasterExists`; otherwise it announces ``["store_master", id]`` and answers every later
query (to the asking endpoint only). Another master's announcement is reported once as a
:class:`.MasterConflict` status event. Master operations raise their errors at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from .. import channel as ch
from ..endpoint.attaching import attaching
from ..wire.message import Kind
from .backend import Backend, MemoryBackend
from .clock import clock
from .commands import Put, PutUnique, WriteCommand
from .discovery import MasterIs, Query, decode_store_message
from .errors import MasterExists, NoSuchKey, StoreDecodeError, StoreError
from .events import MasterConflict
from .faults import Faults
from .handle import DEFAULT_EVENT_BUFFER, SCALARS, StoreHandle, channel_config
from .master import Envelope, Master
from .node_ids import endpoint_or_none
from .observed import ObservedBackend
from .sqlite_backend import SQLiteBackend

if TYPE_CHECKING:
    from ..endpoint.endpoint import Endpoint

__all__ = ["MasterStore", "attach_master"]


class MasterStore(StoreHandle):
    """The master of store ``name`` on an endpoint. Reads and writes apply here at once."""

    role = "master"

    def __init__(self, ep: Endpoint, name: str, backend: Backend, *, config: ch.ChannelConfig,
                 faults: Faults | None, event_buffer: int, discovery_timeout: float) -> None:
        super().__init__(ep, name, config=config, faults=faults, event_buffer=event_buffer)
        self.observed = ObservedBackend(backend, name)
        self.observed.publisher = ep.id
        self._discovery_timeout = discovery_timeout
        self._conflicts: set[str] = set()
        self.core = Master(name, self.id, self.observed, clock(), config=config)

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
        await self.endpoint.send_node(Kind.COMMAND, self._t_clones, Query(self.id).to_wire())
        with anyio.move_on_after(self._discovery_timeout):
            async for msg in sub:
                try:
                    m = decode_store_message(msg.data)
                except (StoreDecodeError, ch.ChannelDecodeError):
                    continue
                if isinstance(m, MasterIs) and m.master != self.id:
                    raise MasterExists(f"store {self.name!r} already has master {m.master}")
        await self.endpoint.send_node(Kind.COMMAND, self._t_answers, MasterIs(self.id).to_wire())

    async def _send(self, env: Envelope) -> None:
        wire = env.message.to_wire()
        if env.to is None:
            await self.endpoint.send_node(Kind.COMMAND, self._t_master, wire)
        elif (peer := endpoint_or_none(env.to)) is not None:  # a clone id not naming an endpoint: dropped
            await self.endpoint.send_node(Kind.COMMAND, self._t_master, wire, receivers=(peer,))

    async def _deliver(self, msg: Any, origin: Any, now: float) -> None:
        match msg:
            case Query(asker=asker):
                if asker != self.id:
                    await self.endpoint.send_node(Kind.COMMAND, self._t_answers, MasterIs(self.id).to_wire(),
                                                  receivers=(origin.sender,))
                return
            case MasterIs(master=other):
                if other != self.id and other not in self._conflicts:
                    self._conflicts.add(other)
                    self._status(MasterConflict(self.name, other))
                return
            case ch.Event(producer=producer) | ch.EventBatch(producer=producer) | ch.Handshake(producer=producer) \
                    | ch.RetransmitFailed(producer=producer):
                self.observed.publisher = endpoint_or_none(producer)
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
        result = self.core.execute(command, clock())
        await self._wrote()
        return result

    async def put(self, key: Any, value: Any, *, expiry: float | None = None) -> None:
        """Set ``key`` to ``value``; ``expiry``: seconds from now (None: never). Resets the expiry.

        Applied (and for SQLite synced to disk) when it returns; the broadcast is queued.
        """
        if self.closed:
            self._check_open()
        if not isinstance(value, SCALARS) or not isinstance(key, SCALARS):
            self._check_size(Put(key, value, expiry))
        self.core.execute(Put(key, value, expiry), clock())
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
        if entry is None or (entry.expiry is not None and entry.expiry <= clock()):
            raise NoSuchKey(key)
        return entry.value

    async def exists(self, key: Any) -> bool:
        return self.exists_nowait(key)

    def exists_nowait(self, key: Any) -> bool:
        try:
            self.get_nowait(key)
        except NoSuchKey:
            return False
        return True

    async def keys(self) -> list[Any]:
        return self.keys_nowait()

    def keys_nowait(self) -> list[Any]:
        self._check_open()
        return self.observed.keys()

    def __repr__(self) -> str:
        return f"<MasterStore {self.name!r} {self.id}>"



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
    observed: ObservedBackend | None = None
    try:
        handle = MasterStore(ep, name, store_backend, config=channel_config(channel), faults=faults,
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
