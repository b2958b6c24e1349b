"""Zeek Broker data stores over MQTT: one master, many clones (sans-io core; ``docs/stores.md``).

- :mod:`.backend`: where a replica keeps its data (memory, SQLite);
- :mod:`.commands`: the commands and control messages and their wire form;
- :mod:`.master`, :mod:`.clone`: the replica state machines, wired with ``broker_mqtt.channel``;
- :mod:`.errors`: the store errors;
- the anyio I/O layer, store handles attached to an Endpoint: :mod:`.master_handle`
  (``attach_master(ep, name)``), :mod:`.clone_handle` (``attach_clone(ep, name)``), their common
  part :mod:`.handle`, and :mod:`.events` (their events), :mod:`.stream` (event streams),
  :mod:`.observed` (a backend that reports changes), :mod:`.faults` (fault injection for tests),
  :mod:`.discovery`, :mod:`.node_ids`, :mod:`.clock`;
- elected stores (``docs/elected-stores.md``): :mod:`.versioned` (replicated state, merge),
  :mod:`.replication` (the sans-io protocol), :mod:`.elected` (``attach_store(ep, name)``).
"""

from .backend import Backend, Entry, MemoryBackend, SQLiteBackend
from .clone import (
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_WRITE_BUFFER,
    Clone,
    CloneEvent,
    CloneState,
    PutUniqueAnswered,
    RequestError,
    Synced,
    WentStale,
    WriteFailed,
)
from .clone_handle import CloneStore, attach_clone
from .commands import (
    Append,
    AttachClone,
    BroadcastCommand,
    Clear,
    Command,
    CommandKind,
    ComputedCommand,
    ControlMessage,
    Decrement,
    Erase,
    Expire,
    Increment,
    InsertInto,
    Pop,
    Push,
    Put,
    PutUnique,
    PutUniqueResult,
    RemoveFrom,
    RequestFailed,
    WriteCommand,
    decode_broadcast,
    decode_command,
    decode_control,
    register_command,
    snapshot_from_wire,
    snapshot_to_wire,
)
from .elected import Conflict, ElectedEvent, ElectedStore, MasterChange, StaleChange, attach_store
from .errors import (
    BackendError,
    ErrorCode,
    MasterExists,
    NoSuchKey,
    Stale,
    StoreDecodeError,
    StoreError,
    StoreProtocolError,
    Timeout,
    TypeClash,
    WriteBufferFull,
    error_from_wire,
)
from .events import (
    Erased,
    EventsDropped,
    Expired,
    Inserted,
    MasterConflict,
    MasterFound,
    StaleChanged,
    StoreEvent,
    StoreStatistics,
    StoreStatus,
    Updated,
    WriteRejected,
)
from .faults import Faults
from .handle import DEFAULT_CHANNEL
from .master import (
    CloneAttached,
    CloneLost,
    Envelope,
    Master,
    MasterEvent,
    RemoteWriteFailed,
    WritesLost,
    apply_write,
)
from .master_handle import MasterStore, attach_master
from .replication import Durability, NoMaster, Replica, ReplicaConfig, ReplicaStats
from .versioned import Version, VersionedState, last_writer_wins
from .writer import StoreWriter
from .writer_core import WriterCore

__all__ = [
    "Append", "AttachClone", "Backend", "BackendError", "BroadcastCommand", "Clear", "Clone",
    "CloneAttached", "CloneEvent", "CloneLost", "CloneState", "Command", "CommandKind", "ControlMessage",
    "DEFAULT_REQUEST_TIMEOUT", "DEFAULT_WRITE_BUFFER", "Decrement", "Entry", "Envelope", "Erase",
    "ErrorCode", "Expire", "Increment", "InsertInto", "Master", "MasterEvent", "MasterExists",
    "MemoryBackend", "NoSuchKey", "Pop", "Push", "Put", "PutUnique", "PutUniqueAnswered",
    "PutUniqueResult", "RemoteWriteFailed", "RemoveFrom", "RequestError", "RequestFailed",
    "SQLiteBackend", "Stale", "StoreDecodeError", "StoreError", "StoreProtocolError", "Synced",
    "Timeout", "TypeClash", "WentStale", "WriteBufferFull", "WriteFailed", "WriteCommand", "WritesLost",
    "apply_write", "decode_broadcast", "decode_command", "decode_control", "error_from_wire",
    "snapshot_from_wire", "snapshot_to_wire",
    # the I/O layer (master_handle.py, clone_handle.py, events.py, faults.py, handle.py)
    "CloneStore", "DEFAULT_CHANNEL", "Erased", "EventsDropped", "Expired", "Faults", "Inserted",
    "MasterConflict", "MasterFound", "MasterStore", "StaleChanged", "StoreEvent", "StoreStatistics",
    "StoreStatus", "Updated", "WriteRejected", "attach_clone", "attach_master",
    # elected stores
    "Conflict", "Durability", "ElectedEvent", "ElectedStore", "MasterChange", "NoMaster", "Replica",
    "ReplicaConfig", "ReplicaStats", "StaleChange", "StoreWriter", "Version", "VersionedState", "WriterCore",
    "attach_store", "last_writer_wins", "ComputedCommand", "register_command",
]
