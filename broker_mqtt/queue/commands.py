"""The queue operations: elected-store writes whose effect the master computes (``docs/queues.md``).

Each command is a :class:`~broker_mqtt.store.commands.ComputedCommand`: the master calls
``compute(state, wall)``, which returns one log op (a ``["many", [...]]`` when it changes several
keys, so that acquiring ``n`` messages or publishing a batch is one record and one round trip) and
the answer for the writer. Deterministic: the op depends only on the state, the command and ``wall``
(the master's clock, recorded in the op where it matters). The index of :mod:`.model` is advanced with
the op, so the next command finds it current.

Per-message trouble (settling a message one does not hold) is answered per item, not raised: the
other items of the batch still take effect. A malformed command fails as a whole with
StoreDecodeError, before anything changes.

Log readers (:class:`RegisterReader`, :class:`CommitReader`, :class:`RemoveReader`): while any reader
is registered, ``accept`` erases a message only if every reader's pointer is at or past its id, and
otherwise marks it ``done``; a pointer that advances (or a reader removed) erases, in the same
record, the ``done`` messages every remaining reader has now passed. Trouble that is the caller's
(an unknown reader, committing past the last id) is answered as ``[code, text]``, not raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, cast

from ..errors import peer_repr
from ..store.commands import CommandKind, ComputedCommand, register_command
from ..store.commands import _bool as _flag
from ..store.errors import StoreDecodeError, StoreProtocolError
from ..store.versioned import VersionedState
from ..wire.codec import size_bound
from .model import (
    ID_LIMIT,
    MARKER_LIMIT,
    NEXT_ID,
    MessageRecord,
    MessageState,
    advance,
    forget_index,
    index_for,
    is_message_key,
    lease_key,
    marker,
    published_wire,
    reader_key,
    record_state,
)
from .record_sizes import (
    ACQUIRED_OVERHEAD,
    ERASED_COST,
    MAX_ERASES,
    MAX_OWNER,
    RECORD_BYTES,
    acquired_cost,
    settled_cost,
)

__all__ = ["Publish", "Acquire", "Settle", "SettleAndAcquire", "ReleaseOwner", "Renew", "RegisterReader", "CommitReader", "RemoveReader",
           "Forget", "Sweep", "Action", "RECORD_BYTES", "acquired_cost", "settled_cost", "MAX_BATCH", "MAX_READER_NAME", "START_OLDEST", "START_NEXT", "check_reader_name"]

MAX_BATCH = 10_000  # messages per publish or acquire command
MAX_READER_NAME = 200  # characters
START_OLDEST, START_NEXT = "oldest", "next"
Action = str  # "accept" | "release" | "reject" | "return"
_ACTIONS = ("accept", "release", "reject", "return")
_FOREVER = 1e15  # seconds: durations and ages beyond any wall clock are refused (an overflow, not a time)
MAX_REASON = 1000  #: characters of a settlement's or release's reason (a consumer cuts a longer one)


def check_reader_name(name: Any) -> str | None:
    """Why ``name`` cannot name a log reader, or None if it can."""
    if not isinstance(name, str) or not name:
        return f"a log reader's name is a non-empty string, not {peer_repr(name, 60)}"
    if "/" in name or len(name) > MAX_READER_NAME:
        return f"a log reader's name has no '/' and at most {MAX_READER_NAME} characters, not {peer_repr(name, 60)}"
    return None


def _reader(value: Any) -> str:
    why = check_reader_name(value)
    if why is not None:
        raise StoreDecodeError(why)
    return cast(str, value)


def _start(value: Any) -> str:
    if value not in (START_OLDEST, START_NEXT):
        raise StoreDecodeError(f"a log reader starts at {START_OLDEST!r} or {START_NEXT!r}, not {peer_repr(value, 60)}")
    return cast(str, value)


def _position(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreDecodeError(f"a log position is an id >= 0, got {peer_repr(value, 60)}")
    return value


def _owner(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_OWNER or not value.isascii():
        raise StoreDecodeError(f"owner must be a non-empty ASCII string of at most {MAX_OWNER} characters, "
                               f"got {peer_repr(value, 60)}")
    return value


def _reason(value: Any) -> str:
    if not isinstance(value, str) or len(value) > MAX_REASON:
        raise StoreDecodeError(f"a reason is a string of at most {MAX_REASON} characters, got {peer_repr(value, 60)}")
    return value


def _marker(value: Any) -> int | None:
    if value is not None and (type(value) is not int or not 0 <= value < MARKER_LIMIT):
        raise StoreDecodeError(f"a publish marker is None or an integer in [0, 2**64), got {peer_repr(value, 60)}")
    return value


def _items(value: Any) -> list[Any]:
    if not isinstance(value, (list, tuple)) or not 0 < len(value) <= MAX_BATCH:
        raise StoreDecodeError(f"expected a list of 1..{MAX_BATCH} items, got {peer_repr(value, 60)}")
    return list(value)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_BATCH:
        raise StoreDecodeError(f"expected a count in 1..{MAX_BATCH}, got {peer_repr(value, 60)}")
    return value


def _max(value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < ID_LIMIT):
        raise StoreDecodeError(f"max_deliveries must be None or an integer >= 1, got {peer_repr(value, 60)}")
    return value


def _age(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < _FOREVER:
        raise StoreDecodeError(f"expected an age >= 0 s, got {peer_repr(value, 60)}")
    return value


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < _FOREVER:
        raise StoreDecodeError(f"expected a duration > 0 s, got {peer_repr(value, 60)}")
    return value


def _settlements(value: Any) -> list[list[Any]]:
    items = _items(value)
    for item in items:
        if not (isinstance(item, (list, tuple)) and len(item) in (3, 4) and is_message_key(item[0])
                and 0 <= item[0] < ID_LIMIT and item[1] in _ACTIONS
                and (item[2] is None or (isinstance(item[2], str) and len(item[2]) <= MAX_REASON))
                and (len(item) == 3 or (is_message_key(item[3]) and 1 <= item[3] < ID_LIMIT))):
            raise StoreDecodeError(f"a settlement is [id, accept|release|reject|return, reason(, delivery count)], "
                                   f"got {peer_repr(item, 60)}")
    return [list(item) for item in items]


def _many(ops: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    if not ops:
        return ("noop",)
    return ops[0] if len(ops) == 1 else ("many", ops)


def _finish(state: VersionedState, ops: list[tuple[Any, ...]], answer: Any) -> tuple[tuple[Any, ...], Any]:
    op = _many(ops)
    advance(state, op)
    return op, answer


class _Changes:
    """A settle's and an acquire's ops (``ops``), and what they do to the master's index
    (:mod:`.model`), collected as they are computed and applied to it once (cheaper than
    :func:`.model.advance`, which reads every op again): ready messages ``owner`` acquired and its
    lease, held messages erased, and every other key changed, noted as ``advance`` notes it. The
    keys are disjoint: a settle changes messages its owner holds, an acquire ready ones and the lease."""

    __slots__ = ("owner", "ops", "acquired", "lease", "erased", "other")

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.ops: list[tuple[Any, ...]] = []
        self.acquired: list[int] = []
        self.lease: float | None = None
        self.erased: list[int] = []
        self.other: list[tuple[Any, Any]] = []  # (key, value) as note() takes them

    def finish(self, state: VersionedState, answer: Any) -> tuple[tuple[Any, ...], Any]:
        """:func:`_finish` of ``ops``, with the index kept from what was collected."""
        idx = index_for(state)
        idx.acquired(self.owner, self.acquired)
        if self.lease is not None:
            idx.leases[self.owner] = self.lease
        idx.erased(self.erased)
        for key, value in self.other:
            idx.note(key, value)
        idx.seq = state.last_seq + 1
        return _many(self.ops), answer


def _record(state: VersionedState, msg_id: int) -> MessageRecord | None:
    wire = state.value(msg_id)
    return None if wire is None else MessageRecord.from_wire(wire)


def _back(rec: MessageRecord, reason: str) -> MessageRecord:
    """A released message: ready again, or dead once it was delivered ``max`` times."""
    if rec.max is not None and rec.count >= rec.max:
        return MessageRecord(rec.data, MessageState.DEAD, None, rec.count, rec.max,
                             f"delivered {rec.count} times (max_deliveries {rec.max}); last: {reason}", rec.published)
    return MessageRecord(rec.data, MessageState.READY, None, rec.count, rec.max, None, rec.published)


@register_command(CommandKind.QUEUE_PUBLISH, _items, _max, _marker)
@dataclass(frozen=True, slots=True)
class Publish(ComputedCommand):
    """Append ``items`` (message bodies) in order; answer the first id (the rest follow, consecutive).
    Each record is marked with ``marker`` (:attr:`.model.MessageRecord.published`): the publisher's
    :func:`.model.new_marker`, which the queue's publishes always carry; without one (a publish of an
    earlier version), ``wall``, the master's clock."""

    items: list[Any]
    max_deliveries: int | None = None
    marker: int | None = None

    _OPTIONAL: ClassVar[int] = 1  # (the marker: an earlier version's publish has none)

    def to_wire(self) -> list[Any]:
        wire = [CommandKind.QUEUE_PUBLISH.value, self.items, self.max_deliveries]
        if self.marker is not None:
            wire.append(self.marker)
        return wire

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        first = index_for(state).next_id
        m = self.max_deliveries
        mark = wall if self.marker is None else self.marker
        ops: list[tuple[Any, ...]] = [("put", first + i, published_wire(data, m, mark), None)
                                      for i, data in enumerate(self.items)]
        ops.append(("put", NEXT_ID, first + len(self.items), None))
        return _finish(state, ops, first)


