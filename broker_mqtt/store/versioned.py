"""The replicated state of an elected store: versioned entries, the log position, and the merge.

Theory of operation (``docs/elected-stores.md``):

* Every replica of an elected store keeps the same :class:`VersionedState`: per key the current
  :class:`Version` (value, hybrid-logical-clock time, writing node, the log sequence number of the
  write, and whether it is a *tombstone*: erased keys are remembered so that a merge can tell "erased
  on one side" from "never written"). Tombstones are held apart from the live entries (reads never
  see them), packed key -> its erasing record's stamp (``(hlc, origin, seq)`` in one int) in erase
  order. Entries are held out of the garbage collector's walk (see :class:`~.history.Stamps`).
  A ``forget`` op drops a tombstone for good (a store that erases many distinct keys would grow
  without it); it never touches a live value, and a merge with a replica that still
  holds the key's older value then brings that value back, so only tombstones older than any
  plausible split are forgotten: the master of an elected store appends ``forget`` records for the
  tombstones older than ``ReplicaConfig.tombstone_ttl`` (:func:`.log_ops.forget_ops`), so every replica
  forgets the same tombstones at the same log position.
* The state changes only by :meth:`VersionedState.apply`, one :class:`Record` of the master's log at
  a time, in sequence order. A record carries its epoch, so the state knows its *position*
  ``(seq, epoch of the record at seq)`` and its *lineage*: the list of ``(epoch, first seq)`` of the
  masterships that wrote it. Two replicas hold the same history up to ``seq`` exactly when their
  lineages give the same epoch for ``seq`` (as in Raft's log matching).
* ``applied`` remembers, per writer, the number of its last write in the state (and the answers of its
  recent ``put_unique``s and failed writes): a write that arrives again, at this master or the next
  one, is recognised and not applied twice.
* :func:`~.state_merge.merge` combines two states whose histories diverged (a healed network split): per key the
  version with the larger ``(hlc, origin)`` wins (last writer wins; pluggable), and every key that
  both sides wrote since their common history is reported as a :class:`Conflict`.
* A write command may compute its own effect (:class:`~.commands.ComputedCommand`, e.g. the queue
  operations of :mod:`broker_mqtt.queue`); an effect that changes several keys at once is one
  ``["many", [op, ...]]`` op, applied atomically in one record.
* Persistence: a state with a :class:`Persistence` attached (``versioned_sqlite.open_state(path)``:
  an SQLite file, WAL, ``synchronous=FULL``) writes every applied batch to it in one transaction
  before the replica acknowledges it, and a reopened state continues where it stopped. This module
  only says what to write; it opens no file.

The types the state is made of (epochs, lineages, versions, records, the clock) are :mod:`.history`'s,
re-exported here.
"""


from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from .errors import BackendError, NoSuchKey, StoreDecodeError
from .history import (
    STAMP_HLC_SHIFT,
    Change,
    Clock,
    Conflict,
    Epoch,
    Lineage,
    Position,
    Record,
    Resolver,
    Stamps,
    Version,
    _op_from_wire,
    contains,
    epoch_at,
    epoch_from_wire,
    fork_seq,
    last_writer_wins,
    lineage_from_wire,
    lineage_to_wire,
    position_from_wire,
    position_to_wire,
)
from .packing import pack, unpack, unpack_key
from .state_entries import StateEntries
from .writer_table import _Applied, applied_from_wire

__all__ = [
    "Epoch", "Position", "Lineage", "Version", "Record", "Change", "Conflict", "VersionedState", "StateEntries",
    "Persistence", "Resolver", "last_writer_wins", "epoch_at", "contains", "fork_seq", "Clock",
    "epoch_from_wire", "position_from_wire", "position_to_wire", "lineage_from_wire", "lineage_to_wire",
    "_op_from_wire",
]

