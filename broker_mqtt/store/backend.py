"""Storage backends of a data store: where a master (or clone) keeps its key/value pairs.

A backend is a dumb, synchronous map ``key -> (value, expiry)``: it enforces no store semantics
(types, put_unique, ...; those live in ``master.py``). Keys and values are any CBOR-encodable data;
both backends compare keys by their CBOR encoding (so ``1`` and ``1.0`` are different keys, a list
and a tuple the same) and hand out fresh copies (mutating a returned value changes nothing stored).
``expiry`` is an absolute time in the caller's clock (``None``: never); for a persistent backend use
a clock that survives restarts (wall-clock seconds). Every mutation accepts ``seq=``: the sequence
number of the command being applied, recorded atomically with the change (``last_seq``), so a
restarted replica knows how far it got.

``MemoryBackend`` keeps immutable scalars (and ``str``/``int`` keys) as they are and encodes the
rest (:mod:`.packing`); the persistent one, ``SQLiteBackend``, is :mod:`.sqlite_backend`'s. This
module does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .errors import NoSuchKey
from .packing import Packed, pack, unpack

__all__ = ["Entry", "Backend", "MemoryBackend"]


@dataclass(frozen=True, slots=True)
class Entry:
    key: Any
    value: Any
    expiry: float | None = None


@runtime_checkable
class Backend(Protocol):
    """The operations every backend offers. Not thread-safe; one user at a time."""

    @property
    def last_seq(self) -> int:
        """Sequence number recorded with the latest mutation (0 if none)."""
        ...

    def get(self, key: Any) -> Any:
        """Return the value; raise NoSuchKey."""
        ...

    def get_entry(self, key: Any) -> Entry | None: ...

    def exists(self, key: Any) -> bool: ...

    def keys(self) -> list[Any]: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Entry]:
        """A snapshot of all entries (taken at the call; later changes do not show)."""
        ...

    def snapshot(self) -> list[Entry]: ...

    def next_expiry(self) -> float | None:
        """The earliest expiry of any entry."""
        ...

    def put(self, key: Any, value: Any, expiry: float | None = None, *, seq: int | None = None) -> None: ...

    def erase(self, key: Any, *, seq: int | None = None) -> bool:
        """Remove the key; return whether it existed."""
        ...

    def clear(self, *, seq: int | None = None) -> None: ...

    def expire(self, now: float, *, seq: int | None = None) -> list[Any]:
        """Remove and return every key whose expiry is <= now."""
        ...

    def replace_all(self, entries: list[Entry], *, seq: int | None = None) -> None:
        """Atomically replace the whole content (a clone loading a snapshot)."""
        ...

    def set_last_seq(self, seq: int) -> None: ...

    def close(self) -> None: ...


#: Immutable scalars a MemoryBackend keeps as they are: encodable by construction, and decoding
#: their encoding gives an equal value of the same type.
_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})


def _mem_key(key: Any) -> Any:
    """A MemoryBackend's dict key for ``key``: a ``str`` or ``int`` as is, anything else its
    canonical encoding (``bytes``). No two of these kinds compare equal (``1 == 1.0 == True`` in
    Python, but floats and booleans are encoded), so keys still compare by their encoding."""
    t = type(key)
    return key if t is str or t is int else pack(key)


def _mem_unkey(k: Any) -> Any:
    return unpack(k) if type(k) is bytes else k


def _mem_value(value: Any) -> Any:
    return value if type(value) in _PLAIN else Packed(pack(value))


def _mem_unvalue(v: Any) -> Any:
    return unpack(v.data) if type(v) is Packed else v


class MemoryBackend:
    """A dict; fast, gone when the process ends.

    Keys are held as ``str``/``int`` or their canonical encoding (see ``_mem_key``); values as
    they are when they are immutable scalars, else encoded (so reads return fresh copies and an
    unencodable value fails at ``put``, as with SQLite).
    """

    def __init__(self) -> None:
        self._data: dict[Any, tuple[Any, float | None]] = {}
        self._expiring: dict[Any, float] = {}  # the keys with an expiry (next_expiry scans only these)
        self._last_seq = 0

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def get(self, key: Any) -> Any:
        t = type(key)
        item = self._data.get(key if t is str or t is int else pack(key))
        if item is None:
            raise NoSuchKey(key)
        v = item[0]
        return unpack(v.data) if type(v) is Packed else v

    def get_entry(self, key: Any) -> Entry | None:
        t = type(key)
        item = self._data.get(key if t is str or t is int else pack(key))
        return None if item is None else Entry(key, _mem_unvalue(item[0]), item[1])

    def exists(self, key: Any) -> bool:
        return _mem_key(key) in self._data

    def keys(self) -> list[Any]:
        return [_mem_unkey(k) for k in self._data]

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.snapshot())

    def snapshot(self) -> list[Entry]:
        return [Entry(_mem_unkey(k), _mem_unvalue(v), e) for k, (v, e) in self._data.items()]

    def next_expiry(self) -> float | None:
        return min(self._expiring.values(), default=None)

    def put(self, key: Any, value: Any, expiry: float | None = None, *, seq: int | None = None) -> None:
        t = type(key)
        k = key if t is str or t is int else pack(key)
        self._data[k] = (value if type(value) in _PLAIN else Packed(pack(value)), expiry)
        if expiry is not None:
            self._expiring[k] = expiry
        elif self._expiring:
            self._expiring.pop(k, None)
        if seq is not None:
            self._last_seq = seq

    def erase(self, key: Any, *, seq: int | None = None) -> bool:
        k = _mem_key(key)
        existed = self._data.pop(k, None) is not None
        self._expiring.pop(k, None)
        if seq is not None:
            self._last_seq = seq
        return existed

    def clear(self, *, seq: int | None = None) -> None:
        self._data.clear()
        self._expiring.clear()
        if seq is not None:
            self._last_seq = seq

    def expire(self, now: float, *, seq: int | None = None) -> list[Any]:
        gone = [k for k, e in self._expiring.items() if e <= now]
        for k in gone:
            del self._data[k]
            del self._expiring[k]
        if seq is not None:
            self._last_seq = seq
        return [_mem_unkey(k) for k in gone]

    def replace_all(self, entries: list[Entry], *, seq: int | None = None) -> None:
        data = {_mem_key(e.key): (_mem_value(e.value), e.expiry) for e in entries}
        self._data = data
        self._expiring = {k: e for k, (_, e) in data.items() if e is not None}
        if seq is not None:
            self._last_seq = seq

    def set_last_seq(self, seq: int) -> None:
        self._last_seq = seq

    def close(self) -> None:
        pass
