"""Joining an elected store on an endpoint: :func:`attach_store` (``docs/elected-stores.md`` § 1).

It checks the options, opens the replica's state (a SQLite file in a worker thread: a large one takes
long to load), derives the replica's timings from the election's, and starts the store's service on
the endpoint (:class:`~.elected.ElectedStore`). One replica of a store per endpoint.
"""

from __future__ import annotations

import dataclasses
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ..endpoint.attaching import attaching
from ..errors import UsageError
from .clock import clock
from .elected import ElectedStore, _replicas
from .replica_events import TOMBSTONE_TTL
from .replication import Durability, Replica, ReplicaConfig
from .versioned import Clock, Resolver, VersionedState, last_writer_wins
from .versioned_disk import open_disk_state
from .versioned_sqlite import open_state

if TYPE_CHECKING:
    from ..endpoint.endpoint import Endpoint

__all__ = ["attach_store"]


async def _open_state(path: str | Path, resident: str) -> VersionedState:
    """``open_state(path)`` (``resident="disk"``: ``open_disk_state(path)``) in a worker thread: a large
    file takes long to load (60 s for 10,000,000 keys), and on the event loop that was as long without
    keepalive or heartbeat (the connection dropped). Cancelled, it waits for the open to end and closes
    the state again."""
    opened: list[VersionedState] = []

    def opening() -> VersionedState:
        state = open_disk_state(path) if resident == "disk" else open_state(path)
        opened.append(state)
        return state

    try:
        return await anyio.to_thread.run_sync(opening)
    except BaseException:
        for state in opened:
            state.close()
        raise


@attaching
async def attach_store(
    ep: Endpoint,
    name: str,
    *,
    backend: str = "memory",
    path: str | Path | None = None,
    resident: str = "memory",
    election: dict[str, Any] | None = None,
    mode: str = "sticky",
    durability: str = "one",
    resolver: Resolver = last_writer_wins,
    write_timeout: float = 30.0,
    config: ReplicaConfig | None = None,
    allow_short_cycle: bool = False,
    candidate: bool = True,
    tombstone_ttl: float | None = TOMBSTONE_TTL,
) -> ElectedStore:
    """Join elected store ``name`` on ``ep``; see :class:`ElectedStore` and ``docs/elected-stores.md``.

    ``backend``: ``"memory"`` or ``"sqlite"`` (with ``path``: survives restarts). ``resident``, with
    ``"sqlite"``: where the entries are kept while the store runs, ``"memory"`` (default: all of them,
    loaded at open; the file is their durable copy) or ``"disk"`` (in the file only, read and written
    there: memory stays flat whatever the store's size, writes cost a few µs more each; for stores
    larger than the memory, docs/elected-stores.md § 3). ``election``: the
    actor's configuration (``cycle``, ``gap``, ...; default cycle 10 s, gap 1.5 s). ``mode``:
    ``"sticky"`` (the master keeps the role while it lives) or ``"rotate"`` (a new master every slot).
    ``durability``: ``"one"`` (default: the master and one other replica), ``"master"``, ``"all"``.
    ``resolver``: how a healed split picks the version of a key both sides wrote (default: last
    writer wins); it runs at the claimant only, gets ``(key, a, b)`` (copies, ``a`` the later write)
    and returns one of them, possibly with another value (``dataclasses.replace(a, value=...)``). An
    answer that raises or that no replica can hold is refused: last writer wins decides that key,
    logged at ERROR and counted (``statistics().resolver_errors``). A resolver that also has
    ``merged(versions, conflicts)`` (:class:`~.state_merge.MergeHook`) may keep, under new keys, what it did
    not choose (docs/elected-stores.md).
    ``candidate=False``: a replica that never becomes master and stays out of the election (it
    follows, reads locally, writes, and confirms writes for durability). ``tombstone_ttl``: the
    master forgets an erased key's tombstone this many seconds after the erase (None: never; it
    replaces ``config``'s; a split longer than this can bring an erased key back, see the docs'
    § 6). Raises ValueError for bad
    options, UsageError (a ValueError) while this endpoint holds an open replica of ``name``, and
    BackendError if the SQLite file cannot be opened. The file is closed when the store closes, and
    when joining fails or is cancelled.
    """
    if mode not in ("sticky", "rotate"):
        raise ValueError(f"mode must be 'sticky' or 'rotate', not {mode!r}")
    if backend not in ("memory", "sqlite"):
        raise ValueError(f"backend must be 'memory' or 'sqlite', not {backend!r}")
    if backend == "sqlite" and path is None:
        raise ValueError("backend='sqlite' needs a path")
    if resident not in ("memory", "disk"):
        raise ValueError(f"resident must be 'memory' or 'disk', not {resident!r}")
    if resident == "disk" and backend != "sqlite":
        raise ValueError("resident='disk' needs backend='sqlite'")
    if not name or "/" in name or "+" in name or "#" in name:
        raise ValueError(f"bad store name {name!r}")
    durability = Durability(durability).value
    held = _replicas.setdefault(ep, set())
    if name in held:
        raise UsageError(f"this endpoint already holds a replica of store {name!r}: use that handle (or a "
                         "StoreWriter, which keeps no replica)")
    election = dict(election or {})
    from asyncactor import Config

    gap = Config.from_mapping(election, allow_short_cycle=allow_short_cycle).gap
    if config is None:  # timings follow the election's: a handover should not outlast a slot
        hb = min(0.25, gap / 2)
        config = ReplicaConfig(heartbeat=hb, member_timeout=4 * hb, claim_timeout=max(4 * hb, gap),
                               write_timeout=write_timeout, tombstone_ttl=tombstone_ttl)
    elif config.tombstone_ttl != tombstone_ttl:
        config = dataclasses.replace(config, tombstone_ttl=tombstone_ttl)
    held.add(name)
    state: VersionedState | None = None
    try:
        state = await _open_state(path, resident) if backend == "sqlite" and path is not None else VersionedState()
        node_id = f"{ep.id.hex}.{secrets.token_hex(4)}"
        replica = Replica(name, node_id, state, anyio.current_time(), durability=durability, config=config,
                          resolver=resolver, clock=Clock(clock))
        store = ElectedStore(ep, name, replica, mode=mode, election=election,
                             allow_short_cycle=allow_short_cycle, candidate=candidate)
        await ep.start_service(store._service)
    except BaseException:
        # the service closes the state when it ends; one that never ran (the endpoint is closed, or
        # this call was cancelled before the task's first step) cannot. close() is idempotent.
        held.discard(name)
        if state is not None:
            state.close()
        raise
    return store