@register_command(CommandKind.QUEUE_ACQUIRE, _owner, _count, _seconds)
@dataclass(frozen=True, slots=True)
class Acquire(ComputedCommand):
    """Give ``owner`` up to ``n`` ready messages, smallest id first, and (re)start its lease;
    answer ``[[id, data, delivery count], ...]`` (empty: none ready). Messages are added while their
    :func:`acquired_cost` is under ``RECORD_BYTES // 2`` (so an answer of fewer than ``n`` that is
    under it says that no more are ready); a record is then at most :func:`largest_acquire` of its
    last message, which a publish checks."""

    owner: str
    n: int
    lease: float

    def acts_for(self) -> str:
        return self.owner

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        changes = _Changes(self.owner)
        return changes.finish(state, _acquire_into(changes, state, wall, self.n, self.lease))


def _acquire_into(changes: _Changes, state: VersionedState, wall: float, n: int, lease: float,
                  before: int = 0) -> list[list[Any]]:
    """Add to ``changes`` the acquire of up to ``n`` ready messages by
    ``changes.owner`` (see :class:`Acquire`) and return them as answered, ``[[id, data, delivery
    count], ...]``. ``before``: bytes the record holds already (a settle's,
    :class:`SettleAndAcquire`): messages are added while the record is under ``RECORD_BYTES // 2``
    in all, none if it is there already."""
    owner, ops = changes.owner, changes.ops
    got: list[list[Any]] = []
    taken = 0
    owner_cost = len(owner) + ACQUIRED_OVERHEAD
    limit = state.record_limit
    for msg_id in index_for(state).first_ready(n):
        wire = state.value(msg_id)
        peek = None if wire is None else record_state(wire)
        if wire is None or peek is None or peek[0] is not MessageState.READY:  # cannot happen; if it did: rebuild
            forget_index(state)
            continue
        if before + taken >= RECORD_BYTES // 2:  # the record is full: the rest wait for the next acquire
            break
        data = wire["data"]
        cost = 2 * size_bound(data) + owner_cost  # (acquired_cost, inline)
        if limit is not None and before + taken + cost > limit:
            if taken or cost <= limit:
                break  # first in the next acquire (one with less before it, if that is what it needs)
            # no acquire can ever carry it (a peer published it unchecked): dead, not a poison record
            why = f"too large to deliver: an acquire's record of {cost} bytes, the broker carries {limit}"
            if before and before + settled_cost(data, why) > limit:
                break  # its data behind the settlements would pass the limit: an acquire alone moves it
            dead = MessageRecord(data, MessageState.DEAD, None, int(wire["count"]), wire["max"], why,
                                 marker(wire.get("p"))).to_wire()
            ops.append(("put", msg_id, dead, None))
            changes.other.append((msg_id, dead))
            break  # (one a record: each carries its data)
        taken += cost
        # the acquired record, built directly (what MessageRecord(...).to_wire() gives)
        count = int(wire["count"]) + 1
        acquired = {"data": data, "state": "acquired", "owner": owner, "count": count, "max": wire["max"],
                    "reason": None}
        mark = marker(wire.get("p"))
        if mark is not None:
            acquired["p"] = mark
        ops.append(("put", msg_id, acquired, None))
        changes.acquired.append(msg_id)
        got.append([msg_id, data, count])
    if got:
        changes.lease = wall + lease
        ops.append(("put", lease_key(owner), changes.lease, None))
    return got


@register_command(CommandKind.QUEUE_SETTLE, _owner, _settlements)
@dataclass(frozen=True, slots=True)
class Settle(ComputedCommand):
    """Settle messages ``owner`` holds: ``[[id, action, reason(, delivery count)], ...]`` with action
    ``accept`` (erase it), ``release`` (back to ready, or dead past max_deliveries), ``reject`` (dead,
    with ``reason``) or ``return`` (acquired but never handed to the application: back to ready with
    its delivery count lowered again). With a delivery count, only that delivery is settled: a
    message taken back and acquired again (by the same owner, say) is a new delivery. Answer per
    item: None, or why it could not be settled (not held by ``owner``, or not that delivery)."""

    owner: str
    items: list[list[Any]]

    def acts_for(self) -> str:
        return self.owner

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        changes = _Changes(self.owner)
        answers, _ = _settle_into(changes, state, self.items)
        return changes.finish(state, answers)


def _settle_into(changes: _Changes, state: VersionedState,
                 items: list[list[Any]]) -> tuple[list[str | None], int]:
    """Add to ``changes`` the settlements ``items`` of ``changes.owner`` (see
    :class:`Settle`); return the answers and the bytes they add to the record (by
    :func:`settled_cost`, and the answers' text). Raises StoreProtocolError if several would pass
    RECORD_BYTES (a consumer cuts its settlements by :func:`settled_cost`: only a peer that does not
    gets this)."""
    owner, ops = changes.owner, changes.ops
    answers: list[str | None] = []
    done: set[int] = set()
    taken = 0
    low = index_for(state).low_water()  # the readers' pointers do not move within a settle
    for msg_id, action, reason, *delivery in items:
        wire = state.value(msg_id)
        peek = None if wire is None else record_state(wire)  # (a record exactly when from_wire gives one)
        count = 0 if peek is None else int(wire["count"])
        if (peek is None or peek[0] is not MessageState.ACQUIRED or peek[1] != owner or msg_id in done
                or (delivery and delivery[0] != count)):
            held_by = None if peek is None else peek[1]
            why = "gone (accepted, or never published)" if peek is None else (
                f"{peek[0].value}" + (" by another" if held_by and held_by != owner else "")
                + (f", delivery {count} (not {delivery[0]})" if delivery and delivery[0] != count else ""))
            answer = (f"message {msg_id} not held: {why} (released: lease expired or consumer presumed gone; "
                      f"or settled already)")
            answers.append(answer)
            taken += len(answer) + 3  # (ASCII, and its head)
            _check_room(taken, items)
            continue
        done.add(msg_id)
        answers.append(None)
        if action == "accept" and (low is None or msg_id <= low):  # no log reader still to read it
            taken += ERASED_COST  # (no data in the record: the usual settlement is not sized)
            _check_room(taken, items)
            ops.append(("erase", msg_id))
            changes.erased.append(msg_id)
            continue
        rec = MessageRecord.from_wire(wire)
        assert rec is not None  # (peek is not None)
        taken += settled_cost(rec.data, reason)
        _check_room(taken, items)
        if action == "accept":
            after = MessageRecord(rec.data, MessageState.DONE, None, rec.count, rec.max, None, rec.published)
        elif action == "release":
            after = _back(rec, reason or "released")
        elif action == "return":
            after = MessageRecord(rec.data, MessageState.READY, None, max(0, rec.count - 1), rec.max, None,
                                  rec.published)
        else:
            after = MessageRecord(rec.data, MessageState.DEAD, None, rec.count, rec.max, reason or "rejected",
                                  rec.published)
        value = after.to_wire()
        ops.append(("put", msg_id, value, None))
        changes.other.append((msg_id, value))
    return answers, taken


def _check_room(taken: int, items: list[list[Any]]) -> None:
    if taken > RECORD_BYTES and len(items) > 1:
        raise StoreProtocolError(f"a settle of {len(items)} messages would make a record larger than "
                                 f"{RECORD_BYTES} bytes: settle them in parts")


@register_command(CommandKind.QUEUE_SETTLE_ACQUIRE, _owner, _settlements, _count, _seconds)
@dataclass(frozen=True, slots=True)
class SettleAndAcquire(ComputedCommand):
    """A :class:`Settle` of ``items`` by ``owner``, then an :class:`Acquire` of up to ``n`` messages
    by it (lease ``lease``), in one write and one record: a consumer's settlements carry the acquire
    that refills its window. The acquire adds messages while the record (the settlements' part
    too) is under ``RECORD_BYTES // 2``: none if the settlements fill that. Answer ``[settle's
    answer, acquire's answer]``. A master of an earlier version refuses it (as any unknown kind:
    an error answer, nothing applied; the writer raises StoreProtocolError): the consumer then settles
    and acquires in writes of their own."""

    owner: str
    items: list[list[Any]]
    n: int
    lease: float

    def acts_for(self) -> str:
        return self.owner

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        changes = _Changes(self.owner)
        answers, taken = _settle_into(changes, state, self.items)
        got = _acquire_into(changes, state, wall, self.n, self.lease, before=taken)
        return changes.finish(state, [answers, got])


