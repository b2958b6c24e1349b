"""An elected store's state kept in its SQLite file, not in memory (``resident="disk"``; ``docs/elected-stores.md`` § 3).

:class:`DiskState` is a :class:`~.versioned.VersionedState` whose entries live in the file's ``versions``
table, read and written where they are: the process holds no object per key, so a store may be far
larger than the memory (a 10,000,000-key store joins a new replica in a few hundred MB per process).
Everything else (the log position, the lineage, the writer table, the clock) is held in memory as in
the memory-resident state, and written with every commit.

How it differs from the memory-resident state (``versioned_sqlite.open_state``), which loads every
entry at open and keeps the file as its durable copy only:

* ``versions`` holds, beside each key's packed :class:`~.history.Version` (``v``, the same bytes the
  other form stores, so either form opens the other's file), its ``seq``, its tombstone's hlc
  (``dead``, NULL for a live key) and its ``expiry``; partial indexes find the oldest tombstones and
  the next expiry. A file last written by the memory-resident form lacks them: the first open here
  computes them, one pass over the file (the header's ``disk`` field says they are current).
* :meth:`~.versioned.VersionedState.apply` writes each changed key into an open transaction
  (``BEGIN IMMEDIATE`` at the first write after a commit); :meth:`commit` writes the header and
  commits it (``synchronous=FULL``). Reads see what was applied, committed or not. A process that
  dies loses what was not committed, as the memory form does; a failed write raises
  :class:`~.errors.BackendError` and the replica stops (its transaction rolls back).
* A snapshot it serves is read from the file in key order, a chunk at a time
  (:meth:`rows_after`): no key order is held. One it receives is staged in the file as it comes and
  taken in one step at the install (the staging table becomes ``versions``); none of it is held in
  memory. A claim's fetch (a split's merge) and a merge are still built in memory: a merge holds both
  sides' entries while it runs.
* ``keys()``, ``items()`` and ``versions()`` build lists, as the other form does: on a large store they
  hold what they return.

Each entry costs a lookup and a write in the file (a few µs), so a disk-resident store applies writes
several times slower than a memory-resident one; choose it for stores larger than the memory.
"""

from __future__ import annotations

import itertools
import secrets
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import BackendError, NoSuchKey, StoreDecodeError
from .history import (
    Change,
    Lineage,
    Version,
    dead_column,
    expiry_column,
    lineage_from_wire,
    lineage_to_wire,
    seq_column,
    version_columns,
)
from .packing import pack, unpack, unpack_key
from .sqlite_backend import open_sqlite
from .state_entries import StateEntries
from .versioned import VersionedState
from .writer_table import _Applied, applied_from_wire

__all__ = ["DiskState", "open_disk_state", "ROWS_PER_READ"]

ROWS_PER_READ = 2_048  #: rows one query of a whole-state walk reads at most
STAGE_COMMIT_ROWS = 16_384  #: rows of a snapshot staged in one transaction, about (see stage_rows)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS versions (k BLOB PRIMARY KEY, v BLOB NOT NULL, seq INTEGER, dead INTEGER,
                                     expiry REAL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, v BLOB NOT NULL);
