"""What a master needs to take back the records nobody acknowledged (``docs/elected-stores.md`` § 3).

A master applies a write to its state before any other replica holds it; the write is acknowledged
once enough replicas do (its *durable point*). If the master is deposed, or has to merge a history it
does not hold, the records past its durable point were acknowledged to nobody: their writers send
them again to the next master. Such a master takes them back (:meth:`VersionedState.roll_back
<.versioned.VersionedState.roll_back>`), so that what it announces, merges and serves is its state
as of its durable point. Before, it only left them out of what it announced: a merge of its history
took its whole state, tail included, over the new master's acknowledged writes.

:class:`UndoLog` holds, for each record applied since the master's durable point, what the record
changed, as it was before: per key its version (or that there was none), per record the writer's
entry in the writer table, the length of the lineage and ``forgot_seq``. Taking records back restores
those, newest first. Entries up to the durable point are dropped as it advances
(:meth:`UndoLog.durable`). The log is bounded: past :data:`UNDO_KEPT` entries (a master whose writes
nobody acknowledges for long, with no live follower) it drops what it holds, and so does a record it
cannot take back cheaply (a ``clear``, the writer table's pruning); a roll back to below such a gap
(:attr:`UndoLog.gap`) is refused, and the replica falls back to leaving its tail out of what it
announces (as before).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from .history import Change, Lineage, Stamps
from .packing import unpack_key
from .state_entries import ABSENT
from .writer_table import _Applied

__all__ = ["UndoLog", "UndoableState", "UNDO_KEPT"]

UNDO_KEPT = 262_144  #: records and key entries an undo log holds at most (then it drops them: a gap)

# One record's entry: [seq, lineage length, forgot_seq, writer, (n, seq) of the writer before or None,
# answer slot before (see RESULT), an answer pruned (n, answer) or None, keys]. ``keys`` lists
# (packed key, value or absent, stamp or None, expiry or None) as each key was before the record
# changed it, in the order it did: taken back in reverse.
SEQ, LINEAGE, FORGOT, WRITER, BEFORE, RESULT, PRUNED, KEYS = range(8)
NO_RESULT: Any = object()  #: RESULT of a record that left the writer's answers alone
KeyBefore = tuple[bytes, Any, "int | None", "float | None"]


class UndoLog:
    """The undo entries of the records applied after :attr:`gap`, oldest first (see the module)."""

    __slots__ = ("records", "gap", "limit", "_size", "_current")

    def __init__(self, after: int, limit: int | None = None) -> None:
        self.records: deque[list[Any]] = deque()
        self.gap = after  #: no roll back to below this seq: the undo of records up to it is not held
        self.limit = UNDO_KEPT if limit is None else limit
        self._size = 0  # records and key entries held, the current record's keys not counted yet
        self._current: list[KeyBefore] | None = None  # the keys list of the last record begun

    def begin(self, seq: int, lineage: int, forgot_seq: int, writer: str,
              before: tuple[int, int] | None) -> list[KeyBefore] | None:
        """Record ``seq`` is being applied: its entry, and the list its keys' undo goes to; None when
        the log is full (it drops what it holds, and this record's undo is not taken: a gap)."""
        if self._current is not None:
            self._size += len(self._current)
            self._current = None
        if self._size >= self.limit:
            self.lose(seq)
            return None
        keys: list[KeyBefore] = []
        self.records.append([seq, lineage, forgot_seq, writer, before, NO_RESULT, None, keys])
        self._size += 1
        self._current = keys
        return keys

    def lose(self, seq: int) -> None:
        """The undo of the records up to ``seq`` is not held (dropped, or never taken)."""
        self.records.clear()
        self._size = 0
        self._current = None
        self.gap = max(self.gap, seq)

    def durable(self, upto: int) -> None:
        """Records up to ``upto`` are acknowledged: they are never taken back."""
        records = self.records
        while records and records[0][SEQ] <= upto:
            entry = records.popleft()
            keys = entry[KEYS]
            self._size -= 1 if keys is self._current else 1 + len(keys)
            if keys is self._current:
                self._current = None
        self.gap = max(self.gap, upto)

    def __len__(self) -> int:
        return len(self.records)


class UndoableState:
    """The part of :class:`~.versioned.VersionedState` that takes records back (see the module): the
    state's own fields it works on are declared here and set by the state."""

    _values: dict[bytes, Any]
    _stamps: dict[bytes, int]
    _expiring: dict[bytes, float]
    _tombstones: dict[bytes, int]
    _stamper: Stamps
    _dirty: set[bytes]
    _changed: bool
    _new_keys: set[bytes] | None
    _undo: UndoLog | None
    last_seq: int
    lineage: Lineage
    applied: dict[str, _Applied]
    forgot_seq: int
    generation: int

    def _note_new(self, k: bytes) -> None:
        raise NotImplementedError

    def keep_undo(self) -> None:
        """From now on keep what each record applied changes, until :meth:`undo_durable` says it was
        acknowledged, so that :meth:`roll_back` can take it back (a master's state)."""
        self._undo = UndoLog(self.last_seq)

    @property
    def keeps_undo(self) -> bool:
        """:meth:`keep_undo` is on."""
        return self._undo is not None

    def drop_undo(self) -> None:
        """Stop keeping it (no longer master); a replace or a snapshot stops it too."""
        self._undo = None

    def undo_durable(self, upto: int) -> None:
        """The records up to ``upto`` are acknowledged: they are never taken back."""
        if self._undo is not None:
            self._undo.durable(upto)

    def roll_back(self, to_seq: int, *, report: bool = True) -> list[Change] | None:
        """Take back the records after ``to_seq``: the state becomes what it was when ``to_seq`` was
        its last (the writer table and ``forgot_seq`` too; a tombstone put back counts as erased
        last, in the order :meth:`old_tombstones` follows). Returns the visible changes (``report``),
        or None, and nothing changed, when the undo of those records is not held (:meth:`keep_undo`
        was not on since, or its log dropped them: :mod:`.undo_log`)."""
        undo = self._undo
        if undo is None or not undo.gap <= to_seq <= self.last_seq or \
                (to_seq < self.last_seq and (not undo.records or undo.records[-1][SEQ] != self.last_seq)):
            return None
        before: dict[bytes, Any] = {}  # each key's visible value before, for the changes
        while undo.records and undo.records[-1][SEQ] > to_seq:
            entry = undo.records.pop()
            for k, value, stamp, expiry in reversed(entry[KEYS]):
                was = self._put_back(k, value, stamp, expiry)
                if report and k not in before:
                    before[k] = was
            a = self.applied[entry[WRITER]]
            if entry[PRUNED] is not None:
                n, result = entry[PRUNED]
                a.results[n] = result
            if entry[RESULT] is not NO_RESULT:
                n, result = entry[RESULT]
                if result is ABSENT:
                    del a.results[n]
                else:
                    a.results[n] = result
            if entry[BEFORE] is None:
                del self.applied[entry[WRITER]]
            else:
                a.n, a.seq = entry[BEFORE]
            del self.lineage[entry[LINEAGE]:]
            self.forgot_seq = entry[FORGOT]
            self.last_seq = entry[SEQ] - 1
        undo.lose(to_seq)  # (what is left is up to to_seq: nothing to take back below it)
        self._changed = True
        self.generation += 1  # derived indexes (a queue's, a snapshot reader's) are of the state taken back
        changes = []
        for k, was in before.items():
            now = self._values.get(k, ABSENT)
            if now is not was:
                origin = self._stamper.parts(self._stamps[k])[1] if now is not ABSENT else None
                changes.append(Change(unpack_key(k), was is not ABSENT, None if was is ABSENT else was,
                                      now is not ABSENT, None if now is ABSENT else now, origin))
        return changes

    def _key_before(self, k: bytes, value: Any) -> KeyBefore:
        """Key ``k``'s undo entry: its value (or absent), stamp (a tombstone's, if erased) and expiry."""
        if value is ABSENT:
            return k, value, self._tombstones.get(k) if self._tombstones else None, None
        return k, value, self._stamps[k], self._expiring.get(k) if self._expiring else None

    def _put_back(self, k: bytes, value: Any, stamp: int | None, expiry: float | None) -> Any:
        """Make key ``k`` what :meth:`_key_before` said it was; return its visible value until now."""
        was = self._values.pop(k, ABSENT)
        if was is not ABSENT:
            del self._stamps[k]
            self._expiring.pop(k, None)
            present = True
        else:
            present = self._tombstones.pop(k, None) is not None
        if value is not ABSENT:
            self._values[k] = value
            self._stamps[k] = stamp  # type: ignore[assignment]  # live: a stamp
            if expiry is not None:
                self._expiring[k] = expiry
        elif stamp is not None:
            self._tombstones[k] = stamp
        if not present and (value is not ABSENT or stamp is not None) and self._new_keys is not None:
            self._note_new(k)
        self._dirty.add(k)
        return was
