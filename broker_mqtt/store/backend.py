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
rest; ``SQLiteBackend`` stores the encodings. ``SQLiteBackend`` runs in WAL mode with ``synchronous=FULL``: once a mutating call returns, the
change survives a process kill or power loss. Any failure raises :class:`BackendError`, and the
transaction is rolled back (the backend is unchanged).
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import cbor2

from ..wire import codec
from .errors import BackendError, NoSuchKey

__all__ = ["Entry", "Backend", "MemoryBackend", "SQLiteBackend"]


@functools.lru_cache(maxsize=65_536)
def _pack_scalar(obj: int | str) -> bytes:
    return cbor2.dumps(obj, canonical=True)


def _pack(obj: Any) -> bytes:
    """Encode a key or value: ``broker_mqtt.wire.codec``'s encoding, in canonical form (so that equal
    keys, e.g. sets built in another order, get equal bytes). Plain ints and strings, the usual
    keys, come from a cache (``type(...) is``: a bool, an int subclass, never shares 1's bytes).
    A :class:`_Packed` inside ``obj`` stands for the item it holds the encoding of."""
    t = type(obj)
    if t is int or t is str:
        return _pack_scalar(obj)
    try:
        return cbor2.dumps(obj, canonical=True, default=_default)
    except (cbor2.CBOREncodeError, codec.EncodeError, TypeError, ValueError) as exc:
        raise BackendError(f"cannot encode {obj!r}: {exc}") from exc


def _default(encoder: cbor2.CBOREncoder, obj: Any) -> None:
    """``_pack``'s hook for what cbor2 does not encode itself: a :class:`_Packed` is written as the
    encoding it holds (a part encoded earlier), anything else goes to the codec."""
    if type(obj) is _Packed:
        encoder.write(obj.data)
    else:
        codec._default(encoder, obj)


def _pack_array(parts: list[bytes]) -> bytes:
    """``_pack`` of a list whose items ``_pack`` to ``parts``: a canonical array is its head (the
    length in the fewest bytes) followed by its items' encodings."""
    n = len(parts)
    if n < 24:
        head = bytes((0x80 + n,))
    elif n < 0x100:
        head = bytes((0x98, n))
    elif n < 0x1_0000:
        head = b"\x99" + n.to_bytes(2, "big")
    elif n < 0x1_0000_0000:
        head = b"\x9a" + n.to_bytes(4, "big")
    else:
        head = b"\x9b" + n.to_bytes(8, "big")
    return head + b"".join(parts)


def open_sqlite(path: Path) -> sqlite3.Connection:
    """``sqlite3.connect`` as both SQLite users of a store open their file: autocommit mode (the
    transactions are explicit, see :func:`sqlite_transaction`), usable from a worker thread. Raises
    :class:`BackendError`. The caller owns the connection and must ``close()`` it on every path:
    Python 3.13+ warns (``ResourceWarning: unclosed database``) about one left to the garbage
    collector, and a ``with connection:`` block only commits, it does not close."""
    try:
        return sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise BackendError(f"cannot open {path}: {exc}") from exc


