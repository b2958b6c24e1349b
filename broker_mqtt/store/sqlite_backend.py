"""A store backend in a SQLite file (stdlib ``sqlite3``), and how a store opens SQLite.

:class:`SQLiteBackend` is the persistent :class:`~.backend.Backend`: it stores the encodings
(:mod:`.packing`) of keys and values. It runs in WAL mode with ``synchronous=FULL``: once a mutating
call returns, the change survives a process kill or power loss. Any failure raises
:class:`BackendError`, and the transaction is rolled back (the backend is unchanged).
:func:`open_sqlite` and :func:`sqlite_transaction` are how both SQLite users of a store (this backend
and the elected store's :mod:`.versioned_sqlite`) open their file and write to it.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .backend import Entry
from .errors import BackendError, NoSuchKey
from .packing import pack, unpack

__all__ = ["SQLiteBackend", "open_sqlite", "sqlite_transaction"]


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
    error (of the block or the transaction) becomes :class:`BackendError` naming ``path``. Some
    errors (a full disk, an I/O error) roll the transaction back by themselves: the error raised is
    then that one, not the failed ``ROLLBACK``'s "no transaction is active"."""
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # (the cause is the error raised, not this)
                    db.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise BackendError(f"{path}: {exc}") from exc


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
        rows = self._query("SELECT v FROM entries WHERE k = ?", (pack(key),))
        if not rows:
            raise NoSuchKey(key)
        return unpack(rows[0][0])

    def get_entry(self, key: Any) -> Entry | None:
        rows = self._query("SELECT v, expiry FROM entries WHERE k = ?", (pack(key),))
        return Entry(key, unpack(rows[0][0]), rows[0][1]) if rows else None

    def exists(self, key: Any) -> bool:
        return bool(self._query("SELECT 1 FROM entries WHERE k = ?", (pack(key),)))

    def keys(self) -> list[Any]:
        return [unpack(k) for (k,) in self._query("SELECT k FROM entries")]

    def __len__(self) -> int:
        return int(self._query("SELECT count(*) FROM entries")[0][0])

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.snapshot())

    def snapshot(self) -> list[Entry]:
        rows = self._query("SELECT k, v, expiry FROM entries")
        return [Entry(unpack(k), unpack(v), e) for k, v, e in rows]

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
                            (pack(key), pack(value), expiry))], seq)

    def erase(self, key: Any, *, seq: int | None = None) -> bool:
        [count] = self._transaction([("DELETE FROM entries WHERE k = ?", (pack(key),))], seq)
        return bool(count)

    def clear(self, *, seq: int | None = None) -> None:
        self._transaction([("DELETE FROM entries", ())], seq)

    def expire(self, now: float, *, seq: int | None = None) -> list[Any]:
        rows = self._transaction([("DELETE FROM entries WHERE expiry IS NOT NULL AND expiry <= ? RETURNING k",
                                   (now,))], seq)
        return [unpack(k) for (k,) in rows]

    def replace_all(self, entries: list[Entry], *, seq: int | None = None) -> None:
        rows = [(pack(e.key), pack(e.value), e.expiry) for e in entries]
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