RESULTS_KEPT = 64  # answers of recent put_unique / failed writes remembered per writer
WRITERS_KEPT = 100_000  # writers remembered; past it the 10 % least recently applied are forgotten
FORGET_KEYS = 1_000  # tombstones forgotten per forget record, at most
FORGET_BYTES = 64 * 1024  # packed key bytes per forget record, at most (one key always)
FORGET_RECORDS = 64  # forget records the master appends per tick, at most
NEW_KEYS_NOTED = 131_072  # new keys noted for a snapshot reader's order, at most (see begin_new_keys)


# -- the state -------------------------------------------------------------------------------------------

class Persistence(Protocol):
    """Where a state's committed batches go (:class:`~.versioned_sqlite.StateFile`: an SQLite file)."""

    def write(self, header: dict[str, Any], rows: Iterable[tuple[bytes, bytes]], gone: list[tuple[bytes]],
              *, replace_all: bool, from_staged: bool = False) -> None:
        """Durably, atomically: drop the ``gone`` keys (or every row, ``replace_all``; or take the
        staging area's rows in place of every row, ``from_staged``), store ``rows`` (packed key,
        packed version) and ``header``. Raises BackendError (nothing written)."""
        ...

    def stage(self, rows: Iterable[tuple[bytes, bytes]], gone: list[tuple[bytes]], *, fresh: bool) -> None:
        """In one transaction, to the staging area (a snapshot as it arrives; dropped if the process
        dies before ``write(..., from_staged=True)`` takes it): (``fresh``: empty it first) drop the
        ``gone`` keys, store ``rows``. Raises BackendError (nothing staged)."""
        ...

    def close(self) -> None:
        """Release it; idempotent."""
        ...


# The state holds no object per key that the garbage collector tracks (unless the value is a list or a
# dict): per key the value, an int stamp (hlc, seq and origin in one) and, if it expires, a float, in
# three dicts; the key itself is its packed bytes. A dict holding no tracked object is one the collector
# stops walking, and a full collection walks every object it tracks: with a Version object per key, a
# store's every key (bench/state_gc.py, 1,000,000 keys: 232 ms per full collection; now 9 ms).
_ABSENT: Any = object()


