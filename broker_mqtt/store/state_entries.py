"""A whole state's entries as a :class:`~.versioned.VersionedState` holds them, built one at a time.

:class:`StateEntries` is what a streamed snapshot decodes its chunks into as they arrive
(:mod:`.snapshot_stream`) and what :meth:`~.versioned.VersionedState.adopt` takes over at the install,
dicts and all: the decoding work is spread over the chunks, not done in one step at the end.
"""

from __future__ import annotations

from typing import Any

from .history import Stamps, Version

__all__ = ["StateEntries"]

_ABSENT: Any = object()


class StateEntries:
    """A whole state's entries in the form a :class:`VersionedState` holds them, built one entry at a
    time (a snapshot as its chunks arrive), for :meth:`VersionedState.adopt`: live keys (packed key ->
    value, stamp, expiry) and tombstones (packed key -> (hlc, stamp)); the later entry of a key
    replaces the earlier."""

    __slots__ = ("stamper", "values", "stamps", "expiring", "dead")

    def __init__(self) -> None:
        self.stamper = Stamps()
        self.values: dict[bytes, Any] = {}
        self.stamps: dict[bytes, int] = {}
        self.expiring: dict[bytes, float] = {}
        self.dead: dict[bytes, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self.values) + len(self.dead)

    def set(self, k: bytes, v: Version) -> None:
        """Key ``k`` (packed canonically) is at version ``v``. Raises StoreDecodeError for a seq out
        of range (nothing changed)."""
        stamp = self.stamper.stamp(v.hlc, v.origin, v.seq)
        if v.deleted:
            if self.values.pop(k, _ABSENT) is not _ABSENT:
                del self.stamps[k]
                self.expiring.pop(k, None)
            self.dead[k] = (v.hlc, stamp)
            return
        if self.dead:
            self.dead.pop(k, None)
        self.values[k] = v.value
        self.stamps[k] = stamp
        if v.expiry is not None:
            self.expiring[k] = v.expiry
        elif self.expiring:
            self.expiring.pop(k, None)

    def drop(self, k: bytes) -> None:
        """Key ``k`` is not in the state (a later pass of the snapshot found it gone)."""
        if self.values.pop(k, _ABSENT) is not _ABSENT:
            del self.stamps[k]
            self.expiring.pop(k, None)
        self.dead.pop(k, None)
