"""Where a :class:`~.versioned.VersionedState` persists: one SQLite file (``docs/elected-stores.md``).

Two tables: ``versions`` (the packed key -> the packed :class:`~.history.Version` wire form, tombstones
included) and ``meta`` (one row ``state``: the header with ``seq``, ``lineage``, ``hlc`` and
``applied``). The file runs in WAL mode with ``synchronous=FULL``; every :meth:`StateFile.write` is one
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
"""

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
              *, replace_all: bool) -> None:
        """One transaction: delete ``gone`` keys (or every row, ``replace_all``), insert or replace
        ``rows`` (packed key, packed version), store ``header``. Raises BackendError (nothing written)."""
        db = self._db
        assert db is not None
        with sqlite_transaction(db, self.path):
            if replace_all:
                db.execute("DELETE FROM versions")
            elif gone:
                db.executemany("DELETE FROM versions WHERE k = ?", gone)
            db.executemany("INSERT OR REPLACE INTO versions (k, v) VALUES (?, ?)", rows)
            db.execute("INSERT OR REPLACE INTO meta (name, v) VALUES ('state', ?)", (pack(header),))

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