class VersionedState:
    """One replica's copy; see the module docstring. In memory only until a :class:`Persistence` is
    attached (:meth:`attach`; ``versioned_sqlite.open_state(path)`` opens a state from its file)."""

    #: its entries stay in its file (:class:`~.versioned_disk.DiskState`): a snapshot reader reads them
    #: in key order with :meth:`rows_after`, and a snapshot received is staged there only
    on_disk = False
    #: the error of its file on a read or a write (a state on disk reads its file), once one failed:
    #: a replica whose state failed must stop (a write computed meanwhile is not answered as refused)
    failed: BackendError | None = None

    def __init__(self) -> None:
        # live keys: packed key -> value, -> stamp (Stamps), -> expiry (only the keys that expire)
        self._values: dict[bytes, Any] = {}
        self._stamps: dict[bytes, int] = {}
        self._expiring: dict[bytes, float] = {}
        self._stamper = Stamps()
        self.last_seq = 0
        self.lineage: Lineage = []
        self.applied: dict[str, _Applied] = {}
        self.max_hlc = 0
        self.generation = 0  # grows with every replace(): derived indexes (queues) know to rebuild
        self._dirty: set[bytes] = set()  # keys written since the last commit (live, erased or forgotten)
        self._changed = False
        # erased keys -> their tombstone's stamp, in erase order (a merge's or a snapshot's: by hlc)
        self._tombstones: dict[bytes, int] = {}
        self._forget_after = 0.0  # wall-clock s before which forget_ops finds nothing (the master's pacing)
        self._new_keys: set[bytes] | None = None  # keys new since begin_new_keys (None: not noted)
        # the highest seq of an erase whose tombstone was forgotten (after an adopt or a load: the last
        # seq, not known better): a pass of changes since before it may not name a key a joiner holds
        self.forgot_seq = 0
        self._file: Persistence | None = None
        self.path: Path | None = None  # the file attached, if the opener says
        #: the largest log record, in bytes, this replica's broker carries (its I/O layer keeps it;
        #: None: unknown): a computed command keeps the records it makes under it
        self.record_limit: int | None = None

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
        return [unpack_key(k) for k in self._old_tombstones(before_hlc, limit)]

    def _old_tombstones(self, before_hlc: int, limit: int, max_bytes: int | None = None) -> list[bytes]:
        out: list[bytes] = []
        size = 0
        for k, stamp in self._tombstones.items():
            if stamp >> STAMP_HLC_SHIFT >= before_hlc or len(out) >= limit:
                break
            size += len(k)
            if max_bytes is not None and out and size > max_bytes:
                break
            out.append(k)
        return out

    @property
    def tombstones(self) -> int:
        """How many erased keys are remembered."""
        return len(self._tombstones)

    def largest_erased_int(self, below: int) -> int | None:
        """The largest int key ``0 <= key < below`` among the erased keys remembered (tombstones),
        or None. Nothing is decoded but the answer: the canonical encoding orders the ints from 0 to
        2**64 - 1 as the numbers, below every other key's (so ``24 <= below <= 2**64``)."""
        if not 24 <= below <= 1 << 64:
            raise ValueError(f"below must be in 24..2**64, not {below}")
        limit = pack(below) if below < 1 << 64 else b"\x1c"  # (2**64 is a bignum: a tag, 0xc2)
        largest = max((k for k in self._tombstones if k < limit), default=None)
        return None if largest is None else int(unpack_key(largest))

    def version(self, key: Any) -> Version | None:
        """The key's current version: live, a tombstone, or None (never written, or forgotten)."""
        return self.packed_version(pack(key))

    def value(self, key: Any, default: Any = None) -> Any:
        """The key's live value, or ``default`` (erased, or never written); no :class:`Version` built."""
        return self._values.get(pack(key), default)

    def _live_value(self, k: bytes, default: Any = None) -> Any:
        """The live value of the key packed as ``k``, or ``default``."""
        return self._values.get(k, default)

    def get(self, key: Any) -> Any:
        value = self._values.get(pack(key), _ABSENT)
        if value is _ABSENT:
            raise NoSuchKey(key)
        return value

    def exists(self, key: Any) -> bool:
        return pack(key) in self._values

    def keys(self) -> list[Any]:
        """Every live key, decoded from its packed form (an array key as a tuple)."""
        return [unpack_key(k) for k in self._values]

    def items(self) -> list[tuple[Any, Any]]:
        return [(unpack_key(k), v) for k, v in self._values.items()]

    def __len__(self) -> int:
        return len(self._values)

    def versions(self) -> list[tuple[Any, Version]]:
        """Every ``(key, version)``, tombstones included (after the live keys)."""
        return [(unpack_key(k), v) for k, v in self._packed_versions()]

    def _packed_versions(self) -> Iterator[tuple[bytes, Version]]:
        parts, expiring = self._stamper.parts, self._expiring
        for k, value in self._values.items():
            hlc, origin, seq = parts(self._stamps[k])
            yield k, Version(value, hlc, origin, seq, False, expiring.get(k))
        for k, stamp in self._tombstones.items():
            hlc, origin, seq = parts(stamp)
            yield k, Version(None, hlc, origin, seq, True)

    def _keyed(self) -> dict[bytes, tuple[Any, Version]]:
        """Packed key -> ``(key, version)``, tombstones included."""
        return {k: (unpack_key(k), v) for k, v in self._packed_versions()}

    def packed_keys(self) -> Iterable[bytes]:
        """Every key (tombstones included) as :func:`~.packing.pack` gives it (a streamed snapshot's order)."""
        return itertools.chain(self._values.keys(), self._tombstones.keys())

    def packed_version(self, k: bytes) -> Version | None:
        """The version of the key packed as ``k`` (a tombstone included), or None."""
        value = self._values.get(k, _ABSENT)
        if value is not _ABSENT:
            hlc, origin, seq = self._stamper.parts(self._stamps[k])
            return Version(value, hlc, origin, seq, False, self._expiring.get(k))
        stamp = self._tombstones.get(k)
        if stamp is None:
            return None
        hlc, origin, seq = self._stamper.parts(stamp)
        return Version(None, hlc, origin, seq, True)

    def rows_after(self, after: bytes | None, since_seq: int, upto_seq: int,
                   limit: int) -> list[tuple[bytes, bytes | None]]:
        """Only a state :attr:`on_disk` reads its entries in key order (:class:`~.versioned_disk.DiskState`)."""
        raise NotImplementedError("a memory-resident state keeps no key order")

    def begin_new_keys(self) -> None:
        """From now on note the keys that come into the state (written or erased for the first time,
        or since they were forgotten), up to NEW_KEYS_NOTED: a snapshot reader's key order taken at
        this moment is then brought up to date by sorting only those (:meth:`take_new_keys`)."""
        self._new_keys = set()

    def take_new_keys(self) -> set[bytes] | None:
        """The keys new since :meth:`begin_new_keys` or the last call, noting on from now; None if
        more came than are noted (or none are noted): the noting has stopped."""
        new = self._new_keys
        if new is not None:
            self._new_keys = set()
        return new

    def _note_new(self, k: bytes) -> None:
        new = self._new_keys
        if new is not None:
            new.add(k)
            if len(new) > NEW_KEYS_NOTED:
                self._new_keys = None

    def next_expiry(self) -> tuple[float, Any] | None:
        """``(expiry, key)`` of the key that expires first, or None."""
        if not self._expiring:
            return None
        k, expiry = min(self._expiring.items(), key=lambda item: item[1])
        return expiry, unpack_key(k)

    def applied_n(self, writer: str) -> int:
        a = self.applied.get(writer)
        return 0 if a is None else a.n

    # -- changes ------------------------------------------------------------------------------------

    def apply(self, record: Record, *, report: bool = True) -> list[Change]:
        """Apply the next record (``record.seq`` must be ``last_seq + 1``); return visible changes
        (``report=False``: none built, an empty list: nobody reads a work queue's at its standbys)."""
        if record.seq != self.last_seq + 1:
            raise ValueError(f"record {record.seq} does not follow {self.last_seq}")
        changes: list[Change] | None = [] if report else None
        op = record.op
        origin = record.origin
        stamp = self._stamper.stamp(record.hlc, origin, record.seq)
        for one in (op[1] if op[0] == "many" else (op,)):
            if one[0] == "put":  # the usual op: applied here, a call less per op
                key = one[1]
                self._set(pack(key), key, one[2], stamp, origin, one[3], changes)
            else:
                self._apply_op(one, stamp, origin, changes)
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
        return [] if changes is None else changes

    def _apply_op(self, op: tuple[Any, ...], stamp: int, origin: str, changes: list[Change] | None) -> None:
        """Apply one op of a record (its ``stamp``, its ``origin``), not a ``put`` (apply does those) nor
        a ``many``; append its visible changes to ``changes`` (None: build none)."""
        kind = op[0]
        if kind == "erase" or kind == "expire":
            key = op[1]
            self._tombstone(pack(key), key, stamp, origin, changes, kind == "expire")
        elif kind == "clear":
            for k in list(self._values):
                self._tombstone(k, unpack_key(k), stamp, origin, changes, False)
        elif kind == "forget":
            k = pack(op[1])
            erased = self._tombstones.pop(k, None)
            if erased is not None:
                self._dirty.add(k)
                self.forgot_seq = max(self.forgot_seq, Stamps.seq_of(erased))
        elif kind == "push" or kind == "pop":
            key, k = op[1], pack(op[1])
            items = self._live_value(k)
            items = items if isinstance(items, (list, tuple)) else ()
            value = [*items, op[2]] if kind == "push" else list(items[:-1])
            self._set(k, key, value, stamp, origin, op[-1], changes)

    # _set and _tombstone take the key both packed (``k``, the dict key) and as given (``key``), and
    # append the visible change to ``changes`` (None: none is built). ``if self._expiring``: a state
    # without expiring keys (a work queue's) skips the dict operation.

    def _set(self, k: bytes, key: Any, value: Any, stamp: int, origin: str, expiry: float | None,
             changes: list[Change] | None) -> None:
        old = self._values.get(k, _ABSENT)
        self._values[k] = value
        self._stamps[k] = stamp
        self._dirty.add(k)
        if expiry is not None:
            self._expiring[k] = expiry
        elif self._expiring:
            self._expiring.pop(k, None)
        if old is _ABSENT:
            if (not self._tombstones or self._tombstones.pop(k, _ABSENT) is _ABSENT) and self._new_keys is not None:
                self._note_new(k)
            if changes is not None:
                changes.append(Change(key, False, None, True, value, origin))
        elif changes is not None:
            changes.append(Change(key, True, old, True, value, origin))

    def _tombstone(self, k: bytes, key: Any, stamp: int, origin: str, changes: list[Change] | None,
                   expired: bool) -> None:
        old = self._values.pop(k, _ABSENT)
        self._dirty.add(k)
        if old is _ABSENT:
            # re-inserted below, at the end: the order is that of erasure
            if self._tombstones.pop(k, _ABSENT) is _ABSENT and self._new_keys is not None:
                self._note_new(k)
        else:
            del self._stamps[k]
            if self._expiring:
                self._expiring.pop(k, None)
        self._tombstones[k] = stamp
        if old is not _ABSENT and changes is not None:
            changes.append(Change(key, True, old, False, None, origin, expired))

    def replace(self, versions: Iterable[tuple[Any, Version]], *, last_seq: int, lineage: Lineage,
                applied: dict[str, _Applied], max_hlc: int, report: bool = True) -> list[Change]:
        """Replace everything (a snapshot or a merge); return the visible changes (``report=False``:
        none built, an empty list; a joiner's would be one per key). Raises StoreDecodeError for a
        version whose seq is out of range (nothing replaced then)."""
        entries = StateEntries()
        for key, v in versions:
            entries.set(pack(key), v)
        return self.adopt(entries, last_seq=last_seq, lineage=lineage, applied=applied, max_hlc=max_hlc,
                          report=report)

    def adopt(self, entries: StateEntries, *, last_seq: int, lineage: Lineage, applied: dict[str, _Applied],
              max_hlc: int, report: bool = True, staged: int | None = None) -> list[Change]:
        """Replace everything with ``entries`` (built as a snapshot arrived, :mod:`.snapshot_stream`,
        or by :meth:`replace`), taking its dicts as they are: without ``report``, nothing is walked
        per key. Returns the visible changes (``report=False``: none, an empty list).

        ``staged``: the token of a :meth:`begin_staging` whose staged rows are exactly ``entries``
        (:meth:`stage_rows` took every chunk). The next :meth:`commit` then takes those rows as the
        file's rows, in one swap, instead of writing every entry again in one transaction (5-6 s of
        stalled event loop per million keys). A stale token (staging began again since) is ignored."""
        values, stamps = entries.values, entries.stamps
        changes: list[Change] = []  # erased and updated keys in their order here, then the inserted ones
        if report:
            origin = entries.stamper.parts
            before = self._values
            for k, old in before.items():
                new = values.get(k, _ABSENT)
                if new is _ABSENT:
                    changes.append(Change(unpack_key(k), True, old, False, None, None))
                elif new != old or type(new) is not type(old):
                    changes.append(Change(unpack_key(k), True, old, True, new, origin(stamps[k])[1]))
            changes.extend(Change(unpack_key(k), False, None, True, new, origin(stamps[k])[1])
                           for k, new in values.items() if k not in before)
        self._values, self._stamps, self._expiring, self._stamper = values, stamps, entries.expiring, entries.stamper
        self._index_tombstones([(hlc, k, stamp) for k, (hlc, stamp) in entries.dead.items()])
        self._changed = True
        self.last_seq, self.lineage = last_seq, list(lineage)
        self.forgot_seq = last_seq
        self.applied = {w: _Applied(a.n, a.seq, dict(a.results)) for w, a in applied.items()}
        self.max_hlc = max(self.max_hlc, max_hlc)
        self._dirty = set()
        self._new_keys = None  # (a reader's order is of the state replaced: it takes its order again)
        self._from_staged = staged is not None and staged == self._staging and self._file is not None
        self._rewrite_all = not self._from_staged
        self._staging += 1  # the staged rows are taken (or stale): no stage_rows until begin_staging
        self.generation += 1
        return changes

    # -- wire form of the whole state (snapshots) -------------------------------------------------------

    def to_wire(self) -> dict[str, Any]:
        return {
            "seq": self.last_seq,
            "lineage": lineage_to_wire(self.lineage),
            "hlc": self.max_hlc,
            "applied": [[w, a.n, a.seq, [[n, r] for n, r in a.results.items()]] for w, a in self.applied.items()],
            "versions": [[key, v.to_wire()] for key, v in self.versions()],
        }

    @staticmethod
    def parts_from_wire(wire: Any) -> dict[str, Any]:
        """Decode :meth:`to_wire`'s form into keyword arguments of :meth:`adopt`."""
        try:
            entries = StateEntries()
            for key, v in wire["versions"]:
                entries.set(pack(key), Version.from_wire(v))
            applied = applied_from_wire(wire["applied"])
            last_seq, hlc = wire["seq"], wire["hlc"]
            if not (isinstance(last_seq, int) and isinstance(hlc, int)):
                raise StoreDecodeError("bad snapshot header")
            return {"entries": entries, "last_seq": last_seq, "lineage": lineage_from_wire(wire["lineage"]),
                    "applied": applied, "max_hlc": hlc}
        except (KeyError, TypeError, ValueError, OverflowError) as exc:  # (int() of an infinity)
            raise StoreDecodeError(f"bad snapshot: {exc}") from exc

    # -- persistence ----------------------------------------------------------------------------------

    _rewrite_all = False
    _from_staged = False
    _staging = 0  # the token of the current staging (see begin_staging); a new one on every begin

    def begin_staging(self) -> int | None:
        """Start staging a snapshot's rows in the persistence, emptying what was staged before: the
        token for :meth:`stage_rows` and :meth:`adopt`, or None without a persistence (nothing to
        stage in). Raises BackendError."""
        if self._file is None:
            return None
        self._staging += 1
        if self._from_staged:  # an adopt took the table and is not committed yet: it writes every row now
            self._from_staged, self._rewrite_all = False, True
        self._file.stage((), [], fresh=True)
        return self._staging

    def stage_rows(self, token: int, rows: Iterable[tuple[Any, ...]], gone: list[tuple[bytes]], *,
                   first_pass: bool = False) -> bool:
        """Stage ``rows`` (packed key, packed version, as :meth:`packed_row` gives it) and drop the
        ``gone`` keys, in one transaction. False, and nothing staged, if ``token`` is not the current
        staging's (staging began again, or an adopt took it). Raises BackendError, and the staging
        is then stale (an adopt naming it writes every row). ``first_pass``: for a state on disk,
        which counts what it stages (:class:`~.versioned_disk.DiskState`); nothing here."""
        if self._file is None or token != self._staging:
            return False
        try:
            self._file.stage(rows, gone, fresh=False)
        except BaseException:
            self._staging += 1  # the table misses these rows: no adopt may take it
            raise
        return True

    def attach(self, persistence: Persistence, path: Path | None = None) -> None:
        """From now on :meth:`commit` writes to ``persistence`` (loaded into this state by :meth:`load`
        first, if it holds anything); ``path``: the file it is, for ``self.path``."""
        self._file = persistence
        self.path = path

    def load(self, rows: Iterator[tuple[bytes, bytes]], meta: Callable[[], dict[str, Any]]) -> None:
        """Read persisted versions and header into this (empty) state: ``rows`` yields ``(packed key,
        packed version)``, ``meta()`` the decoded header rows (:meth:`StateFile.open`'s loader)."""
        dead: list[tuple[int, bytes, int]] = []
        stamp = self._stamper.stamp
        for k, v in rows:
            version = Version.from_wire(unpack(v))
            if version.deleted:
                dead.append((version.hlc, k, stamp(version.hlc, version.origin, version.seq)))
                continue
            self._values[k] = version.value
            self._stamps[k] = stamp(version.hlc, version.origin, version.seq)
            if version.expiry is not None:
                self._expiring[k] = version.expiry
        header = meta()
        self._index_tombstones(dead)
        if "state" in header:
            parts = header["state"]
            self.last_seq = parts["seq"]
            self.lineage = lineage_from_wire(parts["lineage"])
            self.max_hlc = parts["hlc"]
            self.applied = applied_from_wire(parts["applied"])
            self.forgot_seq = self.last_seq

    def _index_tombstones(self, dead: list[tuple[int, bytes, int]]) -> None:
        """Hold these ``(hlc, packed key, stamp)`` as the tombstones, oldest first."""
        dead.sort(key=lambda item: (item[0], item[1]))
        self._tombstones = {k: stamp for _, k, stamp in dead}

    def packed_row(self, k: bytes, after_seq: int = -1) -> bytes | None:
        """The key packed as ``k`` in its persisted and snapshot form (``pack(Version.to_wire())``, a
        tombstone included) if it was last written after ``after_seq``; else (or if gone) None."""
        value = self._values.get(k, _ABSENT)
        stamp = self._stamps[k] if value is not _ABSENT else self._tombstones.get(k)
        if stamp is None or Stamps.seq_of(stamp) <= after_seq:
            return None
        hlc, origin, seq = self._stamper.parts(stamp)
        if value is _ABSENT:
            return pack([None, hlc, origin, seq, True, None])
        return pack([value, hlc, origin, seq, False, self._expiring.get(k)])

    def commit(self) -> None:
        """Make everything applied so far durable (no-op without a persistence). Raises BackendError."""
        if self._file is None or not self._changed:
            self._dirty.clear()
            self._changed = False
            return
        header = {
            "seq": self.last_seq, "lineage": lineage_to_wire(self.lineage), "hlc": self.max_hlc,
            "applied": [[w, a.n, a.seq, a.packed_results()] for w, a in self.applied.items()],
        }
        gone: list[tuple[bytes]] = []
        changed: list[tuple[bytes, bytes]] = []
        if not self._rewrite_all:
            for k in self._dirty:
                row = self.packed_row(k)
                if row is None:
                    gone.append((k,))
                else:
                    changed.append((k, row))
        # all of them: packed as SQLite takes them, never all at once in memory
        rows = ((k, row) for k in self.packed_keys() if (row := self.packed_row(k)) is not None) \
            if self._rewrite_all else changed
        self._file.write(header, rows, gone, replace_all=self._rewrite_all, from_staged=self._from_staged)
        self._dirty.clear()
        self._rewrite_all = self._from_staged = False
        self._changed = False

    def close(self) -> None:
        """Close the persistence (if any); what was not committed is not written. Idempotent; the
        in-memory state stays readable, ``commit()`` becomes a no-op."""
        if self._file is not None:
            self._file.close()
            self._file = None