DROP TABLE IF EXISTS staging;
"""
_COLUMNS = (("seq", "INTEGER"), ("dead", "INTEGER"), ("expiry", "REAL"))
_UPSERT = ("INSERT INTO versions (k, v, seq, dead, expiry) VALUES (?, ?, ?, ?, ?) ON CONFLICT (k) DO UPDATE "
           "SET v = excluded.v, seq = excluded.seq, dead = excluded.dead, expiry = excluded.expiry")
_ABSENT: Any = object()


def _indexes(db: sqlite3.Connection, table: str) -> None:
    """The partial indexes a disk-resident ``table`` needs, unless it has them. Their names are new
    ones each time: a staging table renamed to ``versions`` keeps its indexes, and index names are
    unique per file."""
    have = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?",
                                           (table,))]
    tag = secrets.token_hex(4)
    if not any(name.startswith("dead_") for name in have):
        db.execute(f"CREATE INDEX dead_{tag} ON {table} (dead, k) WHERE dead IS NOT NULL")
    if not any(name.startswith("expiry_") for name in have):
        db.execute(f"CREATE INDEX expiry_{tag} ON {table} (expiry) WHERE expiry IS NOT NULL")


def _disk_row(k: bytes, value: Any, hlc: int, origin: str, seq: int, deleted: bool,
              expiry: float | None) -> tuple[bytes, bytes, int, int | None, float | None]:
    """The ``versions`` row of key ``k`` at this version: ``(k, packed version, seq, dead, expiry)``
    (the columns as :func:`~.history.version_columns` takes them from a version's wire form)."""
    if deleted:
        return k, pack([None, hlc, origin, seq, True, None]), seq_column(seq), dead_column(hlc), None
    return k, pack([value, hlc, origin, seq, False, expiry]), seq_column(seq), None, expiry_column(expiry)


class DiskState(VersionedState):
    """A :class:`VersionedState` whose entries stay in its SQLite file; see the module docstring.
    Open one with :func:`open_disk_state`. Every read and write may raise :class:`BackendError` (the
    file failed, or the state was closed)."""

    on_disk = True

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        super().__init__()
        self._db: sqlite3.Connection | None = db
        self._file = None  # (the base's persistence: this state writes its file itself)
        self.path = path
        self._live = 0  # live keys and tombstones, counted as they change (a count(*) walks the table)
        self._dead = 0
        self._staged_rows = 0  # rows staged in the open transaction
        self._staged_counts = [0, 0]  # live keys and tombstones in the staging table

    # -- the connection ---------------------------------------------------------------------------

    def _failure(self, exc: sqlite3.Error) -> BackendError:
        """The BackendError for an error of the file, remembered (:attr:`failed`): a state whose file
        failed holds what it cannot store, so the replica must stop, not go on with it."""
        self.failed = BackendError(f"{self.path}: {exc}")
        return self.failed

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise BackendError(f"{self.path}: the state is closed")
        return self._db

    def _write(self, sql: str, args: Any = ()) -> sqlite3.Cursor:
        """Run ``sql`` in the open write transaction (begun here if none is)."""
        db = self._conn()
        try:
            if not db.in_transaction:
                db.execute("BEGIN IMMEDIATE")
            return db.execute(sql, args)
        except sqlite3.Error as exc:
            raise self._failure(exc) from exc

    def _read(self, sql: str, args: Any = ()) -> sqlite3.Cursor:
        try:
            return self._conn().execute(sql, args)
        except sqlite3.Error as exc:
            raise self._failure(exc) from exc

    def _row(self, k: bytes) -> tuple[bytes, int, int | None] | None:
        row: tuple[bytes, int, int | None] | None = self._read(
            "SELECT v, seq, dead FROM versions WHERE k = ?", (k,)).fetchone()
        return row

    # -- reads ------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._live

    @property
    def tombstones(self) -> int:
        return self._dead

    def _old_tombstones(self, before_hlc: int, limit: int, max_bytes: int | None = None) -> list[bytes]:
        out: list[bytes] = []
        size = 0
        for (k,) in self._read("SELECT k FROM versions WHERE dead IS NOT NULL AND dead < ? ORDER BY dead, k "
                               "LIMIT ?", (dead_column(before_hlc), limit)):
            size += len(k)
            if max_bytes is not None and out and size > max_bytes:
                break
            out.append(bytes(k))
        return out

    def largest_erased_int(self, below: int) -> int | None:
        if not 24 <= below <= 1 << 64:
            raise ValueError(f"below must be in 24..2**64, not {below}")
        limit = pack(below) if below < 1 << 64 else b"\x1c"
        row = self._read("SELECT max(k) FROM versions WHERE dead IS NOT NULL AND k < ?", (limit,)).fetchone()
        return None if row is None or row[0] is None else int(unpack_key(bytes(row[0])))

    def _live_value(self, k: bytes, default: Any = None) -> Any:
        row = self._read("SELECT v FROM versions WHERE k = ? AND dead IS NULL", (k,)).fetchone()
        return default if row is None else unpack(row[0])[0]

    def value(self, key: Any, default: Any = None) -> Any:
        return self._live_value(pack(key), default)

    def get(self, key: Any) -> Any:
        value = self.value(key, _ABSENT)
        if value is _ABSENT:
            raise NoSuchKey(key)
        return value

    def exists(self, key: Any) -> bool:
        return self._read("SELECT 1 FROM versions WHERE k = ? AND dead IS NULL", (pack(key),)).fetchone() is not None

    def _walk(self, where: str = "") -> Iterator[tuple[bytes, bytes]]:
        """Every ``(k, v)`` row (``where``: a condition), in key order, ROWS_PER_READ per query."""
        after = b""
        while True:
            rows = self._read(f"SELECT k, v FROM versions WHERE k > ? {where} ORDER BY k LIMIT ?",
                              (after, ROWS_PER_READ)).fetchall()
            for k, v in rows:
                yield bytes(k), v
            if len(rows) < ROWS_PER_READ:
                return
            after = bytes(rows[-1][0])

    def keys(self) -> list[Any]:
        return [unpack_key(k) for k, _ in self._walk("AND dead IS NULL")]

    def items(self) -> list[tuple[Any, Any]]:
        return [(unpack_key(k), unpack(v)[0]) for k, v in self._walk("AND dead IS NULL")]

    def _packed_versions(self) -> Iterator[tuple[bytes, Version]]:
        rows = list(self._walk())  # (read before the caller changes the table)
        for k, v in rows:
            yield k, Version.from_wire(unpack(v))

    def packed_keys(self) -> Iterable[bytes]:
        return [k for k, _ in self._walk()]

    def packed_version(self, k: bytes) -> Version | None:
        row = self._row(k)
        return None if row is None else Version.from_wire(unpack(row[0]))

    def packed_row(self, k: bytes, after_seq: int = -1) -> bytes | None:
        row = self._row(k)
        return None if row is None or row[1] <= after_seq else bytes(row[0])

    def rows_after(self, after: bytes | None, since_seq: int, upto_seq: int,
                   limit: int) -> list[tuple[bytes, bytes | None]]:
        """Up to ``limit`` keys after ``after`` (None: from the first) in key order, tombstones
        included, each with its packed version if it was last written after ``since_seq`` and up to
        ``upto_seq`` (else None)."""
        rows = self._read("SELECT k, CASE WHEN seq > ? AND seq <= ? THEN v END FROM versions WHERE k > ? "
                          "ORDER BY k LIMIT ?",
                          (since_seq, upto_seq, b"" if after is None else after, limit)).fetchall()
        return [(bytes(k), v) for k, v in rows]

    def begin_new_keys(self) -> None:
        pass  # (a reader of this state takes no key order: rows_after reads the file's)

    def take_new_keys(self) -> set[bytes] | None:
        return None

    def next_expiry(self) -> tuple[float, Any] | None:
        row = self._read("SELECT expiry, k FROM versions WHERE expiry IS NOT NULL ORDER BY expiry LIMIT 1").fetchone()
        return None if row is None else (row[0], unpack_key(bytes(row[1])))

    # -- changes ------------------------------------------------------------------------------------

    def _apply_op(self, op: tuple[Any, ...], stamp: int, origin: str, changes: list[Change] | None) -> None:
        kind = op[0]
        if kind == "clear":
            self._clear(stamp, origin, changes)
        elif kind == "forget":
            k = pack(op[1])
            row = self._row(k)
            if row is not None and row[2] is not None:
                self._write("DELETE FROM versions WHERE k = ?", (k,))
                self._dead -= 1
                self.forgot_seq = max(self.forgot_seq, row[1])
        else:
            super()._apply_op(op, stamp, origin, changes)  # erase, expire, push, pop: _tombstone, _set

    def _set(self, k: bytes, key: Any, value: Any, stamp: int, origin: str, expiry: float | None,
             changes: list[Change] | None) -> None:
        hlc, _, seq = self._stamper.parts(stamp)
        old = self._row(k)
        self._write(_UPSERT, _disk_row(k, value, hlc, origin, seq, False, expiry))
        if old is None or old[2] is not None:
            self._live += 1
            self._dead -= old is not None
            if changes is not None:
                changes.append(Change(key, False, None, True, value, origin))
        elif changes is not None:
            changes.append(Change(key, True, unpack(old[0])[0], True, value, origin))

    def _tombstone(self, k: bytes, key: Any, stamp: int, origin: str, changes: list[Change] | None,
                   expired: bool) -> None:
        hlc, _, seq = self._stamper.parts(stamp)
        old = self._row(k)
        self._write(_UPSERT, _disk_row(k, None, hlc, origin, seq, True, None))
        if old is None or old[2] is not None:
            self._dead += old is None
            return
        self._live -= 1
        self._dead += 1
        if changes is not None:
            changes.append(Change(key, True, unpack(old[0])[0], False, None, origin, expired))

    def _clear(self, stamp: int, origin: str, changes: list[Change] | None) -> None:
        hlc, _, seq = self._stamper.parts(stamp)
        if changes is not None:
            changes.extend(Change(unpack_key(k), True, unpack(v)[0], False, None, origin, False)
                           for k, v in self._walk("AND dead IS NULL"))
        _, v, seq_col, dead, _ = _disk_row(b"", None, hlc, origin, seq, True, None)
        self._write("UPDATE versions SET v = ?, seq = ?, dead = ?, expiry = NULL WHERE dead IS NULL", (v, seq_col, dead))
        self._dead += self._live
        self._live = 0

    def adopt(self, entries: StateEntries | None, *, last_seq: int, lineage: Lineage,
              applied: dict[str, _Applied], max_hlc: int, report: bool = True,
              staged: int | None = None) -> list[Change]:
        """Replace everything: with the staging table (``staged``, the token of the staging every
        chunk went to; ``entries`` None, a snapshot received by :class:`~.snapshot_stream.Incoming`)
        or with ``entries`` (a merge, a claim's snapshot). Raises StoreDecodeError, nothing changed,
        if ``entries`` is None and ``staged`` is not the current staging's token."""
        if entries is None and (staged is None or staged != self._staging):
            raise StoreDecodeError("the snapshot's staged rows were dropped (staging began again): start over")
        changes = self._changes_to(entries) if report else []
        try:
            if entries is None:
                self._write("DROP TABLE versions")
                self._write("ALTER TABLE staging RENAME TO versions")
                self._live, self._dead = self._staged_counts
            else:
                self._write("DELETE FROM versions")
                self._conn().executemany(_UPSERT, self._entry_rows(entries))
                self._live, self._dead = len(entries.values), len(entries.dead)
        except sqlite3.Error as exc:
            raise self._failure(exc) from exc
        self._changed = True
        self.last_seq, self.lineage = last_seq, list(lineage)
        self.forgot_seq = last_seq
        self.applied = {w: _Applied(a.n, a.seq, dict(a.results)) for w, a in applied.items()}
        self.max_hlc = max(self.max_hlc, max_hlc)
        self._staging += 1
        self.generation += 1
        return changes

    @staticmethod
    def _entry_rows(entries: StateEntries) -> Iterator[tuple[bytes, bytes, int, int | None, float | None]]:
        parts = entries.stamper.parts
        for k, value in entries.values.items():
            hlc, origin, seq = parts(entries.stamps[k])
            yield _disk_row(k, value, hlc, origin, seq, False, entries.expiring.get(k))
        for k, (hlc, stamp) in entries.dead.items():
            _, origin, seq = parts(stamp)
            yield _disk_row(k, None, hlc, origin, seq, True, None)

    def _changes_to(self, entries: StateEntries | None) -> list[Change]:
        """The visible changes from the live keys now to those of ``entries`` (None: the staging table's)."""
        changes: list[Change] = []
        if entries is None:
            gone = ("SELECT o.k, o.v FROM versions o LEFT JOIN staging s ON s.k = o.k "
                    "WHERE o.dead IS NULL AND (s.k IS NULL OR s.dead IS NOT NULL) ORDER BY o.k")
            for k, v in self._read(gone):
                changes.append(Change(unpack_key(bytes(k)), True, unpack(v)[0], False, None, None))
            came = "SELECT s.k, s.v, o.v, o.dead FROM staging s LEFT JOIN versions o ON o.k = s.k WHERE s.dead IS NULL"
            for k, v, ov, odead in self._read(came):
                new = unpack(v)
                if ov is None or odead is not None:
                    changes.append(Change(unpack_key(bytes(k)), False, None, True, new[0], new[2]))
                elif (old := unpack(ov)[0]) != new[0] or type(old) is not type(new[0]):
                    changes.append(Change(unpack_key(bytes(k)), True, old, True, new[0], new[2]))
            return changes
        values, origin = entries.values, entries.stamper.parts
        for k, v in self._walk("AND dead IS NULL"):
            old = unpack(v)[0]
            new = values.get(k, _ABSENT)
            if new is _ABSENT:
                changes.append(Change(unpack_key(k), True, old, False, None, None))
            elif new != old or type(new) is not type(old):
                changes.append(Change(unpack_key(k), True, old, True, new, origin(entries.stamps[k])[1]))
        for k, new in values.items():
            if self._read("SELECT 1 FROM versions WHERE k = ? AND dead IS NULL", (k,)).fetchone() is None:
                changes.append(Change(unpack_key(k), False, None, True, new, origin(entries.stamps[k])[1]))
        return changes

    # -- staging a snapshot as it arrives ----------------------------------------------------------------

    def begin_staging(self) -> int | None:
        self.commit()  # (what was applied is made durable first: the staging has transactions of its own)
        self._staging += 1
        self._staged_counts = [0, 0]
        self._staged_rows = 0  # (those of a staging dropped here go with it)
        self._write("DROP TABLE IF EXISTS staging")
        self._write("CREATE TABLE staging (k BLOB PRIMARY KEY, v BLOB NOT NULL, seq INTEGER, dead INTEGER, "
                    "expiry REAL) WITHOUT ROWID")
        _indexes(self._conn(), "staging")
        self._commit_tx()
        return self._staging

    def stage_rows(self, token: int, rows: Iterable[tuple[Any, ...]], gone: list[tuple[bytes]], *,
                   first_pass: bool = False) -> bool:
        """Stage ``rows`` (``(k, v, seq, dead, expiry)``, as ``versions`` holds them) and drop ``gone``
        in the staging table; False, nothing staged, if ``token`` is not the current staging's.
        ``first_pass``: none of these keys is staged yet (a snapshot's first pass, in key order), so
        the live keys and tombstones staged are counted without looking (else each key is looked
        up: the install takes the counts, instead of walking the table). The rows go into the open
        transaction (begun here if none is), committed once STAGE_COMMIT_ROWS rows wait in it or by
        the next :meth:`commit` (one sync per a few MB staged, not per chunk). Raises BackendError
        (rolled back: the staging is then stale, and the replica stops)."""
        if self._db is None or token != self._staging:
            return False
        db = self._conn()
        try:
            if not db.in_transaction:
                db.execute("BEGIN IMMEDIATE")
            rows = list(rows)
            if not first_pass:
                for (k,) in itertools.chain(gone, ((row[0],) for row in rows)):
                    was = db.execute("SELECT dead FROM staging WHERE k = ?", (k,)).fetchone()
                    if was is not None:
                        self._staged_counts[was[0] is not None] -= 1
                        db.execute("DELETE FROM staging WHERE k = ?", (k,))
            dead = sum(1 for row in rows if row[3] is not None)
            self._staged_counts[0] += len(rows) - dead
            self._staged_counts[1] += dead
            db.executemany("INSERT INTO staging (k, v, seq, dead, expiry) VALUES (?, ?, ?, ?, ?)", rows)
            self._staged_rows += len(rows)
            if self._staged_rows >= STAGE_COMMIT_ROWS:
                self.commit()  # (with what was applied meanwhile, if anything was)
                self._commit_tx()
                self._staged_rows = 0
        except sqlite3.Error as exc:
            self._rollback()
            self._staging += 1  # the table misses these rows: no adopt may take it
            raise self._failure(exc) from exc
        return True

    # -- commits --------------------------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        return {
            "seq": self.last_seq, "lineage": lineage_to_wire(self.lineage), "hlc": self.max_hlc,
            "applied": [[w, a.n, a.seq, a.packed_results()] for w, a in self.applied.items()],
            "disk": 1, "live": self._live, "dead": self._dead,
        }

    def commit(self) -> None:
        """Write the header and commit what was applied (no-op if nothing was: rows of a snapshot
        being staged wait for their batch, :meth:`stage_rows`). Raises BackendError (rolled back:
        the replica must stop, its memory is ahead of the file)."""
        if self._db is None:
            self._changed = False
            return
        if not self._changed:
            return  # (staged rows may wait in the open transaction: they are committed in batches)
        self._write("INSERT OR REPLACE INTO meta (name, v) VALUES ('state', ?)", (pack(self.header()),))
        self._changed = False
        self._commit_tx()
        self._staged_rows = 0

    def _commit_tx(self) -> None:
        db = self._conn()
        if not db.in_transaction:
            return
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise self._failure(exc) from exc

    def _rollback(self) -> None:
        db = self._db
        if db is not None and db.in_transaction:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def close(self) -> None:
        """Close the file; what was not committed is not written. Idempotent; reads raise
        BackendError from then on."""
        db, self._db = self._db, None
        if db is not None:
            if db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            db.close()

    def attach(self, persistence: Any, path: Path | None = None) -> None:
        raise TypeError("a DiskState writes its own file")


