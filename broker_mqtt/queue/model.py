"""How a work queue lives in an elected store's replicated state, and the master's index of it.

Theory of operation (``docs/queues.md``):

* A queue is an elected store. Message ``id`` (an int, assigned by the master from the counter key
  ``"next-id"``, so identical on every replica; after a healed split, whose merge can leave the
  counter below ids in use, from above them: :meth:`QueueIndex.build`) is key ``id``; its value is a :class:`MessageRecord`
  in wire form ``{"data", "state", "owner", "count", "max", "reason", "p"}`` (``"p"``: the publish
  marker, absent from records of earlier versions). A consumer's lease is key
  ``"lease/<owner>"`` (wall-clock expiry, seconds). A log reader's read pointer is key
  ``"reader/<name>"``: the last id it committed (an int >= 0). Nothing else lives in a queue's store.
* States: ``ready`` → (acquire) ``acquired`` → (accept) erased, or ``done`` while a log reader has not
  read past it | (release, owner lost, lease expired) ``ready``, or ``dead`` once ``count`` reached
  ``max`` | (reject) ``dead``. ``dead`` is final: the dead-letter queue is the set of dead records,
  each with its reason. ``done`` (accepted, kept for log readers) ends in erasure once every
  registered reader's pointer is at or past the id (or the last reader is removed). The
  transitions are the commands of :mod:`.commands`, computed by the master (deterministic: same
  state, same effect).
* :class:`QueueIndex` is the master's in-memory view (ready ids in id order, who owns what, leases,
  the readers' pointers, the ``done`` ids in id order), so acquiring is O(n log q), not O(q). It is
  derived: rebuilt from the state whenever the state moved in a way it did not predict (this node
  became master, a snapshot, a foreign write), and otherwise kept current from the ops the commands
  compute. No I/O, no clock: times are inputs.
"""

from __future__ import annotations

import enum
import heapq
import math
import os
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..store.packing import is_small_int
from ..store.versioned import VersionedState

__all__ = ["MessageState", "MessageRecord", "QueueIndex", "index_for", "NEXT_ID", "ID_LIMIT", "lease_key",
           "reader_key", "is_message_key", "id_in_use", "new_marker", "MARKER_LIMIT"]

NEXT_ID = "next-id"
MARKER_LIMIT = 1 << 64  #: publish markers are ints below it (:func:`new_marker`)
ID_LIMIT = 1 << 63  #: message ids (and delivery counts) a settlement may name; the master counts from 1
LEASE_PREFIX = "lease/"
READER_PREFIX = "reader/"


def lease_key(owner: str) -> str:
    return LEASE_PREFIX + owner


def reader_key(name: str) -> str:
    return READER_PREFIX + name


def is_pointer(value: Any) -> bool:
    """A log reader's pointer: an int >= 0 (anything else under ``reader/`` is not a reader)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_message_key(key: Any) -> bool:
    return isinstance(key, int) and not isinstance(key, bool)


def id_in_use(key: Any, value: Any) -> int:
    """The highest message id that ``key``, holding ``value`` (None: erased), puts in use; 0 for none.

    A message key is its id, erased or not (its tombstone still names it); the counter ``next-id``
    has used every id below it; a log reader's pointer is the last id it read (it reads only past
    it). Ids at or past :data:`ID_LIMIT`, which no settlement can name, are a peer's doing and not
    counted. New ids (the master's next id after a merge, a message moved by a split's merge) go
    above every id in use, so that none writes over a message or lands where a reader never reads.
    """
    if is_message_key(key):
        held = key
    elif key == NEXT_ID and is_message_key(value):
        held = value - 1
    elif isinstance(key, str) and key.startswith(READER_PREFIX) and is_pointer(value):
        held = value
    else:
        return 0
    return held if 0 < held < ID_LIMIT else 0


class MessageState(enum.Enum):
    READY = "ready"
    ACQUIRED = "acquired"
    DONE = "done"  # accepted, kept until every log reader has read past it
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One message as stored. ``count``: how often it was acquired; ``max``: ``max_deliveries`` (None:
    unlimited); ``owner``: the consumer holding it (acquired only); ``reason``: why it is dead;
    ``published``: the publish marker, kept through every change of the record: the random
    number of the publish that wrote it (:func:`new_marker`; a float, the master's wall clock, for a
    publish of an earlier version that sent none), None in a record of an earlier version, and
    ``[marker, id]`` once a split's merge moved it from the id it was published under. Two records
    under one id with different markers are two messages: a healed split's merge keeps both
    (:mod:`.split_merge`), also when their data are equal."""

    data: Any
    state: MessageState = MessageState.READY
    owner: str | None = None
    count: int = 0
    max: int | None = None
    reason: str | None = None
    published: Any = None

    def to_wire(self) -> dict[str, Any]:
        wire = {"data": self.data, "state": self.state.value, "owner": self.owner, "count": self.count,
                "max": self.max, "reason": self.reason}
        if self.published is not None:
            wire["p"] = self.published
        return wire

    @classmethod
    def from_wire(cls, wire: Any) -> MessageRecord | None:
        """The record, or None if ``wire`` is not one (a foreign value written into the store)."""
        try:
            return cls(wire["data"], _STATES[wire["state"]], wire["owner"], int(wire["count"]), wire["max"],
                       wire["reason"], marker(wire.get("p")))
        except (AttributeError, TypeError, KeyError, ValueError, OverflowError):  # (int() of an infinite count)
            return None


def new_marker() -> int:
    """A new publish's marker: 64 random bits, from the operating system's generator (a publish
    command carries it, so a re-sent publish keeps it). Random, not a clock: two masters on the two
    sides of a split, whose clocks both lag behind the old master's stamps, count their stamps up
    alike, and markers from them made two equal messages published under one id one message."""
    return int.from_bytes(os.urandom(8), "big")


def marker(p: Any) -> Any:
    """``p`` if it is a publish marker (a finite float or an int of at most 64 bits, or ``[that,
    message id]`` for a moved message), else None: a peer's value of another form is not carried
    along (a large one, a bignum too, would make every record that carries the message too large
    for the broker)."""
    if _stamp(p):
        return p
    if type(p) is list and len(p) == 2 and _stamp(p[0]) and is_message_key(p[1]) and 0 < p[1] < ID_LIMIT:
        return p
    return None


def _stamp(p: Any) -> bool:
    """A marker's number: a finite float, or an int CBOR holds without a bignum (9 bytes at most)."""
    if type(p) is float:
        return math.isfinite(p)
    return type(p) is int and is_small_int(p)


def published_wire(data: Any, max_deliveries: int | None, marker: float | int) -> dict[str, Any]:
    """``MessageRecord(data, max=max_deliveries, published=marker).to_wire()``, built directly (once
    per published message)."""
    return {"data": data, "state": "ready", "owner": None, "count": 0, "max": max_deliveries, "reason": None,
            "p": marker}


_STATES = {s.value: s for s in MessageState}  # a dict look-up: cheaper than MessageState(value)


def record_state(value: Any) -> tuple[MessageState, Any] | None:
    """What the index needs of a stored value: ``(state, owner)`` if it is a record (exactly when
    :meth:`MessageRecord.from_wire` gives one), else None; without building the record."""
    try:
        state = _STATES[value["state"]]
        count = value["count"]
        if type(count) is not int:
            int(count)
        owner = value["owner"]
        value["data"], value["max"], value["reason"]  # noqa: B018 - KeyError if a field is missing
    except (AttributeError, TypeError, KeyError, ValueError, OverflowError):
        return None
    return state, owner


