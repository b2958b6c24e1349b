"""Errors of the data store layer (Zeek Broker's ``ec::no_such_key``, ``ec::type_clash``, ...).

Every error is a :class:`StoreError`. Each carries an :class:`StoreErrorCode` so that it can travel on the
wire (``to_wire``/``error_from_wire``) and be re-raised on the other side with the same class.
Whose fault: ``NoSuchKey``/``TypeClash`` are the caller's (the operation does not fit the data);
``Stale``/``Timeout`` are the network's; ``MasterExists`` is a deployment mistake; ``BackendError``
is the storage's. After any of them the store's state is unchanged (operations are atomic).
"""

from __future__ import annotations

import enum
from typing import Any

from ..errors import DecodeError, peer_repr

__all__ = [
    "StoreErrorCode",
    "StoreError",
    "NoSuchKey",
    "TypeClash",
    "Stale",
    "WriteBufferFull",
    "Timeout",
    "MasterExists",
    "BackendError",
    "StoreProtocolError",
    "StoreDecodeError",
    "AnswerForgotten",
    "error_from_wire",
]


class StoreErrorCode(enum.Enum):
    NO_SUCH_KEY = "no_such_key"
    TYPE_CLASH = "type_clash"
    STALE = "stale"
    WRITE_BUFFER_FULL = "write_buffer_full"
    TIMEOUT = "timeout"
    MASTER_EXISTS = "master_exists"
    BACKEND_FAILURE = "backend_failure"
    PROTOCOL = "protocol"
    ANSWER_FORGOTTEN = "answer_forgotten"


class StoreError(Exception):
    """Base class of all store errors."""

    code = StoreErrorCode.PROTOCOL

    def to_wire(self) -> list[Any]:
        return [self.code.value, str(self)]


class NoSuchKey(StoreError):
    """The key does not exist (or expired). ``key`` is None when rebuilt from the wire."""

    code = StoreErrorCode.NO_SUCH_KEY

    def __init__(self, key: Any, message: str | None = None) -> None:
        super().__init__(message or f"no such key: {peer_repr(key)}")
        self.key = key


class TypeClash(StoreError, TypeError):
    """The operation does not apply to the stored value's type (e.g. increment a string)."""

    code = StoreErrorCode.TYPE_CLASH


class Stale(StoreError):
    """A clone is not synchronised with its master (never was, or lost it)."""

    code = StoreErrorCode.STALE


class WriteBufferFull(Stale):
    """A clone already holds its maximum of writes the master has not acknowledged."""

    code = StoreErrorCode.WRITE_BUFFER_FULL


class Timeout(StoreError, TimeoutError):
    """A request got no answer in time; it may or may not have taken effect."""

    code = StoreErrorCode.TIMEOUT


class MasterExists(StoreError):
    """A master for this store name already exists."""

    code = StoreErrorCode.MASTER_EXISTS


class BackendError(StoreError):
    """The storage backend failed (I/O error, corrupt file, unserialisable value)."""

    code = StoreErrorCode.BACKEND_FAILURE


class AnswerForgotten(StoreError):
    """The write was applied, but its answer (a result, or an error) was forgotten before it reached
    the writer: a repeat (the first answer lost, in a failover say) answered by a master that no
    longer holds it. A replica keeps the answers of each writer's last writes that have one
    (``RESULTS_KEPT``, 64), and its log's records hold every write's answer while the log reaches
    back that far (``ReplicaConfig.log_keep``), so this takes more than 64 such writes of one writer
    applied and not answered, and older than the log. Whether the write inserted, or failed, is
    unknown; that it was applied once is not. A put, an erase or a clear is never answered so: its
    writer answers it None, which is its only answer."""

    code = StoreErrorCode.ANSWER_FORGOTTEN


class StoreProtocolError(StoreError):
    """A peer sent a well-formed message that makes no sense here, or malformed store data."""

    code = StoreErrorCode.PROTOCOL


class StoreDecodeError(StoreProtocolError, DecodeError):
    """Malformed wire data for a store command, control message, replication message or snapshot (the
    sender's fault). A :class:`broker_mqtt.DecodeError`: one ``except DecodeError`` catches every
    malformed input."""


_BY_CODE: dict[StoreErrorCode, type[StoreError]] = {
    cls.code: cls for cls in (TypeClash, Stale, WriteBufferFull, Timeout, MasterExists, BackendError,
                              StoreProtocolError, AnswerForgotten)
}


def error_from_wire(wire: Any) -> StoreError:
    """Rebuild an error from ``StoreError.to_wire()``; malformed input gives StoreProtocolError."""
    if not (isinstance(wire, (list, tuple)) and len(wire) == 2 and isinstance(wire[1], str)):
        return StoreProtocolError(f"malformed error {peer_repr(wire)}")
    try:
        code = StoreErrorCode(wire[0])
    except ValueError:
        return StoreProtocolError(f"unknown error code {peer_repr(wire[0])}: {wire[1]}")
    if code is StoreErrorCode.NO_SUCH_KEY:
        return NoSuchKey(None, wire[1])
    return _BY_CODE[code](wire[1])
