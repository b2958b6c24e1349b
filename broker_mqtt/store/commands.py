"""Store commands and control messages, and their one wire form (``docs/stores.md`` § 2).

Commands are the payload of the store channels (Zeek Broker's ``internal_command`` actions):

* writers (a clone's writer channel, or the master's own handle) send any :data:`WriteCommand`;
* the master applies them in order and broadcasts to its clones only the canonical effects
  :class:`Put`, :class:`Erase`, :class:`Clear` and :class:`Expire` (an ``Increment`` travels on as
  the ``Put`` of the resulting value), so every clone converges on the master's state whatever the
  type rules are.

The answers to a clone's ``PutUnique``, :class:`PutUniqueResult` or :class:`RequestFailed`, also
travel on the master's channel, right after the ``Put`` they caused: reliable, and a clone sees its
write before the answer (other clones ignore answers that are not theirs). The one control message
outside the channels is :class:`AttachClone` (a clone looking for its master, Broker's
``attach_clone_command``). ``expiry`` fields are relative durations in seconds (``None``: never).

The master's broadcasts of a clone's write name the writing node: ``Put``/``Erase``/``Clear`` have an
optional ``publisher`` (the node id of the writer, Zeek Broker's publisher), sent as one extra
trailing field only when set, and only by the master (writers may not claim one). A broadcast
without it was written at the master.

Elected stores also accept :class:`ComputedCommand` s: writes that compute their own effect from the
replicated state at the master (``compute(state, wall) -> (op, answer)``, deterministic). They are
declared outside this module (the queue operations of :mod:`broker_mqtt.queue`, kinds ``queue_*``) and
made decodable with :func:`register_command`; plain master/clone stores refuse them.

Wire form: a list ``[kind, field, ...]`` with the fields in declaration order; ``decode_command`` /
``decode_broadcast`` / ``decode_control`` are the only decoders, and raise
:class:`StoreDecodeError` on malformed input.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

if TYPE_CHECKING:
    from dataclasses import Field

from ..errors import peer_repr
from .backend import Entry
from .errors import StoreDecodeError, StoreError, error_from_wire

__all__ = [
    "answers_none",
    "CommandKind",
    "Put",
    "PutUnique",
    "Erase",
    "Clear",
    "Increment",
    "Decrement",
    "Append",
    "InsertInto",
    "RemoveFrom",
    "Push",
    "Pop",
    "Expire",
    "PutUniqueResult",
    "RequestFailed",
    "AttachClone",
    "Command",
    "WriteCommand",
    "PlainWriteCommand",
    "BroadcastCommand",
    "ControlMessage",
    "ComputedCommand",
    "register_command",
    "decode_command",
    "decode_control",
    "decode_broadcast",
    "snapshot_to_wire",
    "snapshot_from_wire",
]


class CommandKind(enum.Enum):
    PUT = "put"
    PUT_UNIQUE = "put_unique"
    ERASE = "erase"
    CLEAR = "clear"
    INCREMENT = "increment"
    DECREMENT = "decrement"
    APPEND = "append"
    INSERT_INTO = "insert_into"
    REMOVE_FROM = "remove_from"
    PUSH = "push"
    POP = "pop"
    EXPIRE = "expire"
    PUT_UNIQUE_RESULT = "put_unique_result"
    REQUEST_FAILED = "request_failed"
    ATTACH_CLONE = "attach_clone"
    # computed commands of work queues (broker_mqtt.queue; elected stores only)
    QUEUE_PUBLISH = "queue_publish"
    QUEUE_ACQUIRE = "queue_acquire"
    QUEUE_SETTLE = "queue_settle"
    QUEUE_SETTLE_ACQUIRE = "queue_settle_acquire"
    QUEUE_RELEASE_OWNER = "queue_release_owner"
    QUEUE_RENEW = "queue_renew"
    QUEUE_REGISTER_READER = "queue_register_reader"
    QUEUE_COMMIT_READER = "queue_commit_reader"
    QUEUE_REMOVE_READER = "queue_remove_reader"
    QUEUE_FORGET = "queue_forget"
    QUEUE_SWEEP = "queue_sweep"


# -- field validators: raise StoreDecodeError, return the (converted) value --------------------------

def _any(value: Any) -> Any:
    return value


_FOREVER = 1e15  # seconds: past any wall clock plus any expiry (None means never)


def _expiry(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < _FOREVER:
        raise StoreDecodeError(f"expiry must be None or a finite duration >= 0, got {peer_repr(value)}")
    return value


def _number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StoreDecodeError(f"amount must be a number, got {peer_repr(value)}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise StoreDecodeError(f"expected a string, got {peer_repr(value, 60)}")
    return value


def _uint(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreDecodeError(f"expected an integer >= 0, got {peer_repr(value)}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise StoreDecodeError(f"expected a boolean, got {peer_repr(value, 60)}")
    return value


def _publisher(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise StoreDecodeError(f"publisher must be a non-empty string, got {peer_repr(value)}")
    return value


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, set | frozenset):
        return frozenset(value)  # (its members are hashable already)
    if isinstance(value, dict):
        raise StoreDecodeError("a set member or table key cannot be a table")
    return value


def _index(value: Any) -> Any:
    """A set member or table key: hashable. An array arrives as a list (cbor2 gives a tuple only inside a
    set or as a map key) and becomes the tuple it was sent as."""
    try:
        hash(value)
    except TypeError:
        return _freeze(value)
    return value


def _error(value: Any) -> StoreError:
    return error_from_wire(value)


class _Wire:
    """Mixin: ``[kind, *fields]`` encoding; subclasses declare ``KIND`` and ``_CHECKS``."""

    __slots__ = ()
    KIND: ClassVar[CommandKind]
    _CHECKS: ClassVar[tuple[Callable[[Any], Any], ...]]
    #: trailing fields a wire form may leave out (their defaults then): fields added to a command
    #: later, so that what an earlier version sends still decodes
    _OPTIONAL: ClassVar[int] = 0

    if TYPE_CHECKING:  # what every subclass is: a dataclass whose fields are its wire fields, in order
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

        def __init__(self, *fields: Any) -> None: ...

    def to_wire(self) -> list[Any]:
        values = [getattr(self, f.name) for f in fields(self)]
        return [self.KIND.value, *(v.to_wire() if isinstance(v, StoreError) else v for v in values)]

    @classmethod
    def from_wire(cls, wire: Any) -> Self:
        """Decode this class's wire form; raise StoreDecodeError if malformed or another kind."""
        msg = _decode(wire, _ALL, stamped=True)
        if not isinstance(msg, cls):
            raise StoreDecodeError(f"expected {cls.__name__}, got {type(msg).__name__}")
        return msg


_W = TypeVar("_W", bound=_Wire)


def _cmd(kind: CommandKind, *checks: Callable[[Any], Any]) -> Callable[[type[_W]], type[_W]]:
    def wrap(cls: type[_W]) -> type[_W]:
        cls.KIND = kind
        cls._CHECKS = checks
        return cls

    return wrap


@_cmd(CommandKind.PUT, _any, _any, _expiry)
@dataclass(frozen=True, slots=True)
class Put(_Wire):
    """Set ``key`` to ``value`` (and its expiry)."""

    key: Any
    value: Any
    expiry: float | None = None
    publisher: str | None = None  # broadcasts only: the node that wrote it (None: the master)

    def to_wire(self) -> list[Any]:  # the hot path: same form as _Wire.to_wire, without fields()
        if self.publisher is None:
            return ["put", self.key, self.value, self.expiry]
        return ["put", self.key, self.value, self.expiry, self.publisher]


@_cmd(CommandKind.PUT_UNIQUE, _any, _any, _expiry, _str, _uint)
@dataclass(frozen=True, slots=True)
class PutUnique(_Wire):
    """Put only if ``key`` does not exist; the master answers ``who`` with a PutUniqueResult."""

    key: Any
    value: Any
    expiry: float | None
    who: str
    request_id: int


@_cmd(CommandKind.ERASE, _any)
@dataclass(frozen=True, slots=True)
class Erase(_Wire):
    """Remove ``key``; erasing a missing key is not an error."""

    key: Any
    publisher: str | None = None  # broadcasts only: the node that wrote it (None: the master)

    def to_wire(self) -> list[Any]:
        return ["erase", self.key] if self.publisher is None else ["erase", self.key, self.publisher]


@_cmd(CommandKind.CLEAR)
@dataclass(frozen=True, slots=True)
class Clear(_Wire):
    """Remove every key."""

    publisher: str | None = None  # broadcasts only: the node that wrote it (None: the master)

    def to_wire(self) -> list[Any]:
        return ["clear"] if self.publisher is None else ["clear", self.publisher]


@_cmd(CommandKind.INCREMENT, _any, _number, _expiry)
@dataclass(frozen=True, slots=True)
class Increment(_Wire):
    """Add ``amount`` to a number (int to int, float to float); a missing key counts as 0."""

    key: Any
    amount: int | float
    expiry: float | None = None