def open_disk_state(path: str | Path) -> DiskState:
    """A :class:`DiskState` in the SQLite file ``path`` (created if absent): its entries stay in the
    file. A file last written by the memory-resident form (``versioned_sqlite.open_state``) is brought
    to this form first, one pass over its rows. Raises :class:`BackendError` if the file cannot be
    opened or is malformed (nothing is left open then)."""
    path = Path(path)
    db = open_sqlite(path)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(_SCHEMA)
        row = db.execute("SELECT v FROM meta WHERE name = 'state'").fetchone()
        header = unpack(row[0]) if row is not None else {}
        if not isinstance(header, dict):
            raise StoreDecodeError("bad state header")
        state = DiskState(db, path)
        if header.get("disk") != 1:
            _bring_to_form(db)
            live, dead = db.execute("SELECT count(*), count(dead) FROM versions").fetchone()
            live -= dead
        else:
            live, dead = header["live"], header["dead"]
        _indexes(db, "versions")
        state._live, state._dead = live, dead
        if "seq" in header:
            state.last_seq = header["seq"]
            state.lineage = lineage_from_wire(header["lineage"])
            state.max_hlc = header["hlc"]
            state.applied = applied_from_wire(header["applied"])
            state.forgot_seq = state.last_seq
    except BaseException as exc:
        db.close()
        if isinstance(exc, (sqlite3.Error, StoreDecodeError, KeyError, TypeError, ValueError)):
            raise BackendError(f"cannot open {path}: {exc}") from exc
        raise
    return state


def _bring_to_form(db: sqlite3.Connection) -> None:
    """Give a memory-resident form's ``versions`` (``k``, ``v`` only, or columns not kept current)
    the columns this form keeps, computed from each row's version."""
    have = {name for _, name, *_ in db.execute("PRAGMA table_info(versions)")}
    db.execute("BEGIN IMMEDIATE")
    try:
        for name, kind in _COLUMNS:
            if name not in have:
                db.execute(f"ALTER TABLE versions ADD COLUMN {name} {kind}")
        after = b""
        while rows := db.execute("SELECT k, v FROM versions WHERE k > ? ORDER BY k LIMIT ?",
                                 (after, ROWS_PER_READ)).fetchall():
            db.executemany("UPDATE versions SET seq = ?, dead = ?, expiry = ? WHERE k = ?",
                           [(*version_columns(unpack(v)), k) for k, v in rows])
            after = rows[-1][0]
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise

