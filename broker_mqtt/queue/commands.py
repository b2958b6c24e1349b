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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..store.commands import CommandKind, ComputedCommand, register_command
from ..store.commands import _bool as _flag
from ..store.commands import _str as _text
from ..store.errors import StoreDecodeError
from ..store.versioned import VersionedState
from .model import (
    NEXT_ID,
    MessageRecord,
    MessageState,
    advance,
    forget_index,
    index_for,
    is_message_key,
    lease_key,
)

__all__ = ["Publish", "Acquire", "Settle", "ReleaseOwner", "Renew", "Action", "MAX_BATCH"]

MAX_BATCH = 10_000  # messages per publish or acquire command
Action = str  # "accept" | "release" | "reject" | "return"
_ACTIONS = ("accept", "release", "reject", "return")


def _owner(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise StoreDecodeError(f"owner must be a non-empty string, got {value!r:.60}")
    return value


def _items(value: Any) -> list[Any]:
    if not isinstance(value, (list, tuple)) or not 0 < len(value) <= MAX_BATCH:
        raise StoreDecodeError(f"expected a list of 1..{MAX_BATCH} items, got {value!r:.60}")
    return list(value)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_BATCH:
        raise StoreDecodeError(f"expected a count in 1..{MAX_BATCH}, got {value!r:.60}")
    return value


def _max(value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise StoreDecodeError(f"max_deliveries must be None or an integer >= 1, got {value!r:.60}")
    return value


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise StoreDecodeError(f"expected a duration > 0 s, got {value!r:.60}")
    return value




def _settlements(value: Any) -> list[list[Any]]:
    items = _items(value)
    for item in items:
        if not (isinstance(item, (list, tuple)) and len(item) == 3 and is_message_key(item[0])
                and item[1] in _ACTIONS and (item[2] is None or isinstance(item[2], str))):
            raise StoreDecodeError(f"a settlement is [id, accept|release|reject|return, reason], got {item!r:.60}")
    return [list(item) for item in items]


def _many(ops: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    if not ops:
        return ("noop",)
    return ops[0] if len(ops) == 1 else ("many", ops)


def _finish(state: VersionedState, ops: list[tuple[Any, ...]], answer: Any) -> tuple[tuple[Any, ...], Any]:
    op = _many(ops)
    advance(state, op)
    return op, answer


def _record(state: VersionedState, msg_id: int) -> MessageRecord | None:
    v = state.version(msg_id)
    return None if v is None or v.deleted else MessageRecord.from_wire(v.value)


def _back(rec: MessageRecord, reason: str) -> MessageRecord:
    """A released message: ready again, or dead once it was delivered ``max`` times."""
    if rec.max is not None and rec.count >= rec.max:
        return MessageRecord(rec.data, MessageState.DEAD, None, rec.count, rec.max,
                             f"delivered {rec.count} times (max_deliveries {rec.max}); last: {reason}")
    return MessageRecord(rec.data, MessageState.READY, None, rec.count, rec.max, None)


@register_command(CommandKind.QUEUE_PUBLISH, _items, _max)
@dataclass(frozen=True, slots=True)
class Publish(ComputedCommand):
    """Append ``items`` (message bodies) in order; answer the first id (the rest follow, consecutive)."""

    items: list[Any]
    max_deliveries: int | None = None

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        first = index_for(state).next_id
        ops: list[tuple[Any, ...]] = [
            ("put", first + i, MessageRecord(data, max=self.max_deliveries).to_wire(), None)
            for i, data in enumerate(self.items)]
        ops.append(("put", NEXT_ID, first + len(self.items), None))
        return _finish(state, ops, first)


@register_command(CommandKind.QUEUE_ACQUIRE, _owner, _count, _seconds)
@dataclass(frozen=True, slots=True)
class Acquire(ComputedCommand):
    """Give ``owner`` up to ``n`` ready messages, smallest id first, and (re)start its lease;
    answer ``[[id, data, delivery count], ...]`` (empty: none ready)."""

    owner: str
    n: int
    lease: float

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        ops: list[tuple[Any, ...]] = []
        got: list[list[Any]] = []
        for msg_id in index_for(state).first_ready(self.n):
            rec = _record(state, msg_id)
            if rec is None or rec.state is not MessageState.READY:  # cannot happen; if it did: rebuild
                forget_index(state)
                continue
            ops.append(("put", msg_id, MessageRecord(rec.data, MessageState.ACQUIRED, self.owner, rec.count + 1,
                                                     rec.max).to_wire(), None))
            got.append([msg_id, rec.data, rec.count + 1])
        if ops:
            ops.append(("put", lease_key(self.owner), wall + self.lease, None))
        return _finish(state, ops, got)


@register_command(CommandKind.QUEUE_SETTLE, _owner, _settlements)
@dataclass(frozen=True, slots=True)
class Settle(ComputedCommand):
    """Settle messages ``owner`` holds: ``[[id, action, reason], ...]`` with action ``accept``
    (erase it), ``release`` (back to ready, or dead past max_deliveries), ``reject`` (dead, with
    ``reason``) or ``return`` (acquired but never handed to the application: back to ready with its
    delivery count lowered again). Answer per item: None, or why it could not be settled (not held
    by ``owner``)."""

    owner: str
    items: list[list[Any]]

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        ops: list[tuple[Any, ...]] = []
        answers: list[str | None] = []
        done: set[int] = set()
        for msg_id, action, reason in self.items:
            rec = _record(state, msg_id)
            if rec is None or rec.state is not MessageState.ACQUIRED or rec.owner != self.owner or msg_id in done:
                why = "gone (accepted, or never published)" if rec is None else (
                    f"{rec.state.value}" + (f" by {rec.owner}" if rec.owner else ""))
                answers.append(f"message {msg_id} is not held by this consumer: {why}; it was released "
                               f"(lease expired or consumer presumed gone) or settled already")
                continue
            done.add(msg_id)
            answers.append(None)
            if action == "accept":
                ops.append(("erase", msg_id))
            elif action == "release":
                ops.append(("put", msg_id, _back(rec, reason or "released").to_wire(), None))
            elif action == "return":
                ops.append(("put", msg_id, MessageRecord(rec.data, MessageState.READY, None, max(0, rec.count - 1),
                                                         rec.max).to_wire(), None))
            else:
                ops.append(("put", msg_id, MessageRecord(rec.data, MessageState.DEAD, None, rec.count, rec.max,
                                                         reason or "rejected").to_wire(), None))
        return _finish(state, ops, answers)


@register_command(CommandKind.QUEUE_RELEASE_OWNER, _owner, _text, _flag)
@dataclass(frozen=True, slots=True)
class ReleaseOwner(ComputedCommand):
    """Release every message ``owner`` holds (back to ready, or dead past max_deliveries) and drop
    its lease. ``if_expired``: only if its lease ran out by the master's clock (a renewal that came
    first wins). Answer: the number released."""

    owner: str
    reason: str
    if_expired: bool = False

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        idx = index_for(state)
        lease = idx.leases.get(self.owner)
        if self.if_expired and lease is not None and lease > wall:
            return _finish(state, [], 0)
        ops: list[tuple[Any, ...]] = []
        for msg_id in sorted(idx.owned.get(self.owner, ())):
            rec = _record(state, msg_id)
            if rec is not None:
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

    def compute(self, state: VersionedState, wall: float) -> tuple[tuple[Any, ...], Any]:
        held = len(index_for(state).owned.get(self.owner, ()))
        if not held:
            return _finish(state, [], 0)
        return _finish(state, [("put", lease_key(self.owner), wall + self.lease, None)], held)
