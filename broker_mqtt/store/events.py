"""The events of attached master and clone stores (``docs/stores.md`` § 6): one frozen dataclass each.

* Data events (:data:`StoreEvent`), yielded by ``store.events()`` in the order changes are applied
  at that replica: :class:`Inserted`, :class:`Updated`, :class:`Erased`, :class:`Expired`, and
  :class:`EventsDropped` when a stream fell behind its buffer.
* Status events (:data:`StoreStatus`), yielded by ``store.status()``: :class:`StaleChanged`,
  :class:`MasterFound`, :class:`MasterConflict`, :class:`WriteRejected`, and the master core's
  :class:`.CloneAttached`, :class:`.CloneLost`, :class:`.RemoteWriteFailed`, :class:`.WritesLost`.
* :class:`StoreStatistics`: the counters of a handle (``store.statistics()``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from .errors import StoreError
from .master import CloneAttached, CloneLost, RemoteWriteFailed, WritesLost

__all__ = [
    "Inserted", "Updated", "Erased", "Expired", "EventsDropped", "StoreEvent", "StaleChanged", "MasterFound",
    "MasterConflict", "WriteRejected", "StoreStatus", "StoreStatistics",
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

