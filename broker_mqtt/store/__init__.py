"""Zeek Broker data stores over MQTT: one master, many clones (sans-io core; ``docs/stores.md``).

This package exports the user API: attaching stores, their handles, backends, events, statistics,
configuration, resolvers, custom commands and errors. Wire and protocol types stay in their modules:

- :mod:`.backend`: where a replica keeps its data (memory, SQLite);
- :mod:`.commands`: the commands and control messages and their wire form;
- :mod:`.master`, :mod:`.clone`: the replica state machines, wired with ``broker_mqtt.channel``;
- :mod:`.errors`: the store errors;
- the anyio I/O layer, store handles attached to an Endpoint: :mod:`.master_handle`
  (``attach_master(ep, name)``), :mod:`.clone_handle` (``attach_clone(ep, name)``), their common
  part :mod:`.handle`, and :mod:`.events` (the events of every store kind), :mod:`.stream` (event
  streams), :mod:`.observed` (a backend that reports changes), :mod:`.faults` (fault injection for
  tests), :mod:`.discovery`, :mod:`.node_ids`, :mod:`.clock`;
- elected stores (``docs/elected-stores.md``): :mod:`.versioned` (replicated state, merge),
  :mod:`.replication` (the sans-io protocol), :mod:`.elected` (``attach_store(ep, name)``),
  :mod:`.writer` (:class:`StoreWriter`, writing without a replica).
"""

from .backend import Backend, Entry, MemoryBackend
from .clone_handle import CloneStore, attach_clone
from .commands import ComputedCommand, register_command
from .elected import ElectedStore
from .elected_attach import attach_store
from .errors import (
    AnswerForgotten,
    BackendError,
    MasterExists,
    NoSuchKey,
    Stale,
    StoreDecodeError,
    StoreError,
    StoreProtocolError,
    Timeout,
    TypeClash,
    WriteBufferFull,
)
from .events import (
    ConflictResolved,
    ElectedEvent,
    Erased,
    EventsDropped,
    Expired,
    Inserted,
    MasterChanged,
    MasterConflict,
    StaleChanged,
    StoreEvent,
    StoreFailed,
    StoreStatistics,
    StoreStatus,
    Updated,
    WriteRejected,
)
from .faults import Faults
from .handle import DEFAULT_CHANNEL
from .master import CloneAttached, CloneLost, RemoteWriteFailed, WritesLost
from .master_handle import MasterStore, attach_master
from .replication import Durability, NoMaster, ReplicaConfig, ReplicaStatistics
from .sqlite_backend import SQLiteBackend
from .state_merge import MergeHook
from .versioned import Version, last_writer_wins
from .writer import StoreWriter

__all__ = [
    # attaching, and the handles
    "attach_master", "attach_clone", "attach_store", "MasterStore", "CloneStore", "ElectedStore", "StoreWriter",
    # backends
    "Backend", "MemoryBackend", "SQLiteBackend", "Entry",
    # events: data, status (master/clone), elected; their unions
    "Inserted", "Updated", "Erased", "Expired", "EventsDropped", "StaleChanged", "MasterChanged",
    "MasterConflict", "WriteRejected", "CloneAttached", "CloneLost", "RemoteWriteFailed", "WritesLost",
    "ConflictResolved", "StoreFailed", "StoreEvent", "StoreStatus", "ElectedEvent",
    # statistics and configuration
    "StoreStatistics", "ReplicaStatistics", "ReplicaConfig", "Durability", "Faults", "DEFAULT_CHANNEL",
    # resolvers and custom commands
    "last_writer_wins", "MergeHook", "Version", "ComputedCommand", "register_command",
    # errors
    "StoreError", "AnswerForgotten", "BackendError", "MasterExists", "NoMaster", "NoSuchKey", "Stale", "StoreDecodeError",
    "StoreProtocolError", "Timeout", "TypeClash", "WriteBufferFull",
]
