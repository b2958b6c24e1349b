"""A backend that reports its changes: the source of an attached store's data events.

:class:`ObservedBackend` wraps the :class:`.Backend` of a replica and is the backend its sans-io
core writes to. While no :class:`.EventStream` listens it only forwards; while one does, every
mutation also becomes :class:`.Inserted` / :class:`.Updated` / :class:`.Erased` /
:class:`.Expired` events, in the order applied. The publisher of a change is the endpoint that
wrote it at the master: at a master, the handle sets ``publisher`` around each call into the core;
at a clone, ``clone`` is the core, whose ``applying`` command tells an erase from an expiry and
names the publishing node. Changes taken from a resync snapshot (``replace_all``) have no known
publisher.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from ..endpoint.event_stream import EventStream
from .backend import Backend, Entry
from .clone import Clone
from .commands import Expire
from .events import Erased, Expired, Inserted, Updated
from .node_ids import endpoint_or_none
from .packing import pack

__all__ = ["ObservedBackend"]


class ObservedBackend:
    """Wraps a backend; when someone listens, turns every mutation into store events."""

    def __init__(self, inner: Backend, store: str) -> None:
        self.inner = inner
        self.store = store
        self.streams: list[EventStream[Any]] = []
        self.publisher: uuid.UUID | None = None  # at a master: who writes now
        self.clone: Clone | None = None  # at a clone: its applying command (Expire vs Erase, publisher)
        self._closed = False

    def _publisher(self) -> uuid.UUID | None:
        """The endpoint that wrote the change being applied."""
        clone = self.clone
        if clone is None:
            return self.publisher
        node = getattr(clone.applying, "publisher", None)  # a broadcast names a clone that wrote
        return endpoint_or_none(clone.master if node is None else node)

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
        old = {pack(e.key): e for e in self.inner.snapshot()}
        self.inner.replace_all(entries, seq=seq)
        for e in entries:
            prev = old.pop(pack(e.key), None)
            if prev is None:
                self._emit(Inserted(self.store, e.key, e.value, None))
            elif prev.value != e.value:
                self._emit(Updated(self.store, e.key, prev.value, e.value, None))
        for prev in old.values():
            self._emit(Erased(self.store, prev.key, prev.value, None))

