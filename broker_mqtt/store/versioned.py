"""The replicated state of an elected store: versioned entries, the log position, and the merge.

Theory of operation (``docs/elected-stores.md``):

* Every replica of an elected store keeps the same :class:`VersionedState`: per key the current
  :class:`Version` (value, hybrid-logical-clock time, writing node, the log sequence number of the
  write, and whether it is a *tombstone*: erased keys are remembered so that a merge can tell "erased
  on one side" from "never written"). Reads skip tombstones. A ``forget`` op drops a tombstone for
  good (a store that erases many distinct keys, such as a work queue, would grow without it); it
  never touches a live value, and a merge with a replica that still holds the key's older value
  then brings that value back, so only tombstones older than any plausible split are forgotten.
* The state changes only by :meth:`VersionedState.apply`, one :class:`Record` of the master's log at
  a time, in sequence order. A record carries its epoch, so the state knows its *position*
  ``(seq, epoch of the record at seq)`` and its *lineage*: the list of ``(epoch, first seq)`` of the
  masterships that wrote it. Two replicas hold the same history up to ``seq`` exactly when their
  lineages give the same epoch for ``seq`` (as in Raft's log matching).
* ``applied`` remembers, per writer, the number of its last write in the state (and the answers of its
  recent ``put_unique``s and failed writes): a write that arrives again, at this master or the next
  one, is recognised and not applied twice.
* :func:`merge` combines two states whose histories diverged (a healed network split): per key the
  version with the larger ``(hlc, origin)`` wins (last writer wins; pluggable), and every key that
  both sides wrote since their common history is reported as a :class:`Conflict`.
* A write command may compute its own effect (:class:`~.commands.ComputedCommand`, e.g. the queue
  operations of :mod:`broker_mqtt.queue`); an effect that changes several keys at once is one
  ``["many", [op, ...]]`` op, applied atomically in one record.
* Persistence: with a ``path``, every applied batch is written to SQLite in one transaction
  (WAL, ``synchronous=FULL``) before the replica acknowledges it, and a reopened state continues where
  it stopped.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .backend import _pack, _pack_array, _Packed, _unpack, open_sqlite, sqlite_transaction
from .commands import Clear, ComputedCommand, Erase, Put, PutUnique, WriteCommand
from .errors import BackendError, NoSuchKey, StoreDecodeError
from .master import _new_value

__all__ = [
    "Epoch",
    "Position",
    "Version",
    "Record",
    "Change",
    "Conflict",
    "VersionedState",
    "Resolver",
    "last_writer_wins",
    "merge",
    "epoch_at",
    "contains",
    "fork_seq",
    "Clock",
    "compute_op",
    "merge_histories",
]

Epoch = tuple[int, str]  #: (term, node id of the master): ordered, and no two nodes claim the same
Position = tuple[int, Epoch | None]  #: (seq, epoch of the record at seq); (0, None) is the empty state
Lineage = list[tuple[Epoch, int]]  #: [(epoch, first seq it wrote), ...], epochs increasing

RESULTS_KEPT = 64  # answers of recent put_unique / failed writes remembered per writer
WRITERS_KEPT = 100_000  # writers remembered; past it the 10 % least recently applied are forgotten


class Clock:
    """A hybrid logical clock: ``now()`` is >= wall-clock microseconds and > every time seen."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        self.last = 0

    def now(self) -> int:
        self.last = max(self.last + 1, int(self._wall() * 1_000_000))
        return self.last

    def observe(self, hlc: int) -> None:
        if hlc > self.last:
            self.last = hlc


# Version and Change are built once per applied op: they write their frozen dataclass __init__ out
# (init=False), setting the slots through a module-level object.__setattr__, which is ~30 % cheaper
# than the generated one (it looks object.__setattr__ up per field). A test checks the fields match.
_set_slot = object.__setattr__


