"""Deterministic collision resolution and ping timing: the two overridable policies.

Theory of operation
-------------------
Every node that sees the same set of crossing ``ping`` messages must pick the same winner, whatever
order the messages arrived in.  :func:`has_priority` is therefore a *total order* over ``(node,
value)`` pairs that looks only at message contents.  Values travel as CBOR, so a tuple sent by one
node arrives as a list at another, and two nodes may well hold values of different types: comparing
them with ``<`` directly would crash (``1 < "a"``) or disagree between nodes (``(1,) == [1]`` is
False).  :func:`canonical_key` maps every value onto a key of a single comparable shape
``(type rank, payload)``, with lists and tuples equal, so the order is total and the same everywhere.

:func:`default_ping_delay` returns ``d`` in ``[0, 2]``: a node waits ``cycle + d * gap`` after a
ping before it pings itself (docs/asyncactor.md §3).  Chain members take turns oldest first; a node
off the chain usually bids after the chain and occasionally early, so newcomers get in.
"""

from __future__ import annotations

import math
import random
from typing import Any, Protocol

__all__ = ["canonical_key", "default_has_priority", "default_ping_delay", "PriorityFn", "PingDelayFn"]

# type ranks: None < bool < number < str < bytes < sequence < mapping < anything else
_R_NONE, _R_BOOL, _R_NUM, _R_STR, _R_BYTES, _R_SEQ, _R_MAP, _R_OTHER = range(8)


def canonical_key(value: Any) -> tuple[Any, ...]:
    """A key with a total order that is equal on every node for equal wire values.

    Lists and tuples map to the same key; ints and floats compare numerically; NaN sorts above
    every other number; bools are not numbers (CBOR keeps them apart); unknown types compare by
    type name and ``repr``.  Never raises for values that survive a CBOR round trip.
    """
    if value is None:
        return (_R_NONE,)
    if isinstance(value, bool):
        return (_R_BOOL, int(value))
    if isinstance(value, int | float):
        if isinstance(value, float) and math.isnan(value):
            return (_R_NUM, 1, 0)
        return (_R_NUM, 0, value)
    if isinstance(value, str):
        return (_R_STR, value)
    if isinstance(value, bytes | bytearray | memoryview):
        return (_R_BYTES, bytes(value))
    if isinstance(value, list | tuple):
        return (_R_SEQ, tuple(canonical_key(v) for v in value))
    if isinstance(value, dict):
        items = sorted((canonical_key(k), canonical_key(v)) for k, v in value.items())
        return (_R_MAP, tuple(items))
    return (_R_OTHER, type(value).__name__, repr(value))


class PriorityFn(Protocol):
    def __call__(self, his_node: str, his_value: Any, my_node: str, my_value: Any) -> bool: ...


class PingDelayFn(Protocol):
    def __call__(
        self, pos: int | None, length: int, max_length: int, n_hosts: int, rng: random.Random
    ) -> float: ...


def default_has_priority(his_node: str, his_value: Any, my_node: str, my_value: Any) -> bool:
    """True if ``his`` beats ``mine``: None loses to anything, a larger value wins, equal values
    (canonically) go to the lexicographically smaller node name.  Deterministic and total."""
    if (his_value is None) != (my_value is None):
        return my_value is None
    hk, mk = canonical_key(his_value), canonical_key(my_value)
    if hk != mk:
        return hk > mk
    return his_node < my_node


def default_ping_delay(
    pos: int | None, length: int, max_length: int, n_hosts: int, rng: random.Random
) -> float:
    """The established asyncactor delays, as a multiple of ``gap`` (after ``cycle``).

    ``pos``: my index in the history (0: I pinged last; None: I am not on the chain);
    ``length``: history length; ``max_length``: the ``nodes`` setting (-1: unlimited);
    ``n_hosts``: rough group size.
    """
    if pos == 0:
        return 2.0
    if pos is not None:
        # oldest (pos == length-1) 0.875, then 0.9375, 0.96875, ... towards the newest
        return 1.0 - 2.0 ** -(3 + min(length - 1 - pos, 40))
    free = max(max_length - length, 1) if max_length > 0 else 1
    if rng.random() < 1.0 / (free * max(n_hosts, 1)):
        return rng.uniform(0.0, 1.0 / 3.0)
    return rng.uniform(1.5, 2.0)