@_cmd(CommandKind.DECREMENT, _any, _number, _expiry)
@dataclass(frozen=True, slots=True)
class Decrement(_Wire):
    """Subtract ``amount`` from a number; a missing key counts as 0."""

    key: Any
    amount: int | float
    expiry: float | None = None


@_cmd(CommandKind.APPEND, _any, _any, _expiry)
@dataclass(frozen=True, slots=True)
class Append(_Wire):
    """Append a str to a str or bytes to bytes; a missing key counts as empty."""

    key: Any
    value: str | bytes
    expiry: float | None = None


@_cmd(CommandKind.INSERT_INTO, _any, _index, _any, _expiry)
@dataclass(frozen=True, slots=True)
class InsertInto(_Wire):
    """Add ``index`` to a set, or map ``index`` to ``value`` in a table (dict).

    A missing key becomes a set if ``value`` is None, else a table.
    """

    key: Any
    index: Any
    value: Any = None
    expiry: float | None = None


@_cmd(CommandKind.REMOVE_FROM, _any, _index, _expiry)
@dataclass(frozen=True, slots=True)
class RemoveFrom(_Wire):
    """Remove ``index`` from a set or table (absent index: no change); the key must exist."""

    key: Any
    index: Any
    expiry: float | None = None


@_cmd(CommandKind.PUSH, _any, _any, _expiry)
@dataclass(frozen=True, slots=True)
class Push(_Wire):
    """Append ``value`` to a vector (list); a missing key counts as empty."""

    key: Any
    value: Any
    expiry: float | None = None


@_cmd(CommandKind.POP, _any, _expiry)
@dataclass(frozen=True, slots=True)
class Pop(_Wire):
    """Remove a vector's last element (an empty vector stays empty); the key must exist."""

    key: Any
    expiry: float | None = None


@_cmd(CommandKind.EXPIRE, _any)
@dataclass(frozen=True, slots=True)
class Expire(_Wire):
    """Master → clones: ``key`` expired and is gone."""

    key: Any


@_cmd(CommandKind.PUT_UNIQUE_RESULT, _str, _uint, _bool)
@dataclass(frozen=True, slots=True)
class PutUniqueResult(_Wire):
    """Master → clones (on its channel): whether ``who``'s PutUnique ``request_id`` inserted."""

    who: str
    request_id: int
    inserted: bool


@_cmd(CommandKind.REQUEST_FAILED, _str, _uint, _error)
@dataclass(frozen=True, slots=True)
class RequestFailed(_Wire):
    """Master → clones (on its channel): ``who``'s request ``request_id`` failed with ``error``."""

    who: str
    request_id: int
    error: StoreError


@_cmd(CommandKind.ATTACH_CLONE, _str, _uint)
@dataclass(frozen=True, slots=True)
class AttachClone(_Wire):
    """Clone → master: please (re)start my channel with a fresh snapshot.

    ``attempt`` grows with every new attach by this clone; the master ignores repeats of an attempt
    it already answered (its handshake is repeated by the channel anyway).
    """

    clone: str
    attempt: int


class ComputedCommand(_Wire):
    """A write whose effect the elected store's master computes from the state (see the module
    docstring). Subclasses are frozen dataclasses decorated with ``@register_command(kind, *checks)``."""

    __slots__ = ()

    def compute(self, state: Any, wall: float) -> tuple[tuple[Any, ...], Any]:
        """``(op, answer)`` on ``state`` (a VersionedState) at wall-clock ``wall``; deterministic.
        Raise StoreError to fail the write (nothing changes; the writer gets the error)."""
        raise NotImplementedError

    def acts_for(self) -> str | None:
        """The node id (``<endpoint id hex>.<anything>``) this write acts for, if any (a queue
        consumer's owner id): the master applies it only when it comes from that node's endpoint or
        from a replica of the store, so a writer cannot settle what another holds. None: anyone
        allowed to write the store may send it."""
        return None


#: The writes plain master/clone stores accept: all but the elected stores' computed commands.
PlainWriteCommand = Put | PutUnique | Erase | Clear | Increment | Decrement | Append | InsertInto | RemoveFrom \
    | Push | Pop
WriteCommand = PlainWriteCommand | ComputedCommand
BroadcastCommand = Put | Erase | Clear | Expire
Command = WriteCommand | Expire
ControlMessage = AttachClone

_COMMANDS: dict[str, type[_Wire]] = {cls.KIND.value: cls for cls in (Put, PutUnique, Erase, Clear, Increment, Decrement, Append,
                                             InsertInto, RemoveFrom, Push, Pop, Expire)}