@dataclass(frozen=True, slots=True, init=False)
class Version:
    """One key's current version. ``deleted``: a tombstone (the key is absent for readers)."""

    value: Any
    hlc: int
    origin: str
    seq: int
    deleted: bool = False
    expiry: float | None = None  # absolute wall-clock seconds, enforced by the master

    def __init__(self, value: Any, hlc: int, origin: str, seq: int, deleted: bool = False,
                 expiry: float | None = None) -> None:
        _set_slot(self, "value", value)
        _set_slot(self, "hlc", hlc)
        _set_slot(self, "origin", origin)
        _set_slot(self, "seq", seq)
        _set_slot(self, "deleted", deleted)
        _set_slot(self, "expiry", expiry)

    def to_wire(self) -> list[Any]:
        return [self.value, self.hlc, self.origin, self.seq, self.deleted, self.expiry]

    @classmethod
    def from_wire(cls, wire: Any) -> Version:
        try:
            value, hlc, origin, seq, deleted, expiry = wire
        except (TypeError, ValueError) as exc:
            raise StoreDecodeError(f"bad version {wire!r:.100}") from exc
        if not (isinstance(hlc, int) and isinstance(origin, str) and isinstance(seq, int)
                and isinstance(deleted, bool) and (expiry is None or isinstance(expiry, (int, float)))):
            raise StoreDecodeError(f"bad version {wire!r:.100}")
        return cls(value, hlc, origin, seq, deleted, expiry)


# -- log records ---------------------------------------------------------------------------------------
# op: ["put", key, value, expiry] | ["erase", key] | ["expire", key] | ["clear"] | ["noop"] (a failed write)
#     | ["forget", key] (drop the key's tombstone; a live value is kept)
#     | ["many", [op, ...]] (several of the others, applied in order in one record; not nested)
_OPS = {"put": 4, "erase": 2, "expire": 2, "clear": 1, "noop": 1, "many": 2, "forget": 2}


def _op_from_wire(op: Any) -> tuple[Any, ...] | None:
    """A received op as :attr:`Record.op` holds it (tuples), or None if malformed: a known kind with
    its number of fields; a ``many`` holds a list of the others. Checked and converted in one pass."""
    if not (isinstance(op, (list, tuple)) and op and _OPS.get(op[0]) == len(op)):
        return None
    if op[0] != "many":
        return tuple(op)
    ops = op[1]
    if not isinstance(ops, (list, tuple)):
        return None
    out = []
    for one in ops:
        if not (isinstance(one, (list, tuple)) and one and _OPS.get(one[0]) == len(one)) or one[0] == "many":
            return None
        out.append(tuple(one))
    return ("many", out)


@dataclass(frozen=True, slots=True)
class Record:
    """One entry of the master's log: write ``n`` of ``writer`` (``origin``: its endpoint), applied at
    ``seq`` in ``epoch`` with HLC time ``hlc``, with effect ``op`` and answer ``result``."""

    seq: int
    epoch: Epoch
    hlc: int
    origin: str
    writer: str
    n: int
    op: tuple[Any, ...]
    result: Any = None

    def to_wire(self) -> list[Any]:
        # the op as it is: CBOR encodes tuples as arrays, and from_wire takes either
        return [self.seq, list(self.epoch), self.hlc, self.origin, self.writer, self.n, self.op, self.result]

    @classmethod
    def from_wire(cls, wire: Any) -> Record:
        try:
            seq, epoch, hlc, origin, writer, n, op, result = wire
            epoch = epoch_from_wire(epoch)
        except (TypeError, ValueError) as exc:
            raise StoreDecodeError(f"bad log record {wire!r:.100}") from exc
        op = _op_from_wire(op)
        if not (isinstance(seq, int) and seq > 0 and isinstance(hlc, int) and isinstance(origin, str)
                and isinstance(writer, str) and isinstance(n, int) and op is not None):
            raise StoreDecodeError(f"bad log record {wire!r:.100}")
        return cls(seq, epoch, hlc, origin, writer, n, op, result)