@contextlib.contextmanager
def sqlite_transaction(db: sqlite3.Connection, path: Any) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` around the block, ``ROLLBACK`` if it raises; an SQLite
    error (of the block or the transaction) becomes :class:`BackendError` naming ``path``."""
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise BackendError(f"{path}: {exc}") from exc


def _unpack(data: bytes) -> Any:
    """Decode a key or value (``broker_mqtt.wire.codec.decode``)."""
    try:
        return codec.decode(data)
    except codec.DecodeError as exc:
        raise BackendError(f"cannot decode stored data: {exc}") from exc


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


class _Packed:
    """A value kept as its CBOR encoding: a MemoryBackend's stored value (every mutable or composite
    value: a fresh copy on every read), or a part of what ``_pack`` encodes, encoded earlier."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


#: Immutable scalars a MemoryBackend keeps as they are: encodable by construction, and decoding
#: their encoding gives an equal value of the same type.
_PLAIN = frozenset({str, int, float, bool, bytes, type(None)})


def _mem_key(key: Any) -> Any:
    """A MemoryBackend's dict key for ``key``: a ``str`` or ``int`` as is, anything else its
    canonical encoding (``bytes``). No two of these kinds compare equal (``1 == 1.0 == True`` in
    Python, but floats and booleans are encoded), so keys still compare by their encoding."""
    t = type(key)
    return key if t is str or t is int else _pack(key)


def _mem_unkey(k: Any) -> Any:
    return _unpack(k) if type(k) is bytes else k


def _mem_value(value: Any) -> Any:
    return value if type(value) in _PLAIN else _Packed(_pack(value))


def _mem_unvalue(v: Any) -> Any:
    return _unpack(v.data) if type(v) is _Packed else v


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
        item = self._data.get(key if t is str or t is int else _pack(key))
        if item is None:
            raise NoSuchKey(key)
        v = item[0]
        return _unpack(v.data) if type(v) is _Packed else v

    def get_entry(self, key: Any) -> Entry | None:
        t = type(key)
        item = self._data.get(key if t is str or t is int else _pack(key))
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
        k = key if t is str or t is int else _pack(key)
        self._data[k] = (value if type(value) in _PLAIN else _Packed(_pack(value)), expiry)
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


_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (k BLOB PRIMARY KEY, v BLOB NOT NULL, expiry REAL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_expiry ON entries (expiry) WHERE expiry IS NOT NULL;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
"""


class SQLiteBackend:
    """A SQLite file (stdlib ``sqlite3``); WAL mode, ``synchronous=FULL``, one transaction per call.

    Opening creates the file and schema if needed; reopening continues where the last process
    stopped (entries, expiries and ``last_seq``). Blocks on disk I/O: the async layer should call
    it from a worker thread (the connection allows that, but never concurrently).
    """

    def __init__(self, path: str | Path) -> None:
        """Open (or create) the file. Raises :class:`BackendError` if it cannot be opened or is not
        a database of this schema; the connection is closed again on every failure (nothing leaks)."""
        self.path = Path(path)
        self._db = open_sqlite(self.path)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE name = 'last_seq'").fetchone()
        except BaseException as exc:
            self._db.close()
            if isinstance(exc, sqlite3.Error):
                raise BackendError(f"cannot open {self.path}: {exc}") from exc
            raise
        self._last_seq = row[0] if row else 0

    # -- reads -----------------------------------------------------------------------------------

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise BackendError(f"{self.path}: {exc}") from exc

    @property
    def last_seq(self) -> int:
        return self._last_seq

    def get(self, key: Any) -> Any:
        rows = self._query("SELECT v FROM entries WHERE k = ?", (_pack(key),))
        if not rows:
            raise NoSuchKey(key)
        return _unpack(rows[0][0])

    def get_entry(self, key: Any) -> Entry | None:
        rows = self._query("SELECT v, expiry FROM entries WHERE k = ?", (_pack(key),))
        return Entry(key, _unpack(rows[0][0]), rows[0][1]) if rows else None

    def exists(self, key: Any) -> bool:
        return bool(self._query("SELECT 1 FROM entries WHERE k = ?", (_pack(key),)))

    def keys(self) -> list[Any]:
        return [_unpack(k) for (k,) in self._query("SELECT k FROM entries")]

    def __len__(self) -> int:
        return int(self._query("SELECT count(*) FROM entries")[0][0])

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.snapshot())

    def snapshot(self) -> list[Entry]:
        rows = self._query("SELECT k, v, expiry FROM entries")
        return [Entry(_unpack(k), _unpack(v), e) for k, v, e in rows]

    def next_expiry(self) -> float | None:
        value = self._query("SELECT min(expiry) FROM entries WHERE expiry IS NOT NULL")[0][0]
        return None if value is None else float(value)

    # -- writes ----------------------------------------------------------------------------------

    def _transaction(self, statements: list[tuple[str, Any]], seq: int | None) -> list[Any]:
        """Run statements atomically (plus the last_seq update); return the first one's rows."""
        if seq is not None:
            statements = [*statements, ("INSERT INTO meta (name, value) VALUES ('last_seq', ?) "
                                        "ON CONFLICT (name) DO UPDATE SET value = excluded.value", (seq,))]
        first: list[Any] = []
        with sqlite_transaction(self._db, self.path):
            for i, (sql, args) in enumerate(statements):
                many = isinstance(args, list)
                cur = self._db.executemany(sql, args) if many else self._db.execute(sql, args)
                if i == 0:
                    first = cur.fetchall() if cur.description else [cur.rowcount]
        if seq is not None:
            self._last_seq = seq
        return first

    def put(self, key: Any, value: Any, expiry: float | None = None, *, seq: int | None = None) -> None:
        self._transaction([("INSERT OR REPLACE INTO entries (k, v, expiry) VALUES (?, ?, ?)",
                            (_pack(key), _pack(value), expiry))], seq)

    def erase(self, key: Any, *, seq: int | None = None) -> bool:
        [count] = self._transaction([("DELETE FROM entries WHERE k = ?", (_pack(key),))], seq)
        return bool(count)

    def clear(self, *, seq: int | None = None) -> None:
        self._transaction([("DELETE FROM entries", ())], seq)

    def expire(self, now: float, *, seq: int | None = None) -> list[Any]:
        rows = self._transaction([("DELETE FROM entries WHERE expiry IS NOT NULL AND expiry <= ? RETURNING k",
                                   (now,))], seq)
        return [_unpack(k) for (k,) in rows]

    def replace_all(self, entries: list[Entry], *, seq: int | None = None) -> None:
        rows = [(_pack(e.key), _pack(e.value), e.expiry) for e in entries]
        self._transaction([("DELETE FROM entries", ()),
                           ("INSERT OR REPLACE INTO entries (k, v, expiry) VALUES (?, ?, ?)", rows)], seq)

    def set_last_seq(self, seq: int) -> None:
        self._transaction([], seq)

    def close(self) -> None:
        """Close the file; the backend is unusable afterwards (every call raises
        :class:`BackendError`). Idempotent. Whoever opened the backend closes it: an attached master
        closes the one it was given when it detaches, or when attaching fails."""
        try:
            self._db.close()
        except sqlite3.Error as exc:  # pragma: no cover
            raise BackendError(f"{self.path}: {exc}") from exc