@register_command(CommandKind.QUEUE_RELEASE_OWNER, _owner, _reason, _flag)
@dataclass(frozen=True, slots=True)
class ReleaseOwner(ComputedCommand):
    """Release every message ``owner`` holds (back to ready, or dead past max_deliveries) and drop
    its lease. ``if_expired``: only if its lease ran out by the master's clock (a renewal that came
    first wins). Answer: the number released. Those past :data:`RECORD_BYTES` stay held, and so does
    the lease: release again until the answer is 0."""

    owner: str
    reason: str
    if_expired: bool = False

    def acts_for(self) -> str:
        return self.owner

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        idx = index_for(state)
        lease = idx.leases.get(self.owner)
        if self.if_expired and lease is not None and lease > wall:
            return _finish(state, [], 0)
        ops: list[tuple[Any, ...]] = []
        room = RECORD_BYTES
        for msg_id in sorted(idx.owned.get(self.owner, ())):
            rec = _record(state, msg_id)
            if rec is not None:
                room -= settled_cost(rec.data, self.reason)
                if room < 0 and ops:  # the record is full: the lease stays, the rest go next time
                    return _finish(state, ops, len(ops))
                ops.append(("put", msg_id, _back(rec, self.reason).to_wire(), None))
        released = len(ops)
        if lease is not None:
            ops.append(("erase", lease_key(self.owner)))
        return _finish(state, ops, released)


@register_command(CommandKind.QUEUE_RENEW, _owner, _seconds)
@dataclass(frozen=True, slots=True)
class Renew(ComputedCommand):
    """Extend ``owner``'s lease to ``lease`` seconds from now, if it holds messages; answer how many."""

    owner: str
    lease: float

    def acts_for(self) -> str:
        return self.owner

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        held = len(index_for(state).owned.get(self.owner, ()))
        if not held:
            return _finish(state, [], 0)
        return _finish(state, [("put", lease_key(self.owner), wall + self.lease, None)], held)


def _oldest(state: VersionedState, next_id: int) -> int:
    keys = state.keys()  # a list (VersionedState is not a mapping)
    return min((k for k in keys if is_message_key(k)), default=next_id)


@register_command(CommandKind.QUEUE_REGISTER_READER, _reader, _start)
@dataclass(frozen=True, slots=True)
class RegisterReader(ComputedCommand):
    """Register log reader ``name`` if it is not: its pointer starts before the oldest message the
    queue holds (``"oldest"``) or at the last id published (``"next"``: it reads what comes after).
    An existing reader keeps its pointer. Answer ``[pointer, created]``."""

    name: str
    start: str = START_OLDEST

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        idx = index_for(state)
        if self.name in idx.readers:
            return _finish(state, [], [idx.readers[self.name], False])
        pointer = (idx.next_id if self.start == START_NEXT else _oldest(state, idx.next_id)) - 1
        return _finish(state, [("put", reader_key(self.name), pointer, None)], [pointer, True])