def epoch_from_wire(wire: Any) -> Epoch:
    if not (isinstance(wire, (list, tuple)) and len(wire) == 2 and isinstance(wire[0], int)
            and not isinstance(wire[0], bool) and isinstance(wire[1], str)):
        raise StoreDecodeError(f"bad epoch {wire!r:.60}")
    return (wire[0], wire[1])


def position_from_wire(wire: Any) -> Position:
    if not (isinstance(wire, (list, tuple)) and len(wire) == 2 and isinstance(wire[0], int)):
        raise StoreDecodeError(f"bad position {wire!r:.60}")
    return (wire[0], None if wire[1] is None else epoch_from_wire(wire[1]))


def position_to_wire(pos: Position) -> list[Any]:
    return [pos[0], None if pos[1] is None else list(pos[1])]


def lineage_from_wire(wire: Any) -> Lineage:
    if not isinstance(wire, (list, tuple)):
        raise StoreDecodeError(f"bad lineage {wire!r:.60}")
    out: Lineage = []
    for item in wire:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[1], int)):
            raise StoreDecodeError(f"bad lineage entry {item!r:.60}")
        out.append((epoch_from_wire(item[0]), item[1]))
    return out


def lineage_to_wire(lineage: Lineage) -> list[Any]:
    return [[list(e), s] for e, s in lineage]


def epoch_at(lineage: Lineage, last_seq: int, seq: int) -> Epoch | None:
    """The epoch of the record at ``seq`` in a history with this lineage (None: no such record)."""
    if seq <= 0 or seq > last_seq:
        return None
    found: Epoch | None = None
    for epoch, first in lineage:
        if first > seq:
            break
        found = epoch
    return found


def contains(lineage: Lineage, last_seq: int, pos: Position) -> bool:
    """Whether the history (``lineage``, ``last_seq``) holds the history that ends at ``pos``."""
    seq, epoch = pos
    return seq == 0 or epoch_at(lineage, last_seq, seq) == epoch


def fork_seq(a: Lineage, a_last: int, b: Lineage, b_last: int) -> int:
    """The last sequence number up to which histories ``a`` and ``b`` are identical."""
    common = 0
    for (ea, sa), (eb, sb) in zip(a, b, strict=False):
        if ea != eb or sa != sb:
            return max(0, min(sa, sb, a_last + 1, b_last + 1) - 1)
        common += 1
    # an identical lineage prefix: they agree up to where the shorter one ends
    ends = [a_last, b_last]
    if common < len(a):
        ends.append(a[common][1] - 1)
    if common < len(b):
        ends.append(b[common][1] - 1)
    return max(0, min(ends))


# -- changes and conflicts -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, init=False)
class Change:
    """A key's visible value changed: ``old``/``new`` are None when absent (see ``existed``/``exists``)."""

    key: Any
    existed: bool
    old: Any
    exists: bool
    new: Any
    origin: str | None
    expired: bool = False

    def __init__(self, key: Any, existed: bool, old: Any, exists: bool, new: Any, origin: str | None,
                 expired: bool = False) -> None:  # written out: see Version
        _set_slot(self, "key", key)
        _set_slot(self, "existed", existed)
        _set_slot(self, "old", old)
        _set_slot(self, "exists", exists)
        _set_slot(self, "new", new)
        _set_slot(self, "origin", origin)
        _set_slot(self, "expired", expired)


@dataclass(frozen=True, slots=True)
class Conflict:
    """``key`` was written on both sides of a healed split: ``chosen`` won over ``other``."""

    key: Any
    chosen: Version
    other: Version

    def to_wire(self) -> list[Any]:
        return [self.key, self.chosen.to_wire(), self.other.to_wire()]

    @classmethod
    def from_wire(cls, wire: Any) -> Conflict:
        try:
            key, chosen, other = wire
        except (TypeError, ValueError) as exc:
            raise StoreDecodeError(f"bad conflict {wire!r:.100}") from exc
        return cls(key, Version.from_wire(chosen), Version.from_wire(other))


