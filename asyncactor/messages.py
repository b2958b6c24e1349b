"""Wire messages: one encode path, one decode path, one :class:`DecodeError`.

Theory of operation
-------------------
On the wire every message is a flat map with a type key ``"t"`` (CBOR in practice; the transport
chooses).  :func:`decode` turns such a dict into a frozen dataclass or raises :class:`DecodeError`
naming what is wrong; :func:`encode` is its inverse.  Unknown extra keys are ignored so newer peers
can add fields.  Histories are tuples here and lists on the wire.

=====  ==========================================================================
``t``  fields
=====  ==========================================================================
init   node
vers   node, version, cycle, gap, nodes, splits, n_hosts, force_in
ping   node, value, history (newest first, history[0] == node, cut to ``splits``)
hist   value, history (history[0] is the node the value belongs to)
=====  ==========================================================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .config import Config

__all__ = ["DecodeError", "Init", "Vers", "Ping", "Hist", "Message", "encode", "decode"]


class DecodeError(ValueError):
    """A peer sent something that is not a valid asyncactor message (the peer's fault).

    ``msg`` carries the offending message.  The actor counts and skips such messages."""

    def __init__(self, reason: str, msg: Any = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.msg = msg


@dataclass(frozen=True, slots=True)
class Init:
    node: str


@dataclass(frozen=True, slots=True)
class Vers:
    node: str
    config: Config


@dataclass(frozen=True, slots=True)
class Ping:
    node: str
    value: Any
    history: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Hist:
    value: Any
    history: tuple[str, ...]

    @property
    def node(self) -> str:
        return self.history[0]


Message = Init | Vers | Ping | Hist


def encode(msg: Message) -> dict[str, Any]:
    """The flat wire map for ``msg``."""
    match msg:
        case Init(node=node):
            return {"t": "init", "node": node}
        case Vers(node=node, config=c):
            return {
                "t": "vers", "node": node, "version": c.version, "cycle": c.cycle, "gap": c.gap,
                "nodes": c.nodes, "splits": c.splits, "n_hosts": c.n_hosts, "force_in": c.force_in,
            }  # fmt: skip
        case Ping(node=node, value=value, history=history):
            return {"t": "ping", "node": node, "value": value, "history": list(history)}
        case Hist(value=value, history=history):
            return {"t": "hist", "value": value, "history": list(history)}
    raise TypeError(f"not an asyncactor message: {msg!r}")


def _show(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters; never raises (an int past Python's 4300-digit
    ``repr`` limit, or anything holding one, is named by its type)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"<{type(value).__name__} that has no short form>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _node(raw: Mapping[str, Any], key: str = "node") -> str:
    node = raw.get(key)
    if not isinstance(node, str) or not node:
        raise DecodeError(f"{_show(key)} must be a non-empty string, not {_show(node)}", raw)
    return node


def _history(raw: Mapping[str, Any]) -> tuple[str, ...]:
    hist = raw.get("history")
    if not isinstance(hist, list | tuple) or not hist:
        raise DecodeError(f"'history' must be a non-empty list, not {_show(hist)}", raw)
    if not all(isinstance(n, str) and n for n in hist):
        raise DecodeError("'history' entries must be non-empty strings", raw)
    if len(set(hist)) != len(hist):
        raise DecodeError("'history' has duplicate entries", raw)
    return tuple(hist)


def _number(raw: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    val = raw.get(key)
    if isinstance(val, bool) or not isinstance(val, kind):
        raise DecodeError(f"{_show(key)} must be {kind}, not {_show(val)}", raw)
    return val


def _seconds(raw: Mapping[str, Any], key: str) -> float:
    """A duration: a finite number (an int too large for a float, or infinity, is no duration)."""
    val = _number(raw, key, (int, float))
    try:
        seconds = float(val)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):
        raise DecodeError(f"{key!r} must be a finite number of seconds, not {_show(val)}", raw)
    return seconds


def decode(raw: Any) -> Message:
    """Parse one wire map.  Raises :class:`DecodeError` for anything malformed; never others."""
    if not isinstance(raw, Mapping):
        raise DecodeError(f"message must be a map, not {type(raw).__name__}", raw)
    match raw.get("t"):
        case "init":
            return Init(_node(raw))
        case "vers":
            try:
                conf = Config(
                    version=_number(raw, "version", int),
                    cycle=_seconds(raw, "cycle"),
                    gap=_seconds(raw, "gap"),
                    nodes=_number(raw, "nodes", int),
                    splits=_number(raw, "splits", int),
                    n_hosts=_number(raw, "n_hosts", int),
                    force_in=bool(raw.get("force_in", False)),
                )
            except ValueError as exc:
                if isinstance(exc, DecodeError):
                    raise
                raise DecodeError(f"bad configuration: {exc}", raw) from None
            return Vers(_node(raw), conf)
        case "ping":
            node, history = _node(raw), _history(raw)
            if history[0] != node:
                raise DecodeError(f"ping history must start with its sender {_show(node)}", raw)
            return Ping(node, raw.get("value"), history)
        case "hist":
            return Hist(raw.get("value"), _history(raw))
        case other:
            raise DecodeError(f"unknown message type {_show(other)}", raw)
