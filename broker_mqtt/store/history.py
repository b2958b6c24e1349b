"""The vocabulary of a replicated history: epochs, positions, lineages, versions, log records.

* An :data:`Epoch` ``(term, master node id)`` names one mastership; a :data:`Position` ``(seq, epoch
  of the record at seq)`` names a history's end; a :data:`Lineage` lists ``(epoch, first seq)`` of the
  masterships that wrote it. Two histories agree up to ``seq`` exactly when their lineages give the
  same epoch for ``seq`` (Raft's log matching): :func:`epoch_at`, :func:`contains`, :func:`fork_seq`.
* A :class:`Version` is one key's current value with its HLC time, writer and seq (or a tombstone);
  a :class:`Record` is one entry of the master's log; a :class:`Change` is what a reader sees change;
  a :class:`Conflict` a key written on both sides of a healed split, settled by a :data:`Resolver`.
* :class:`Clock` is the hybrid logical clock that stamps records; its wall clock is passed in.
* Each type has its wire form (``to_wire``/``from_wire``, ``*_to_wire``/``*_from_wire``); decoding
  raises :class:`~.errors.StoreDecodeError` on anything malformed.

The state built from these is :mod:`.versioned`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import peer_repr
from .errors import StoreDecodeError
from .packing import detached

__all__ = [
    "Epoch",
    "Position",
    "Lineage",
    "Version",
    "Record",
    "Change",
    "Conflict",
    "Resolver",
    "last_writer_wins",
    "epoch_at",
    "contains",
    "fork_seq",
    "Clock",
    "epoch_from_wire",
    "position_from_wire",
    "position_to_wire",
    "lineage_from_wire",
    "lineage_to_wire",
]

Epoch = tuple[int, str]  #: (term, node id of the master): ordered, and no two nodes claim the same
Position = tuple[int, Epoch | None]  #: (seq, epoch of the record at seq); (0, None) is the empty state
Lineage = list[tuple[Epoch, int]]  #: [(epoch, first seq it wrote), ...], epochs increasing


class Clock:
    """A hybrid logical clock: ``now()`` is >= ``wall()`` in microseconds and > every time seen.

    ``wall`` (seconds since the epoch) is the caller's: the I/O layer passes :func:`.clock.clock`, a
    simulation its own clock; nothing here reads a clock of its own."""

    def __init__(self, wall: Callable[[], float]) -> None:
        self._wall = wall
        self.last = 0

    def now(self) -> int:
        self.last = max(self.last + 1, int(self._wall() * 1_000_000))
        return self.last

    def observe(self, hlc: int) -> None:
        if hlc > self.last:
            self.last = hlc


# Version, Change and Record are built once per applied op: they write their frozen dataclass __init__ out
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

    def copied(self) -> Version:
        """This version with its value copied (:func:`.packing.detached`), for a caller that may change it."""
        return Version(detached(self.value), self.hlc, self.origin, self.seq, self.deleted, self.expiry)

    @classmethod
    def from_wire(cls, wire: Any) -> Version:
        value, hlc, origin, seq, deleted, expiry = _checked_wire(wire)
        return cls(value, hlc, origin, seq, deleted, expiry)


def _checked_wire(wire: Any) -> tuple[Any, int, str, int, bool, float | None]:
    """A version's wire form's six fields, checked (StoreDecodeError if malformed)."""
    try:
        value, hlc, origin, seq, deleted, expiry = wire
    except (TypeError, ValueError) as exc:
        raise StoreDecodeError(f"bad version {peer_repr(wire, 100)}") from exc
    if not (isinstance(hlc, int) and isinstance(origin, str) and isinstance(seq, int) and 0 <= seq <= _SEQ_MASK
            and isinstance(deleted, bool) and (expiry is None or isinstance(expiry, (int, float)))):
        raise StoreDecodeError(f"bad version {peer_repr(wire, 100)}")
    return value, hlc, origin, seq, deleted, expiry


def version_columns(wire: Any) -> tuple[int, int | None, float | None]:
    """``(seq, tombstone's hlc or None, expiry of a live key or None)`` of a version's wire form, checked
    as :meth:`Version.from_wire` checks it, without building the version (a state on disk keeps
    these beside the packed version: ``versioned_disk``). Raises StoreDecodeError."""
    _, hlc, _, seq, deleted, expiry = _checked_wire(wire)
    return (seq_column(seq), dead_column(hlc), None) if deleted else (seq_column(seq), None, expiry_column(expiry))


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def seq_column(seq: int) -> int:
    """A seq as a state on disk's ``seq`` column holds it: clamped to a SQLite INTEGER's 64 bits (a
    version's seq is up to 2**64 - 1; the packed version keeps it)."""
    return min(seq, _INT64_MAX)


def dead_column(hlc: int) -> int:
    """A tombstone's hlc as a state on disk's ``dead`` column holds it: a version's hlc is any int, a
    SQLite INTEGER 64 bits (binding a larger one raises OverflowError), so it is clamped to them (the
    column only orders and finds tombstones; the packed version keeps the hlc)."""
    return min(max(hlc, _INT64_MIN), _INT64_MAX)


def expiry_column(expiry: float | None) -> float | None:
    """An expiry as a state on disk's ``expiry`` column holds it: a REAL (an int past 64 bits does not bind)."""
    return None if expiry is None else float(min(max(expiry, -1e300), 1e300))


# -- stamps: (hlc, origin, seq) as one int ----------------------------------------------------------------
_SEQ_BITS = 64
_ORIGIN_BITS = 32
_SEQ_MASK = (1 << _SEQ_BITS) - 1
_ORIGIN_MASK = (1 << _ORIGIN_BITS) - 1
STAMP_HLC_SHIFT = _SEQ_BITS + _ORIGIN_BITS


class Stamps:
    """A state's int stamps, each ``(hlc, origin, seq)`` in one int (an int is no object the garbage
    collector tracks; a tuple holding a str may be one), and the origins seen, numbered. ``stamp >>
    STAMP_HLC_SHIFT`` is the hlc."""

    __slots__ = ("names", "numbers")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.numbers: dict[str, int] = {}

    def stamp(self, hlc: int, origin: str, seq: int) -> int:
        """Raises StoreDecodeError for a seq outside ``[0, 2**64)`` (a peer's)."""
        if not 0 <= seq <= _SEQ_MASK:
            raise StoreDecodeError(f"seq {seq} out of range")
        i = self.numbers.get(origin)
        if i is None:
            i = self.numbers[origin] = len(self.names)
            self.names.append(origin)
        return (((hlc << _SEQ_BITS) | seq) << _ORIGIN_BITS) | i

    def parts(self, stamp: int) -> tuple[int, str, int]:
        """``(hlc, origin, seq)``."""
        return stamp >> STAMP_HLC_SHIFT, self.names[stamp & _ORIGIN_MASK], Stamps.seq_of(stamp)

    @staticmethod
    def seq_of(stamp: int) -> int:
        """The seq of ``stamp`` (no origin table needed)."""
        return (stamp >> _ORIGIN_BITS) & _SEQ_MASK


# -- log records ---------------------------------------------------------------------------------------
# op: ["put", key, value, expiry] | ["erase", key] | ["expire", key] | ["clear"] | ["noop"] (a failed write)
#     | ["forget", key] (drop the key's tombstone; a live value is kept)
#     | ["push", key, value, expiry] | ["pop", key, expiry] (the key's list with ``value`` appended, or
#       without its last item: the master sends these, not the whole list, when the key holds a list)
#     | ["many", [op, ...]] (several of the others, applied in order in one record; not nested)
_OPS = {"put": 4, "erase": 2, "expire": 2, "clear": 1, "noop": 1, "many": 2, "forget": 2, "push": 4, "pop": 3}


def _expiry_ok(op: Any) -> bool:
    """The op's expiry (a ``put``'s, ``push``'s or ``pop``'s last field) is None or a finite number
    (a peer's string there stopped the master's expiry timer, later, with a TypeError)."""
    kind = op[0]
    if kind != "put" and kind != "push" and kind != "pop":
        return True
    e = op[-1]
    return e is None or (type(e) is float and math.isfinite(e)) or type(e) is int


def _op_from_wire(op: Any) -> tuple[Any, ...] | None:
    """A received op as :attr:`Record.op` holds it (tuples), or None if malformed: a known kind with
    its number of fields, an expiry that is None or a finite number; a ``many`` holds a list of the
    others. Checked and converted in one pass."""
    if not (isinstance(op, (list, tuple)) and op and _OPS.get(op[0]) == len(op)):
        return None
    if op[0] != "many":
        return tuple(op) if _expiry_ok(op) else None
    ops = op[1]
    if not isinstance(ops, (list, tuple)):
        return None
    out = []
    for one in ops:
        if not (isinstance(one, (list, tuple)) and one and _OPS.get(one[0]) == len(one)) or one[0] == "many" \
                or not _expiry_ok(one):
            return None
        out.append(tuple(one))
    return ("many", out)


@dataclass(frozen=True, slots=True, init=False)
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

    def __init__(self, seq: int, epoch: Epoch, hlc: int, origin: str, writer: str, n: int, op: tuple[Any, ...],
                 result: Any = None) -> None:
        _set_slot(self, "seq", seq)
        _set_slot(self, "epoch", epoch)
        _set_slot(self, "hlc", hlc)
        _set_slot(self, "origin", origin)
        _set_slot(self, "writer", writer)
        _set_slot(self, "n", n)
        _set_slot(self, "op", op)
        _set_slot(self, "result", result)

    def to_wire(self) -> list[Any]:
        # the op as it is: CBOR encodes tuples as arrays, and from_wire takes either
        return [self.seq, list(self.epoch), self.hlc, self.origin, self.writer, self.n, self.op, self.result]

    @classmethod
    def from_wire(cls, wire: Any) -> Record:
        try:
            seq, epoch, hlc, origin, writer, n, op, result = wire
            epoch = epoch_from_wire(epoch)
        except (TypeError, ValueError) as exc:
            raise StoreDecodeError(f"bad log record {peer_repr(wire, 100)}") from exc
        op = _op_from_wire(op)
        if not (isinstance(seq, int) and seq > 0 and isinstance(hlc, int) and isinstance(origin, str)
                and isinstance(writer, str) and isinstance(n, int) and op is not None):
            raise StoreDecodeError(f"bad log record {peer_repr(wire, 100)}")
        return cls(seq, epoch, hlc, origin, writer, n, op, result)


def epoch_from_wire(wire: Any) -> Epoch:
    if not (isinstance(wire, (list, tuple)) and len(wire) == 2 and isinstance(wire[0], int)
            and not isinstance(wire[0], bool) and isinstance(wire[1], str)):
        raise StoreDecodeError(f"bad epoch {peer_repr(wire, 60)}")
    return (wire[0], wire[1])


def position_from_wire(wire: Any) -> Position:
    if not (isinstance(wire, (list, tuple)) and len(wire) == 2 and isinstance(wire[0], int)):
        raise StoreDecodeError(f"bad position {peer_repr(wire, 60)}")
    return (wire[0], None if wire[1] is None else epoch_from_wire(wire[1]))


def position_to_wire(pos: Position) -> list[Any]:
    return [pos[0], None if pos[1] is None else list(pos[1])]


def lineage_from_wire(wire: Any) -> Lineage:
    if not isinstance(wire, (list, tuple)):
        raise StoreDecodeError(f"bad lineage {peer_repr(wire, 60)}")
    out: Lineage = []
    for item in wire:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[1], int)):
            raise StoreDecodeError(f"bad lineage entry {peer_repr(item, 60)}")
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
            raise StoreDecodeError(f"bad conflict {peer_repr(wire, 100)}") from exc
        return cls(key, Version.from_wire(chosen), Version.from_wire(other))


Resolver = Callable[[Any, Version, Version], Version]


def last_writer_wins(key: Any, a: Version, b: Version) -> Version:
    """The default resolver: the larger ``(hlc, origin)`` wins; deterministic on every node."""
    return a if (a.hlc, a.origin) >= (b.hlc, b.origin) else b