Resolver = Callable[[Any, Version, Version], Version]


def last_writer_wins(key: Any, a: Version, b: Version) -> Version:
    """The default resolver: the larger ``(hlc, origin)`` wins; deterministic on every node."""
    return a if (a.hlc, a.origin) >= (b.hlc, b.origin) else b


# -- the state -------------------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS versions (k BLOB PRIMARY KEY, v BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, v BLOB NOT NULL);
"""


@dataclass(slots=True)
class _Applied:
    n: int
    seq: int
    results: dict[int, Any] = field(default_factory=dict)
    # commit()'s cache: n -> (results[n], the encoding of [n, results[n]]); see packed_results
    packed: dict[int, tuple[Any, bytes]] = field(default_factory=dict, compare=False, repr=False)

    def packed_results(self) -> _Packed:
        """The encoding of ``[[n, result], ...]`` as the persisted header holds it. Each answer is
        encoded once, at the first commit that writes it: re-encoding the up to RESULTS_KEPT answers of
        every writer at every commit was most of the cost of a commit (a queue's acquire answers
        with its messages)."""
        cache = self.packed
        parts = []
        for n, result in self.results.items():
            hit = cache.get(n)
            if hit is None or hit[0] is not result:
                hit = cache[n] = (result, _pack([n, result]))
            parts.append(hit[1])
        if len(cache) > len(parts):  # answers dropped from results
            self.packed = {n: cache[n] for n in self.results}
        return _Packed(_pack_array(parts))


class VersionedState:
    """One replica's copy; see the module docstring. ``path``: persist in this SQLite file."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._versions: dict[bytes, tuple[Any, Version]] = {}
        self.last_seq = 0
        self.lineage: Lineage = []
        self.applied: dict[str, _Applied] = {}
        self.max_hlc = 0
        self.generation = 0  # grows with every replace(): derived indexes (queues) know to rebuild
        self._dirty: dict[bytes, tuple[Any, Version] | None] = {}
        self._changed = False
        self._expiring: set[bytes] = set()  # keys whose version has an expiry
        self._tombstones: dict[bytes, int] = {}  # tombstone keys -> their hlc, oldest first (roughly)
        self._db: sqlite3.Connection | None = None
        self.path = None if path is None else Path(path)
        if self.path is not None:
            self._open()

    # -- reads ------------------------------------------------------------------------------------

    @property
    def position(self) -> Position:
        return (self.last_seq, self.lineage[-1][0] if self.lineage else None)

    def epoch_at(self, seq: int) -> Epoch | None:
        return epoch_at(self.lineage, self.last_seq, seq)

    def contains(self, pos: Position) -> bool:
        return contains(self.lineage, self.last_seq, pos)

    def old_tombstones(self, before_hlc: int, limit: int) -> list[Any]:
        """Up to ``limit`` keys whose tombstone is older than ``before_hlc``, oldest first (in the
        order they were erased: a tombstone that came with a merge may wait behind younger ones)."""
        out: list[Any] = []
        for k, hlc in self._tombstones.items():
            if hlc >= before_hlc or len(out) >= limit:
                break
            out.append(self._versions[k][0])
        return out

    @property
    def tombstones(self) -> int:
        """How many erased keys are remembered."""
        return len(self._tombstones)

    def version(self, key: Any) -> Version | None:
        item = self._versions.get(_pack(key))
        return None if item is None else item[1]

    def get(self, key: Any) -> Any:
        item = self._versions.get(_pack(key))
        if item is None or item[1].deleted:
            raise NoSuchKey(key)
        return item[1].value

    def exists(self, key: Any) -> bool:
        item = self._versions.get(_pack(key))
        return item is not None and not item[1].deleted

    def keys(self) -> list[Any]:
        return [k for k, v in self._versions.values() if not v.deleted]

    def items(self) -> list[tuple[Any, Any]]:
        return [(k, v.value) for k, v in self._versions.values() if not v.deleted]

    def __len__(self) -> int:
        return sum(1 for _, v in self._versions.values() if not v.deleted)

    def versions(self) -> Iterable[tuple[Any, Version]]:
        return self._versions.values()

    def next_expiry(self) -> tuple[float, Any] | None:
        """``(expiry, key)`` of the key that expires first, or None."""
        best: tuple[float, Any] | None = None
        for k in self._expiring:
            key, v = self._versions[k]
            if v.expiry is not None and not v.deleted and (best is None or v.expiry < best[0]):
                best = (v.expiry, key)
        return best

    def applied_n(self, writer: str) -> int:
        a = self.applied.get(writer)
        return 0 if a is None else a.n

    # -- changes ------------------------------------------------------------------------------------

    def apply(self, record: Record) -> list[Change]:
        """Apply the next record (``record.seq`` must be ``last_seq + 1``); return visible changes."""
        if record.seq != self.last_seq + 1:
            raise ValueError(f"record {record.seq} does not follow {self.last_seq}")
        changes: list[Change] = []
        op = record.op
        hlc, origin, seq = record.hlc, record.origin, record.seq
        for one in (op[1] if op[0] == "many" else (op,)):
            if one[0] == "put":  # the usual op: applied here, a call less per op
                key = one[1]
                self._set(_pack(key), key, Version(one[2], hlc, origin, seq, False, one[3]), changes)
            else:
                self._apply_op(one, record, changes)
        if not self.lineage or self.lineage[-1][0] != record.epoch:
            self.lineage.append((record.epoch, record.seq))
        self.last_seq = record.seq
        self._changed = True
        self.max_hlc = max(self.max_hlc, record.hlc)
        a = self.applied.get(record.writer)
        if a is None:
            a = self.applied[record.writer] = _Applied(0, 0)
        a.n, a.seq = max(a.n, record.n), record.seq
        if record.result is not None:
            a.results[record.n] = record.result
            if len(a.results) > RESULTS_KEPT:
                del a.results[min(a.results)]
        if len(self.applied) > WRITERS_KEPT:  # deterministic: every replica applies the same records
            keep = sorted(self.applied.items(), key=lambda item: item[1].seq)[WRITERS_KEPT // 10:]
            self.applied = dict(keep)
        return changes

    def _apply_op(self, op: tuple[Any, ...], record: Record, changes: list[Change]) -> None:
        """Apply one op of ``record``, not a ``put`` (apply does those) nor a ``many``; append its visible
        changes to ``changes``."""
        kind = op[0]
        if kind == "erase" or kind == "expire":
            key = op[1]
            self._tombstone(_pack(key), key, record, changes, kind == "expire")
        elif kind == "clear":
            for k, (key, v) in list(self._versions.items()):
                if not v.deleted:
                    self._tombstone(k, key, record, changes, False)
        elif kind == "forget":
            k = _pack(op[1])
            item = self._versions.get(k)
            if item is not None and item[1].deleted:
                del self._versions[k]
                self._tombstones.pop(k, None)
                self._dirty[k] = None

    # _set and _tombstone take the key both packed (``k``, the dict key) and as given (``key``), and
    # append the visible change to ``changes``. ``if self._expiring``: a state without expiring keys
    # (a work queue's) skips the set operation.

    def _set(self, k: bytes, key: Any, version: Version, changes: list[Change]) -> None:
        old = self._versions.get(k)
        self._versions[k] = self._dirty[k] = (key, version)
        if version.expiry is not None:
            self._expiring.add(k)
        elif self._expiring:
            self._expiring.discard(k)
        if old is not None and old[1].deleted:
            self._tombstones.pop(k, None)
            old = None
        changes.append(Change(key, old is not None, None if old is None else old[1].value, True, version.value,
                              version.origin))

    def _tombstone(self, k: bytes, key: Any, record: Record, changes: list[Change], expired: bool) -> None:
        old = self._versions.get(k)
        self._versions[k] = self._dirty[k] = (key, Version(None, record.hlc, record.origin, record.seq, True))
        if self._expiring:
            self._expiring.discard(k)
        if old is not None and old[1].deleted:
            self._tombstones.pop(k, None)  # re-inserted below, at the end: the order is that of erasure
            old = None
        self._tombstones[k] = record.hlc
        if old is not None:
            changes.append(Change(key, True, old[1].value, False, None, record.origin, expired))

    def replace(self, versions: Iterable[tuple[Any, Version]], *, last_seq: int, lineage: Lineage,
                applied: dict[str, _Applied], max_hlc: int) -> list[Change]:
        """Replace everything (a snapshot or a merge); return the visible changes."""
        new = {_pack(k): (k, v) for k, v in versions}
        changes: list[Change] = []
        for k, (key, v) in self._versions.items():
            if v.deleted:
                continue
            item = new.get(k)
            if item is None or item[1].deleted:
                changes.append(Change(key, True, v.value, False, None, None))
            elif item[1].value != v.value or type(item[1].value) is not type(v.value):
                changes.append(Change(key, True, v.value, True, item[1].value, item[1].origin))
        for k, (key, v) in new.items():
            old = self._versions.get(k)
            if not v.deleted and (old is None or old[1].deleted):
                changes.append(Change(key, False, None, True, v.value, v.origin))
        self._versions = new
        self._expiring = {k for k, (_, v) in new.items() if v.expiry is not None and not v.deleted}
        self._index_tombstones()
        self._changed = True
        self.last_seq, self.lineage = last_seq, list(lineage)
        self.applied = {w: _Applied(a.n, a.seq, dict(a.results)) for w, a in applied.items()}
        self.max_hlc = max(self.max_hlc, max_hlc)
        self._dirty = {}
        self._rewrite_all = True
        self.generation += 1
        return changes

    # -- wire form of the whole state (snapshots) -------------------------------------------------------

    def to_wire(self) -> dict[str, Any]:
        return {
            "seq": self.last_seq,
            "lineage": lineage_to_wire(self.lineage),
            "hlc": self.max_hlc,
            "applied": [[w, a.n, a.seq, [[n, r] for n, r in a.results.items()]] for w, a in self.applied.items()],
            "versions": [[key, v.to_wire()] for key, v in self._versions.values()],
        }

    @staticmethod
    def parts_from_wire(wire: Any) -> dict[str, Any]:
        """Decode :meth:`to_wire`'s form into keyword arguments of :meth:`replace`."""
        try:
            versions = [(key, Version.from_wire(v)) for key, v in wire["versions"]]
            applied = {}
            for w, n, seq, results in wire["applied"]:
                if not (isinstance(w, str) and isinstance(n, int) and isinstance(seq, int)):
                    raise StoreDecodeError("bad applied entry")
                applied[w] = _Applied(n, seq, {int(i): r for i, r in results})
            last_seq, hlc = wire["seq"], wire["hlc"]
            if not (isinstance(last_seq, int) and isinstance(hlc, int)):
                raise StoreDecodeError("bad snapshot header")
            return {"versions": versions, "last_seq": last_seq, "lineage": lineage_from_wire(wire["lineage"]),
                    "applied": applied, "max_hlc": hlc}
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreDecodeError(f"bad snapshot: {exc}") from exc

    # -- persistence ----------------------------------------------------------------------------------

    _rewrite_all = False

    def _open(self) -> None:
        """Open ``self.path`` and load what it holds. Raises :class:`BackendError` if the file cannot
        be opened or read; the connection is then closed again (``self._db`` stays None)."""
        assert self.path is not None
        db = open_sqlite(self.path)
        try:
            self._load(db)
        except BaseException as exc:
            db.close()
            if isinstance(exc, (sqlite3.Error, StoreDecodeError, KeyError, TypeError, ValueError)):
                raise BackendError(f"cannot open {self.path}: {exc}") from exc
            raise
        self._db = db

    def _load(self, db: sqlite3.Connection) -> None:
        """Set the file's WAL mode and schema up; read its versions and header into this state."""
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(_SCHEMA)
        for k, v in db.execute("SELECT k, v FROM versions"):
            key = _unpack(k)
            self._versions[bytes(k)] = (key, Version.from_wire(_unpack(v)))
            if self._versions[bytes(k)][1].expiry is not None:
                self._expiring.add(bytes(k))
        meta = {name: _unpack(v) for name, v in db.execute("SELECT name, v FROM meta")}
        self._index_tombstones()
        if "state" in meta:
            parts = meta["state"]
            self.last_seq = parts["seq"]
            self.lineage = lineage_from_wire(parts["lineage"])
            self.max_hlc = parts["hlc"]
            self.applied = {w: _Applied(n, s, {int(i): r for i, r in res}) for w, n, s, res in parts["applied"]}

    def _index_tombstones(self) -> None:
        dead = sorted((v.hlc, k) for k, (_, v) in self._versions.items() if v.deleted)
        self._tombstones = {k: hlc for hlc, k in dead}

    def commit(self) -> None:
        """Make everything applied so far durable (no-op without a path). Raises BackendError."""
        if self._db is None or not self._changed:
            self._dirty.clear()
            self._changed = False
            return
        header = {
            "seq": self.last_seq, "lineage": lineage_to_wire(self.lineage), "hlc": self.max_hlc,
            "applied": [[w, a.n, a.seq, a.packed_results()] for w, a in self.applied.items()],
        }
        with sqlite_transaction(self._db, self.path):
            if self._rewrite_all:
                self._db.execute("DELETE FROM versions")
                rows = [(k, _pack(v.to_wire())) for k, (_, v) in self._versions.items()]
            else:
                rows = [(k, _pack(item[1].to_wire())) for k, item in self._dirty.items() if item is not None]
                gone = [(k,) for k, item in self._dirty.items() if item is None]
                if gone:
                    self._db.executemany("DELETE FROM versions WHERE k = ?", gone)
            self._db.executemany("INSERT OR REPLACE INTO versions (k, v) VALUES (?, ?)", rows)
            self._db.execute("INSERT OR REPLACE INTO meta (name, v) VALUES ('state', ?)", (_pack(header),))
        self._dirty.clear()
        self._rewrite_all = False
        self._changed = False

    def close(self) -> None:
        """Close the SQLite file (if any); what was not committed is not written. Idempotent; the
        in-memory state stays readable, ``commit()`` becomes a no-op."""
        if self._db is not None:
            self._db.close()
            self._db = None


def _same(a: Version, b: Version) -> bool:
    """Both sides ended with the same value (e.g. the same write applied on each): no conflict."""
    return a.deleted == b.deleted and (a.deleted or (type(a.value) is type(b.value) and a.value == b.value))


def merge(a: VersionedState, b: VersionedState, *, resolver: Resolver = last_writer_wins
          ) -> tuple[list[tuple[Any, Version]], dict[str, _Applied], list[Conflict]]:
    """Merge two diverged states: ``(versions, applied, conflicts)``. Deterministic: the result does
    not depend on which state is ``a``. A conflict is a key both sides wrote after their fork."""
    fork = fork_seq(a.lineage, a.last_seq, b.lineage, b.last_seq)
    keyed_a = {k: item for k, item in a._versions.items()}
    keyed_b = {k: item for k, item in b._versions.items()}
    out: list[tuple[Any, Version]] = []
    conflicts: list[Conflict] = []
    for k in sorted(keyed_a.keys() | keyed_b.keys()):
        ia, ib = keyed_a.get(k), keyed_b.get(k)
        if ia is None or ib is None:
            item = ia if ib is None else ib
            assert item is not None
            out.append(item)
            continue
        va, vb = ia[1], ib[1]
        if (va.hlc, va.origin) == (vb.hlc, vb.origin):
            out.append(ia)
            continue
        first, second = (va, vb) if (va.hlc, va.origin) > (vb.hlc, vb.origin) else (vb, va)
        chosen = resolver(ia[0], first, second)
        other = second if chosen is first else first
        out.append((ia[0], chosen))
        if va.seq > fork and vb.seq > fork and not _same(va, vb):
            conflicts.append(Conflict(ia[0], chosen, other))
    applied: dict[str, _Applied] = {}
    for side in (a.applied, b.applied):
        for w, entry in side.items():
            mine = applied.get(w)
            if mine is None or entry.n > mine.n:
                applied[w] = _Applied(entry.n, entry.seq, {**(mine.results if mine else {}), **entry.results})
            else:
                mine.results = {**entry.results, **mine.results}
    return out, applied, conflicts


def merge_histories(states: list[VersionedState], epoch: Epoch, *, resolver: Resolver = last_writer_wins
                    ) -> tuple[dict[str, Any], list[Conflict]]:
    """Merge diverged histories into a new line of ``epoch``: ``(replace() arguments, conflicts)``.

    The new lineage is the histories' common prefix followed by ``epoch`` from the fork on; its last
    seq lies past every input's, so no input's position is contained in it (followers take a snapshot).
    """
    first = states[0]
    fork = min([fork_seq(first.lineage, first.last_seq, s.lineage, s.last_seq) for s in states[1:]]
               or [first.last_seq])
    merged, conflicts = first, []
    for other in states[1:]:
        versions, applied, found = merge(merged, other, resolver=resolver)
        conflicts.extend(found)
        step = VersionedState()
        step.replace(versions, last_seq=max(merged.last_seq, other.last_seq),
                     lineage=[(e, s) for e, s in merged.lineage if s <= fork],
                     applied=applied, max_hlc=max(merged.max_hlc, other.max_hlc))
        merged = step
    lineage = [*((e, s) for e, s in first.lineage if s <= fork), (epoch, fork + 1)]
    parts = {"versions": list(merged.versions()), "last_seq": max(s.last_seq for s in states) + 1,
             "lineage": lineage, "applied": merged.applied, "max_hlc": merged.max_hlc}
    return parts, conflicts


def compute_op(state: VersionedState, cmd: WriteCommand, wall: float) -> tuple[tuple[Any, ...], Any]:
    """The log effect of ``cmd`` on ``state`` and its answer; raise StoreError (then a ``noop``).

    A :class:`~.commands.ComputedCommand` computes its own (deterministic) effect."""
    if isinstance(cmd, ComputedCommand):
        return cmd.compute(state, wall)
    def expiry_of(duration: float | None) -> float | None:
        return None if duration is None else wall + duration

    def live(key: Any) -> tuple[bool, Any]:
        v = state.version(key)
        if v is None or v.deleted or (v.expiry is not None and v.expiry <= wall):
            return False, None
        return True, v.value

    match cmd:
        case Put(key=key, value=value, expiry=expiry):
            return ("put", key, value, expiry_of(expiry)), None
        case PutUnique(key=key, value=value, expiry=expiry):
            if live(key)[0]:
                return ("noop",), False
            return ("put", key, value, expiry_of(expiry)), True
        case Erase(key=key):
            return ("erase", key), None
        case Clear():
            return ("clear",), None
    exists, current = live(cmd.key)
    return ("put", cmd.key, _new_value(current, exists, cmd), expiry_of(cmd.expiry)), None