_CONTROL: dict[str, type[_Wire]] = {cls.KIND.value: cls for cls in (AttachClone,)}
_RESULTS: dict[str, type[_Wire]] = {cls.KIND.value: cls for cls in (PutUniqueResult, RequestFailed)}
_ALL: dict[str, type[_Wire]] = {**_COMMANDS, **_CONTROL, **_RESULTS}
_BROADCAST: dict[str, type[_Wire]] = {cls.KIND.value: cls for cls in (Put, Erase, Clear, Expire, PutUniqueResult, RequestFailed)}


_C = TypeVar("_C", bound=ComputedCommand)


def register_command(kind: CommandKind, *checks: Callable[[Any], Any]) -> Callable[[type[_C]], type[_C]]:
    """Class decorator: make a :class:`ComputedCommand` subclass decodable by :func:`decode_command`
    (``checks``: one validator per field, raising StoreDecodeError)."""
    def wrap(cls: type[_C]) -> type[_C]:
        if not issubclass(cls, ComputedCommand):
            raise TypeError(f"{cls.__name__} is not a ComputedCommand")
        _cmd(kind, *checks)(cls)
        _COMMANDS[kind.value] = cls
        _ALL[kind.value] = cls
        return cls

    return wrap


_STAMPED = (Put, Erase, Clear)  # the broadcasts that may name their publisher


def _decode(wire: Any, table: Mapping[str, type[_Wire]], *, stamped: bool = False) -> Any:
    """Decode with ``table``; ``stamped``: allow the trailing publisher of a broadcast."""
    if not isinstance(wire, (list, tuple)) or not wire:
        raise StoreDecodeError(f"a store message is a non-empty list, got {peer_repr(wire)}")
    head = wire[0]
    cls = table.get(head) if isinstance(head, str) else None  # tables are keyed by CommandKind values
    if cls is None:
        raise StoreDecodeError(f"unexpected store message kind {peer_repr(head)}")
    if cls is Put:  # the hot path
        if len(wire) == 4:
            return Put(wire[1], wire[2], _expiry(wire[3]))
        if stamped and len(wire) == 5:
            return Put(wire[1], wire[2], _expiry(wire[3]), _publisher(wire[4]))
    checks = cls._CHECKS
    if len(wire) != len(checks) + 1:
        if stamped and cls in _STAMPED and len(wire) == len(checks) + 2:
            checks = (*checks, _publisher)
        elif len(checks) - cls._OPTIONAL < len(wire) <= len(checks):
            checks = checks[:len(wire) - 1]
        else:
            raise StoreDecodeError(f"{head} has {len(checks) + 1} elements, got {len(wire)}")
    return cls(*[check(v) for check, v in zip(checks, wire[1:], strict=True)])


def decode_command(wire: Any) -> Command:
    """Decode a channel payload; raise StoreDecodeError if malformed."""
    command: Command = _decode(wire, _COMMANDS)
    return command


#: commands whose answer is always None (never an error, never a value)
_NONE_ANSWERED = frozenset({"put", "erase", "clear"})


def answers_none(wire: Any) -> bool:
    """Whether the write ``wire`` (as on the wire) is a put, an erase or a clear: applied, it is
    always answered None (a repeat's answer is known without its record)."""
    if not (isinstance(wire, list) and wire[:1] and wire[0] in _NONE_ANSWERED):
        return False
    try:
        return type(decode_command(wire)) in (Put, Erase, Clear)
    except StoreError:
        return False  # malformed: it was answered an error


def decode_broadcast(wire: Any) -> BroadcastCommand | PutUniqueResult | RequestFailed:
    """Decode a payload of the master's channel; raise StoreDecodeError if malformed or not allowed."""
    msg: BroadcastCommand | PutUniqueResult | RequestFailed = _decode(wire, _BROADCAST, stamped=True)
    return msg


def decode_control(wire: Any) -> ControlMessage:
    """Decode a control message; raise StoreDecodeError if malformed."""
    msg: ControlMessage = _decode(wire, _CONTROL)
    return msg


def snapshot_to_wire(entries: list[Entry]) -> list[list[Any]]:
    """The greeting of a clone handshake: ``[[key, value], ...]`` (clones keep no expiries)."""
    return [[e.key, e.value] for e in entries]


def snapshot_from_wire(wire: Any) -> list[Entry]:
    if not isinstance(wire, (list, tuple)) or not all(
            isinstance(item, (list, tuple)) and len(item) == 2 for item in wire):
        raise StoreDecodeError(f"a snapshot is a list of [key, value], got {peer_repr(wire, 200)}")
    return [Entry(k, v) for k, v in wire]
