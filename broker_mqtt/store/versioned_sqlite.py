"""Where a :class:`~.versioned.VersionedState` persists: one SQLite file (``docs/elected-stores.md``).

Two tables: ``versions`` (the packed key -> the packed :class:`~.history.Version` wire form, tombstones
included) and ``meta`` (one row ``state``: the header with ``seq``, ``lineage``, ``hlc`` and
``applied``). While a streamed snapshot arrives, a third, ``staging``, takes its rows chunk by chunk
(:meth:`StateFile.stage`), and the install's commit renames it to ``versions`` (one step, not every
row written again); a process that dies meanwhile leaves it, and the next open drops it. The file runs in WAL mode with ``synchronous=FULL``; every :meth:`StateFile.write` is one
``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction, so a reopened file holds exactly the last committed
batch. SQLite errors become :class:`~.errors.BackendError` naming the file.

The state decides what to write (the rows it changed since the last commit, or all of them after a
snapshot or merge) and when; this module only knows the file. :func:`open_state` opens a state from
its file (the state itself opens nothing: a :class:`StateFile` is its :class:`~.versioned.Persistence`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import BackendError, StoreDecodeError
from .packing import pack, unpack
from .sqlite_backend import open_sqlite, sqlite_transaction
from .versioned import VersionedState

__all__ = ["StateFile", "open_state"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS versions (k BLOB PRIMARY KEY, v BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, v BLOB NOT NULL);
DROP TABLE IF EXISTS staging;
"""
_STAGING = "CREATE TABLE staging (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID"  # as versions: renamed to it

#: ``load(rows, meta)``: ``rows`` yields ``(packed key, packed version)``; ``meta()`` the decoded meta rows
Loader = Callable[[Iterator[tuple[bytes, bytes]], Callable[[], dict[str, Any]]], None]


class StateFile:
    """An open state file. :meth:`open` it, :meth:`write` committed batches, :meth:`close` it."""

    __slots__ = ("_db", "path")

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self._db: sqlite3.Connection | None = db
        self.path = path

    @classmethod
    def open(cls, path: Path, load: Loader) -> StateFile:
        """Open ``path`` (created if absent), set its WAL mode and schema up and hand what it holds
        to ``load``. Raises :class:`BackendError` if the file cannot be opened or read, or if
        ``load`` finds it malformed; the connection is then closed again."""
        db = open_sqlite(path)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(_SCHEMA)
            rows = ((bytes(k), v) for k, v in db.execute("SELECT k, v FROM versions"))
            load(rows, lambda: {name: unpack(v) for name, v in db.execute("SELECT name, v FROM meta")})
        except BaseException as exc:
            db.close()
            if isinstance(exc, (sqlite3.Error, StoreDecodeError, KeyError, TypeError, ValueError)):
                raise BackendError(f"cannot open {path}: {exc}") from exc
            raise
        return cls(db, path)

    def write(self, header: dict[str, Any], rows: Iterable[tuple[bytes, bytes]], gone: list[tuple[bytes]],
              *, replace_all: bool, from_staged: bool = False) -> None:
        """One transaction: delete ``gone`` keys (or every row, ``replace_all``; or, ``from_staged``,
        the staging table becomes the versions table), insert or replace ``rows`` (packed key, packed
        version), store ``header``. Raises BackendError (nothing written)."""
        db = self._db
        assert db is not None
        with sqlite_transaction(db, self.path):
            if from_staged:
                db.execute("DROP TABLE versions")
                db.execute("ALTER TABLE staging RENAME TO versions")
            if replace_all:
                db.execute("DELETE FROM versions")
            if gone:
                db.executemany("DELETE FROM versions WHERE k = ?", gone)
            db.executemany("INSERT OR REPLACE INTO versions (k, v) VALUES (?, ?)", rows)
            db.execute("INSERT OR REPLACE INTO meta (name, v) VALUES ('state', ?)", (pack(header),))

    def stage(self, rows: Iterable[tuple[bytes, bytes]], gone: list[tuple[bytes]], *, fresh: bool) -> None:
        """One transaction on the ``staging`` table (``fresh``: made anew, empty): delete ``gone``,
        insert or replace ``rows``. Committed with ``synchronous=NORMAL``: a power loss may take the
        last of it back but never corrupts the file, and the ``FULL`` commit of the write that takes
        the table syncs it all first. A table left by a process that died is dropped at open. Raises
        BackendError (nothing staged)."""
        db = self._db
        assert db is not None
        try:
            db.execute("PRAGMA synchronous=NORMAL")
            try:
                with sqlite_transaction(db, self.path):
                    if fresh:
                        db.execute("DROP TABLE IF EXISTS staging")
                        db.execute(_STAGING)
                    if gone:
                        db.executemany("DELETE FROM staging WHERE k = ?", gone)
                    db.executemany("INSERT OR REPLACE INTO staging (k, v) VALUES (?, ?)", rows)
            finally:
                db.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            raise BackendError(f"{self.path}: {exc}") from exc

    @property
    def closed(self) -> bool:
        return self._db is None

    def close(self) -> None:
        """Close the file; idempotent."""
        if self._db is not None:
            self._db.close()
            self._db = None


def open_state(path: str | Path) -> VersionedState:
    """A :class:`~.versioned.VersionedState` persisted in the SQLite file ``path`` (created if absent),
    holding what the file holds. Raises :class:`BackendError` as :meth:`StateFile.open` does (nothing
    is left open then)."""
    state = VersionedState()
    file = StateFile.open(Path(path), state.load)
    state.attach(file, file.path)
    return state
