"""The events of attached stores, master/clone and elected (``docs/stores.md`` § 6,
``docs/elected-stores.md`` § 7): one frozen dataclass each, one name per concept for every store kind.

* Data events (:data:`StoreEvent`), yielded by ``store.events()`` in the order changes are applied
  at that replica: :class:`Inserted`, :class:`Updated`, :class:`Erased`, :class:`Expired`, and
  :class:`EventsDropped` when a stream fell behind its buffer.
* Status events of master and clone stores (:data:`StoreStatus`), yielded by ``store.status()``:
  :class:`StaleChanged`, :class:`MasterChanged`, :class:`MasterConflict`, :class:`WriteRejected`, and
  the master core's :class:`.CloneAttached`, :class:`.CloneLost`, :class:`.RemoteWriteFailed`,
  :class:`.WritesLost`.
* Elected stores yield data and status events on one stream (:data:`ElectedEvent`):
  :class:`MasterChanged`, :class:`ConflictResolved`, :class:`StaleChanged` among the data events, and
  :class:`StoreFailed` last when the replica's file failed.
* :class:`StoreStatistics`: the counters of a master or clone handle (``store.statistics()``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import BackendError, StoreError
from .master import CloneAttached, CloneLost, RemoteWriteFailed, WritesLost

if TYPE_CHECKING:
    from .versioned import Epoch, Version

__all__ = [
    "Inserted", "Updated", "Erased", "Expired", "EventsDropped", "StoreEvent", "StaleChanged", "MasterChanged",
    "MasterConflict", "WriteRejected", "StoreStatus", "StoreStatistics", "ConflictResolved", "StoreFailed",
    "ElectedEvent",
]


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
    """The local copy became stale (``stale=True``: a clone's reads raise :class:`Stale`; an elected
    replica is not known to be up to date with its master) or current again."""

    store: str
    stale: bool
    reason: str


@dataclass(frozen=True, slots=True)
class MasterChanged:
    """Node ``master`` now holds the store. A clone bound itself to it (first discovery, or a
    restarted master; ``epoch`` None); an elected store's master since ``epoch`` (``master`` None:
    none active, e.g. during a handover)."""

    store: str
    master: str | None
    epoch: Epoch | None


@dataclass(frozen=True, slots=True)
class ConflictResolved:
    """``key`` of an elected store was written on both sides of a healed split; ``chosen`` won over
    ``other``."""

    store: str
    key: Any
    chosen: Version
    other: Version


@dataclass(frozen=True, slots=True)
class StoreFailed:
    """An elected replica stopped because what it applied could not be stored (``error``: the
    :class:`BackendError`: a full disk, an I/O error). The last event of its streams, held even by a
    stream that fell behind; they end after it. Writes it had not answered fail with
    :class:`Timeout` (outcome unknown: the master may have applied them), later ones raise
    ``error``; the endpoint and its other stores go on, and the other replicas elect a master as
    after a handover. ``await store.close()`` (it returns once the replica stopped), then attach the
    store again once the file can be written: it loads what was committed and catches up."""

    store: str
    error: BackendError


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


StoreStatus = StaleChanged | MasterChanged | MasterConflict | WriteRejected | CloneAttached | CloneLost \
    | RemoteWriteFailed | WritesLost


ElectedEvent = Inserted | Updated | Erased | Expired | MasterChanged | ConflictResolved | StaleChanged | EventsDropped \
    | StoreFailed
