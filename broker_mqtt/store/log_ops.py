"""The ops an elected store's master appends to its log, computed from its state: a write command's
effect and answer (:func:`compute_op`), and the records that forget old tombstones (:func:`forget_ops`).

Every replica applies those ops (:meth:`~.versioned.VersionedState.apply`); only the master computes
them, so a command's effect is decided once, at one log position, and replicated as data.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .commands import Clear, ComputedCommand, Erase, Pop, Push, Put, PutUnique, WriteCommand
from .master import _new_value
from .packing import unpack
from .versioned import FORGET_BYTES, FORGET_KEYS, FORGET_RECORDS, VersionedState

__all__ = ["compute_op", "forget_ops"]


def forget_ops(state: VersionedState, wall: float, ttl: float | None, *, records: int = FORGET_RECORDS
               ) -> Iterator[tuple[Any, ...]]:
    """The ops of the master's next ``forget`` records at wall-clock ``wall``: the tombstones whose hlc
    is more than ``ttl`` s (None: never) before ``wall``, oldest first, at most ``FORGET_KEYS`` keys
    (and ``FORGET_BYTES`` of packed keys, one key at least) per op, at most ``records`` ops. Lazy:
    apply each op before taking the next (each looks at the state as it is then).

    Paced: a pass that forgot every tombstone past the ttl makes the next ``ttl / 4`` s pass at once
    (so a tombstone lives between ``ttl`` and ``1.25 ttl``), and the records stay few and full; a
    pass cut short by ``records`` leaves the rest to the next call. (A derived index that the
    forget records do not update, such as a work queue's, is then rebuilt at most that often.)"""
    if ttl is None or (wall < state._forget_after and state._forget_after - wall <= ttl / 4):
        return
    before = int((wall - ttl) * 1_000_000)
    for _ in range(records):
        keys = state._old_tombstones(before, FORGET_KEYS, FORGET_BYTES) if state.tombstones else []
        if not keys:
            state._forget_after = wall + ttl / 4
            return
        yield ("many", [("forget", unpack(k)) for k in keys])


def compute_op(state: VersionedState, cmd: WriteCommand, wall: float) -> tuple[tuple[Any, ...], Any]:
    """The log effect of ``cmd`` on ``state`` and its answer; raise StoreError (then a ``noop``).

    A :class:`~.commands.ComputedCommand` computes its own (deterministic) effect."""
    if type(cmd) is Put:  # the usual write: no closures, no match
        return ("put", cmd.key, cmd.value, None if cmd.expiry is None else wall + cmd.expiry), None
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
    if exists and isinstance(current, (list, tuple)):  # the log carries the item, not the whole list
        if isinstance(cmd, Push):
            return ("push", cmd.key, cmd.value, expiry_of(cmd.expiry)), None
        if isinstance(cmd, Pop):
            return ("pop", cmd.key, expiry_of(cmd.expiry)), None
    return ("put", cmd.key, _new_value(current, exists, cmd), expiry_of(cmd.expiry)), None