class QueueIndex:
    """The master's index of one queue's state; see the module docstring."""

    def __init__(self) -> None:
        self.seq = -1
        self.generation = -1
        self.next_id = 1
        self._heap: list[int] = []
        self.ready: set[int] = set()
        self.owned: dict[str, set[int]] = {}
        self.owner_of: dict[int, str] = {}
        self.leases: dict[str, float] = {}
        self.readers: dict[str, int] = {}  # log reader -> its pointer (last committed id)
        self.done: set[int] = set()
        self._done_heap: list[int] = []
        self.readied = 0  # how often a message became ready (the master's arrivals, without events)

    @classmethod
    def build(cls, state: VersionedState) -> QueueIndex:
        idx = cls()
        highest = 0
        for key, value in state.items():
            idx.note(key, value)
            highest = max(highest, id_in_use(key, value))
        # A healed split merges the counter as any key (last writer wins), so it can lie below ids the
        # other side handed out: a publish must not write over one of those, nor go behind a reader.
        # (An erased message's id counts while its tombstone is kept.)
        erased = state.largest_erased_int(ID_LIMIT) or 0
        idx.next_id = max(idx.next_id, highest + 1, erased + 1)
        idx.seq, idx.generation = state.last_seq, state.generation
        return idx

    def counter_behind(self, state: VersionedState) -> bool:
        """Whether the state's id counter lies below the next id (after a healed split: see
        :meth:`build`); the master's chores then write it (:class:`~.commands.Sweep`), so that log
        readers, which read up to the counter, see every message."""
        counter = state.value(NEXT_ID)
        return self.next_id > (counter if is_message_key(counter) else 1)

    def note(self, key: Any, value: Any) -> None:
        """``key`` now holds ``value`` (None: erased)."""
        if is_message_key(key):  # (an int subclass too: it packs as the int, so it is that message)
            owner = self.owner_of.pop(key, None)
            if owner is not None:
                held = self.owned.get(owner)
                if held is not None:
                    held.discard(key)
                    if not held:
                        del self.owned[owner]
            self.ready.discard(key)
            self.done.discard(key)
            peek = None if value is None else record_state(value)
            if peek is None:
                return
            state, owner = peek
            if state is MessageState.READY:
                self.ready.add(key)
                heapq.heappush(self._heap, key)
                self.readied += 1
            elif state is MessageState.ACQUIRED and isinstance(owner, str):  # (a peer may write any owner)
                self.owned.setdefault(owner, set()).add(key)
                self.owner_of[key] = owner
            elif state is MessageState.DONE:
                self.done.add(key)
                heapq.heappush(self._done_heap, key)
        elif isinstance(key, str) and key.startswith(READER_PREFIX):
            if is_pointer(value):
                self.readers[key[len(READER_PREFIX):]] = value
            else:
                self.readers.pop(key[len(READER_PREFIX):], None)
        elif isinstance(key, str) and key.startswith(LEASE_PREFIX):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.leases[key[len(LEASE_PREFIX):]] = value
            else:
                self.leases.pop(key[len(LEASE_PREFIX):], None)
        elif key == NEXT_ID and isinstance(value, int):
            self.next_id = value

    def acquired(self, owner: str, ids: list[int]) -> None:
        """Ready messages ``ids`` are now acquired by ``owner``: what :meth:`note` does with their
        acquired records, without reading them (the master's acquires: :mod:`.commands`)."""
        if not ids:
            return
        held = self.owned.get(owner)
        if held is None:
            held = self.owned[owner] = set()
        ready, owner_of = self.ready, self.owner_of
        for key in ids:
            ready.discard(key)
            held.add(key)
            owner_of[key] = owner

    def erased(self, ids: list[int]) -> None:
        """Acquired messages ``ids`` are erased (accepted): what :meth:`note` does with their erases."""
        owner_of, owned = self.owner_of, self.owned
        for key in ids:
            owner = owner_of.pop(key, None)
            if owner is not None:
                held = owned.get(owner)
                if held is not None:
                    held.discard(key)
                    if not held:
                        del owned[owner]

    def observe(self, op: tuple[Any, ...]) -> None:
        """Keep up with an op about to be applied (``put``/``erase``/``many`` of them)."""
        for one in (op[1] if op[0] == "many" else (op,)):
            if one[0] == "put":
                self.note(one[1], one[2])
            elif one[0] in ("erase", "expire"):
                self.note(one[1], None)

    def first_ready(self, n: int) -> list[int]:
        """Up to ``n`` ready ids, smallest first (the index is not changed)."""
        return _smallest(self._heap, self.ready, n=n)

    def low_water(self, without: str | None = None) -> int | None:
        """The smallest pointer of the log readers (but ``without``); None: no reader."""
        return min((p for r, p in self.readers.items() if r != without), default=None)

    def done_upto(self, upto: int | None, n: int | None = None) -> list[int]:
        """The ``done`` ids <= ``upto`` (every one if None), smallest first, at most ``n`` (the index
        is not changed)."""
        return _smallest(self._done_heap, self.done, n=n, upto=upto)

    def expired_owners(self, wall: float) -> list[str]:
        """The owners holding messages whose lease ran out by ``wall``, or who have no lease: a
        healed split's merge can keep one side's acquire of a message and the other side's erase of
        its owner's lease (a release of what that owner held there), and nothing else would ever
        take such a message back while its consumer lives."""
        leases = self.leases
        return sorted(o for o in self.owned if leases.get(o, wall) <= wall)

    def owners_of_endpoint(self, endpoint_hex: str) -> list[str]:
        return sorted(o for o in set(self.owned) | set(self.leases) if o.startswith(endpoint_hex))

    def owners(self) -> Iterable[str]:
        return set(self.owned) | set(self.leases)


def _smallest(heap: list[int], live: set[int], *, n: int | None = None, upto: int | None = None) -> list[int]:
    """The smallest ids of the lazy ``heap`` that are still in ``live`` (at most ``n``, none above
    ``upto``), smallest first. Stale and repeated entries met on the way are dropped from the heap;
    the ids returned stay in it (they are live until the op that changes them is observed)."""
    out: list[int] = []
    while heap and (n is None or len(out) < n) and (upto is None or heap[0] <= upto):
        i = heapq.heappop(heap)
        if i in live and (not out or out[-1] != i):
            out.append(i)
    for i in out:
        heapq.heappush(heap, i)
    return out


_INDEXES: weakref.WeakKeyDictionary[VersionedState, QueueIndex] = weakref.WeakKeyDictionary()


def index_for(state: VersionedState) -> QueueIndex:
    """The index of ``state``, rebuilt if the state moved in a way the index did not predict."""
    idx = _INDEXES.get(state)
    if idx is None or idx.seq != state.last_seq or idx.generation != state.generation:
        idx = _INDEXES[state] = QueueIndex.build(state)
    return idx


def forget_index(state: VersionedState) -> None:
    """Drop the index of ``state``: the next use rebuilds it from the state."""
    _INDEXES.pop(state, None)


def advance(state: VersionedState, op: tuple[Any, ...]) -> None:
    """The master is about to apply ``op`` as the next record of ``state``: update the index."""
    idx = index_for(state)
    idx.observe(op)
    idx.seq = state.last_seq + 1