@register_command(CommandKind.QUEUE_COMMIT_READER, _reader, _position)
@dataclass(frozen=True, slots=True)
class CommitReader(ComputedCommand):
    """Move log reader ``name``'s pointer to ``upto`` (it has read every id up to it); a pointer
    never moves back (``upto`` at or below it changes nothing: 0 asks where it is). Erases, in the
    same record, the ``done`` messages every reader has now passed (:data:`MAX_ERASES` at most: the master's
    :class:`Sweep` erases the rest). Answer the pointer (an int), or
    why not: ``["unknown-reader", text]``, or ``["beyond-last", text]`` (``upto`` past the last id
    published)."""

    name: str
    upto: int

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        idx = index_for(state)
        pointer = idx.readers.get(self.name)
        if pointer is None:
            return _finish(state, [], ["unknown-reader", f"no log reader {self.name!r} on this queue: register "
                                                         f"it first (or it was removed)"])
        if self.upto >= idx.next_id:
            return _finish(state, [], ["beyond-last", f"cannot commit log reader {self.name!r} to {self.upto}: "
                                                      f"the last id published is {idx.next_id - 1}"])
        ops: list[tuple[Any, ...]] = []
        if self.upto > pointer:
            pointer = self.upto
            ops.append(("put", reader_key(self.name), pointer, None))
        others = idx.low_water(without=self.name)
        ops.extend(("erase", i) for i in idx.done_upto(pointer if others is None else min(pointer, others), MAX_ERASES))
        return _finish(state, ops, pointer)


@register_command(CommandKind.QUEUE_REMOVE_READER, _reader)
@dataclass(frozen=True, slots=True)
class RemoveReader(ComputedCommand):
    """Remove log reader ``name``; the ``done`` messages no remaining reader still has to read are
    erased in the same record (every one, if it was the last reader; :data:`MAX_ERASES` at most: the
    master's :class:`Sweep` erases the rest). Answer whether it existed."""

    name: str

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        idx = index_for(state)
        if self.name not in idx.readers:
            return _finish(state, [], False)
        ops: list[tuple[Any, ...]] = [("erase", reader_key(self.name))]
        ops.extend(("erase", i) for i in idx.done_upto(idx.low_water(without=self.name), MAX_ERASES))
        return _finish(state, ops, True)


@register_command(CommandKind.QUEUE_FORGET, _age)
@dataclass(frozen=True, slots=True)
class Forget(ComputedCommand):
    """Forget the tombstones of keys erased more than ``age`` seconds ago (accepted messages, leases
    of consumers that left), at most ``MAX_BATCH`` (and RECORD_BYTES of keys), oldest first: the queue's state then holds only
    what is live. Answer how many. A replica that comes back from a split older than ``age`` with such
    a key still live brings it back in the merge (an accepted message delivered again)."""

    age: float

    def keys(self, state: VersionedState, wall: float, limit: int = MAX_BATCH) -> list[Any]:
        """The keys it would forget at wall-clock ``wall`` (at most ``limit``; 1: is there work?)."""
        return state.old_tombstones(int((wall - self.age) * 1_000_000), limit)

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        ops: list[tuple[Any, ...]] = []
        taken = 0
        for key in self.keys(state, wall):
            taken += size_bound(key) + 8
            if taken > RECORD_BYTES and ops:  # the record is full: the rest next time
                break
            ops.append(("forget", key))
        return _finish(state, ops, len(ops))


@register_command(CommandKind.QUEUE_SWEEP, _count)
@dataclass(frozen=True, slots=True)
class Sweep(ComputedCommand):
    """Erase up to ``n`` (and :data:`MAX_ERASES`) ``done`` messages that every log reader has passed,
    smallest id first (those a reader's commit or removal left: a record erases at most MAX_ERASES);
    answer how many. Writes the id counter too if it lies below the next id (after a healed split,
    :meth:`~.model.QueueIndex.counter_behind`). The master's chores send it while there is either."""

    n: int

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        idx = index_for(state)
        ops: list[tuple[Any, ...]] = [("erase", i) for i in idx.done_upto(idx.low_water(), min(self.n, MAX_ERASES))]
        erased = len(ops)
        if idx.counter_behind(state):
            ops.append(("put", NEXT_ID, idx.next_id, None))
        return _finish(state, ops, erased)
