"""The elected-store replication messages and their one wire form (``docs/elected-stores.md`` § 8).

Every message a replica or a writer sends is one of the frozen dataclasses below; on the wire it is
a list whose first element names its kind (``["hb", node, epoch, role, position, master]``, ...), in
the node message's CBOR payload. :func:`encode` is the only place that builds such a list and
:func:`decode` the only place that reads one: it checks the kind, the number of fields and their
types, and raises :class:`~.errors.StoreDecodeError` for anything malformed. Epochs, positions,
lineages, records and conflicts use their own wire forms (:mod:`.history`).

Two payloads stay in their wire form, decoded by whoever uses them: a :class:`Write`'s ``command``
(the master decodes it when it applies the write: a command that does not decode is a failed write,
recorded and answered as such) and a :class:`Snap`'s ``snapshot`` (large, and only its addressee
reads it: :meth:`~.versioned.VersionedState.parts_from_wire`). ``results`` of a :class:`WriteAck`
are the writes' answers as recorded (an error is ``["error", ...]``).

Which topic each message travels on is :mod:`.routes`' business.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import peer_repr
from ..wire.identity import node_endpoint
from .errors import StoreDecodeError
from .history import (
    Conflict,
    Epoch,
    Lineage,
    Position,
    Record,
    epoch_from_wire,
    lineage_from_wire,
    lineage_to_wire,
    position_from_wire,
    position_to_wire,
)
from .replica_events import Role

__all__ = [
    "Heartbeat",
    "Claim",
    "Promise",
    "Fetch",
    "Tail",
    "Snap",
    "SnapFetch",
    "SnapChunk",
    "Active",
    "Log",
    "Ack",
    "Write",
    "Writes",
    "WriteAck",
    "Resign",
    "ReplicationMessage",
    "encode",
    "decode",
    "sender_of",
    "group_writes",
    "split",
    "MAX_GROUP",
    "LOG_GROUP",
]

MAX_GROUP = 256  #: writes per ``writes`` message
#: records per ``log`` message: a round of 256 writes goes out as four, each acknowledged and answered
#: on its own, so that the master applies the next writes while the followers take the first
LOG_GROUP = 64


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """``hb``: node ``node`` is in ``epoch`` (None: none yet) as ``role``, at ``pos``, following ``master``."""

    node: str
    epoch: Epoch | None
    role: Role
    pos: Position
    master: str | None


@dataclass(frozen=True, slots=True)
class Claim:
    """``claim``: the sender claims mastership in ``epoch`` (its history ends at ``pos``)."""

    epoch: Epoch
    pos: Position


@dataclass(frozen=True, slots=True)
class Promise:
    """``promise``: ``node`` adopted ``epoch``; its history (``lineage``, ``last_seq``) ends at ``pos``."""

    epoch: Epoch
    node: str
    pos: Position
    lineage: Lineage
    last_seq: int


@dataclass(frozen=True, slots=True)
class Fetch:
    """``fetch``: ``requester`` asks ``source`` for the records after ``from_pos`` (None: a snapshot).
    ``epoch`` is the requester's (a fetch sent before it knows one does not decode at the receiver)."""

    epoch: Epoch | None
    requester: str
    source: str
    from_pos: Position | None


@dataclass(frozen=True, slots=True)
class Tail:
    """``tail``: ``source``'s records for ``to``; its log ends at ``upto``."""

    epoch: Epoch
    to: str
    records: list[Record]
    upto: int
    source: str


@dataclass(frozen=True, slots=True)
class Snap:
    """``snap``: ``source``'s whole state for ``to`` (``snapshot``: its wire form, decoded by ``to``)."""

    epoch: Epoch
    to: str
    snapshot: Any
    source: str


@dataclass(frozen=True, slots=True)
class SnapFetch:
    """``sfetch``: ``requester`` asks ``source`` for up to ``window`` chunks of its state (a streamed
    snapshot, :mod:`.snapshot_stream`): the entries whose packed key sorts after ``after`` (None: from
    the first key), written after ``since`` (None: every entry; else only what changed since then)."""

    epoch: Epoch
    requester: str
    source: str
    after: bytes | None
    since: Position | None
    window: int


@dataclass(frozen=True, slots=True)
class SnapChunk:
    """``schunk``: one chunk of ``source``'s state for ``to``, answering its ``sfetch`` (``after``,
    ``since``; a ``fetch`` is answered as ``after`` and ``since`` None). ``entries``: (packed key,
    packed version wire form, or None: the key is gone), read at or after position ``pos`` (None: the
    source cannot serve changes since ``since``, start over). ``next``: the last key the chunk covers
    (the next ``after``), None once the pass over the keys is complete. ``final``: part of the last,
    consistent burst at exactly ``pos``: its chunks carry the writer table in ``applied`` (rows of
    :meth:`~.versioned.VersionedState.to_wire`'s ``applied``), and the last one ``header``, ``(last seq,
    lineage, max hlc)``."""

    epoch: Epoch
    to: str
    source: str
    after: bytes | None
    since: Position | None
    pos: Position | None
    entries: list[tuple[bytes, bytes | None]]
    next: bytes | None
    final: bool = False
    applied: list[Any] = field(default_factory=list)
    header: tuple[int, Lineage, int] | None = None


@dataclass(frozen=True, slots=True)
class Active:
    """``active``: the claimant of ``epoch`` is master; its history; the conflicts of its merge; the
    histories it subsumed (merged), as ``(lineage, last seq)``; ``subsumed_at``, a position whose
    history holds all those histories (a dropped tail's up to its durable point), or None (none
    known: a master from before it was sent, or one that took over a history without it)."""

    epoch: Epoch
    pos: Position
    lineage: Lineage
    conflicts: list[Conflict]
    subsumed: list[tuple[Lineage, int]]
    subsumed_at: Position | None = None


@dataclass(frozen=True, slots=True)
class Log:
    """``log``: the master of ``epoch`` applied ``records`` (all of that epoch)."""

    epoch: Epoch
    records: list[Record]


@dataclass(frozen=True, slots=True)
class Ack:
    """``ack``: ``node`` holds (durably) every record up to ``seq`` of ``epoch``."""

    epoch: Epoch
    node: str
    seq: int


@dataclass(frozen=True, slots=True)
class Write:
    """``write``: write ``n`` of ``writer`` (from endpoint ``origin``), for the master of ``epoch``
    (None: no master known). ``command``: its wire form. ``since``, in a write sent again: the
    writer holds the answers of all its writes before it (None: not said, as in a first send)."""

    writer: str
    n: int
    origin: str
    command: Any
    epoch: Epoch | None
    since: int | None = None


@dataclass(frozen=True, slots=True)
class Writes:
    """``writes``: writes of ``writer`` (from endpoint ``origin``) as ``(n, command)`` in ``n`` order, for
    the master of ``epoch`` (None: no master known): the writes a writer places together travel as one
    message (:func:`group_writes`); the master applies each as if it came alone. ``since``: as
    :class:`Write`'s."""

    writer: str
    origin: str
    writes: list[tuple[int, Any]]
    epoch: Epoch | None
    since: int | None = None


@dataclass(frozen=True, slots=True)
class WriteAck:
    """``wack``: the master of ``epoch`` holds ``writer``'s writes up to ``upto`` durably; ``results``:
    answers by write number. ``origin``: the writer's endpoint, for a writer without a replica
    (answered there only); None for a replica's writer. ``after``: the wack answers the writes after
    it up to ``upto`` (those before were answered by an earlier wack, which the writer may not have
    received: it re-sends them); None from a master that does not say (before 2026-11-27), whose
    wack answers every write up to ``upto``."""

    epoch: Epoch
    writer: str
    upto: int
    results: dict[int, Any]
    origin: str | None = None
    after: int | None = None


@dataclass(frozen=True, slots=True)
class Resign:
    """``resign``: the master of ``epoch`` stepped down; its history ended at ``pos``."""

    epoch: Epoch
    pos: Position


ReplicationMessage = (Heartbeat | Claim | Promise | Fetch | Tail | Snap | SnapFetch | SnapChunk | Active | Log | Ack
                      | Write | Writes | WriteAck | Resign)


def group_writes(writes: list[Write]) -> list[Write | Writes]:
    """``writes`` as few messages: each run of writes of one writer, origin and epoch as one
    :class:`Writes` of up to :data:`MAX_GROUP`; a write alone stays a :class:`Write` (the form every
    master decodes)."""
    out: list[Write | Writes] = []
    i = 0
    while i < len(writes):
        first = writes[i]
        j = i + 1
        while j < len(writes) and j - i < MAX_GROUP and writes[j].writer == first.writer \
                and writes[j].origin == first.origin and writes[j].epoch == first.epoch:
            j += 1
        if j - i == 1:
            out.append(first)
        else:
            # (each since a writer says is true while it lives: the writes before it stay answered)
            since = next((w.since for w in writes[i:j] if w.since is not None), None)
            out.append(Writes(first.writer, first.origin, [(w.n, w.command) for w in writes[i:j]], first.epoch,
                              since))
        i = j
    return out


def split(wire: list[Any]) -> list[list[Any]] | None:
    """A ``log``, ``writes``, ``tail`` or ``wack`` wire list too large for one message, as two halves
    (each means what its part of the whole meant; a ``wack``'s first half answers up to the write before
    the second half's first answer, and its second half after there); None if it cannot be split (one record, write or answer, another
    kind)."""
    kind = wire[0]
    if kind == "wack" and len(wire[4]) >= 2:
        results = sorted(wire[4], key=lambda item: item[0])
        half = len(results) // 2
        first_upto = results[half][0] - 1
        second_tail = [wire[5], first_upto] if len(wire) > 6 else wire[5:]  # the second answers after the first
        return [[*wire[:3], first_upto, results[:half], *wire[5:]],
                [*wire[:4], results[half:], *second_tail]]
    at = {"log": 2, "writes": 3, "tail": 3}.get(kind) if isinstance(kind, str) else None
    if at is None or len(wire[at]) < 2:
        return None
    half = len(wire[at]) // 2
    return [[*wire[:at], wire[at][:half], *wire[at + 1:]], [*wire[:at], wire[at][half:], *wire[at + 1:]]]


def _epoch_or_none(epoch: Epoch | None) -> list[Any] | None:
    return None if epoch is None else list(epoch)


def encode(msg: ReplicationMessage) -> list[Any]:
    """The wire list of ``msg``."""
    match msg:
        case Log(epoch=epoch, records=records):
            return ["log", list(epoch), [r.to_wire() for r in records]]
        case Ack(epoch=epoch, node=node, seq=seq):
            return ["ack", list(epoch), node, seq]
        case Write(writer=writer, n=n, origin=origin, command=command, epoch=epoch, since=since):
            wire = ["write", writer, n, origin, command, _epoch_or_none(epoch)]
            return wire if since is None else [*wire, since]  # (a trailing element: first sends decode anywhere)
        case Writes(writer=writer, origin=origin, writes=writes, epoch=epoch, since=since):
            wire = ["writes", writer, origin, [[n, command] for n, command in writes], _epoch_or_none(epoch)]
            return wire if since is None else [*wire, since]
        case WriteAck(epoch=epoch, writer=writer, upto=upto, results=results, origin=origin, after=after):
            wire = ["wack", list(epoch), writer, upto, [[n, r] for n, r in results.items()]]
            if after is not None:  # "" where no origin: a string, as decoders from before ``after`` read
                wire += [origin or "", after]
            elif origin is not None:
                wire.append(origin)
            return wire
        case Heartbeat(node=node, epoch=epoch, role=role, pos=pos, master=master):
            return ["hb", node, _epoch_or_none(epoch), role.value, position_to_wire(pos), master]
        case Claim(epoch=epoch, pos=pos):
            return ["claim", list(epoch), position_to_wire(pos)]
        case Promise(epoch=epoch, node=node, pos=pos, lineage=lineage, last_seq=last_seq):
            return ["promise", list(epoch), node, position_to_wire(pos), lineage_to_wire(lineage), last_seq]
        case Fetch(epoch=epoch, requester=requester, source=source, from_pos=from_pos):
            return ["fetch", _epoch_or_none(epoch), requester, source,
                    None if from_pos is None else position_to_wire(from_pos)]
        case Tail(epoch=epoch, to=to, records=records, upto=upto, source=source):
            return ["tail", list(epoch), to, [r.to_wire() for r in records], upto, source]
        case Snap(epoch=epoch, to=to, snapshot=snapshot, source=source):
            return ["snap", list(epoch), to, snapshot, source]
        case SnapFetch(epoch=epoch, requester=requester, source=source, after=after, since=since, window=window):
            return ["sfetch", list(epoch), requester, source, after, None if since is None else position_to_wire(since),
                    window]
        case SnapChunk(epoch=epoch, to=to, source=source, after=after, since=since, pos=pos, entries=entries,
                       next=nxt, final=final, applied=applied, header=header):
            return ["schunk", list(epoch), to, source, after, None if since is None else position_to_wire(since),
                    None if pos is None else position_to_wire(pos), [[k, v] for k, v in entries], nxt, final,
                    applied, None if header is None else [header[0], lineage_to_wire(header[1]), header[2]]]
        case Active(epoch=epoch, pos=pos, lineage=lineage, conflicts=conflicts, subsumed=subsumed, subsumed_at=at):
            return ["active", list(epoch), position_to_wire(pos), lineage_to_wire(lineage),
                    [c.to_wire() for c in conflicts], [[lineage_to_wire(lin), last] for lin, last in subsumed],
                    None if at is None else position_to_wire(at)]
        case Resign(epoch=epoch, pos=pos):
            return ["resign", list(epoch), position_to_wire(pos)]
    raise TypeError(f"not a replication message: {msg!r:.80}")


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {peer_repr(value, 40)}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int):
        raise TypeError(f"expected an integer, got {peer_repr(value, 40)}")
    return value


def _records(wire: Any) -> list[Record]:
    return [Record.from_wire(r) for r in wire]


def _decode_hb(a: list[Any]) -> Heartbeat:
    node, epoch, role, pos, master = a
    return Heartbeat(_str(node), None if epoch is None else epoch_from_wire(epoch), Role(role),
                     position_from_wire(pos), None if master is None else _str(master))


def _decode_claim(a: list[Any]) -> Claim:
    epoch, pos = a
    return Claim(epoch_from_wire(epoch), position_from_wire(pos))


def _decode_promise(a: list[Any]) -> Promise:
    epoch, node, pos, lineage, last_seq = a
    return Promise(epoch_from_wire(epoch), _str(node), position_from_wire(pos), lineage_from_wire(lineage),
                   int(last_seq))


def _decode_fetch(a: list[Any]) -> Fetch:
    epoch, requester, source, from_pos = a
    return Fetch(epoch_from_wire(epoch), _str(requester), _str(source),
                 None if from_pos is None else position_from_wire(from_pos))


def _decode_tail(a: list[Any]) -> Tail:
    epoch, to, records, upto, source = a
    return Tail(epoch_from_wire(epoch), _str(to), _records(records), _int(upto), _str(source))


def _decode_snap(a: list[Any]) -> Snap:
    epoch, to, snapshot, source = a
    return Snap(epoch_from_wire(epoch), _str(to), snapshot, _str(source))


def _key_or_none(value: Any) -> bytes | None:
    if value is not None and not isinstance(value, bytes):
        raise TypeError(f"expected a packed key, got {peer_repr(value, 40)}")
    return value


def _decode_sfetch(a: list[Any]) -> SnapFetch:
    epoch, requester, source, after, since, window = a
    return SnapFetch(epoch_from_wire(epoch), _str(requester), _str(source), _key_or_none(after),
                     None if since is None else position_from_wire(since), _int(window))


def _decode_schunk(a: list[Any]) -> SnapChunk:
    epoch, to, source, after, since, pos, entries, nxt, final, applied, header = a
    pairs = []
    for k, v in entries:
        if not isinstance(k, bytes) or not (v is None or isinstance(v, bytes)):
            raise TypeError(f"bad snapshot entry {peer_repr([k, v], 60)}")
        pairs.append((k, v))
    if not isinstance(final, bool) or not isinstance(applied, list):
        raise TypeError("bad snapshot chunk flags")
    head = None
    if header is not None:
        seq, lineage, hlc = header
        head = (_int(seq), lineage_from_wire(lineage), _int(hlc))
    return SnapChunk(epoch_from_wire(epoch), _str(to), _str(source), _key_or_none(after),
                     None if since is None else position_from_wire(since),
                     None if pos is None else position_from_wire(pos), pairs, _key_or_none(nxt), final, applied, head)


def _decode_active(a: list[Any]) -> Active:
    epoch, pos, lineage, conflicts, subsumed = a[:5]
    at = a[5] if len(a) > 5 else None  # (a master from before 2026-11-29 sends none)
    held = None if at is None else position_from_wire(at)
    if held is not None and held[1] is None:
        held = None  # no epoch: no history holds it (contains() would take any short one as holding it)
    return Active(epoch_from_wire(epoch), position_from_wire(pos), lineage_from_wire(lineage),
                  [Conflict.from_wire(c) for c in conflicts],
                  [(lineage_from_wire(lin), int(last)) for lin, last in subsumed], held)


def _decode_log(a: list[Any]) -> Log:
    epoch, records = a
    log = Log(epoch_from_wire(epoch), _records(records))
    for record in log.records:  # a master's records, of its epoch: others would pass the fence
        if record.epoch != log.epoch:
            raise StoreDecodeError(f"a log record of epoch {record.epoch} in a log message of {log.epoch}")
    return log


def _decode_ack(a: list[Any]) -> Ack:
    epoch, node, seq = a
    return Ack(epoch_from_wire(epoch), _str(node), int(seq))


def _since(a: list[Any], at: int) -> int | None:
    """The optional trailing ``since`` of a write message (at index ``at``), checked."""
    if len(a) == at:
        return None
    if len(a) != at + 1:
        raise StoreDecodeError(f"a write message of {len(a) + 1} elements")
    return _int(a[at])


def _decode_write(a: list[Any]) -> Write:
    writer, n, origin, command, epoch = a[:5]
    return Write(_str(writer), int(n), _str(origin), command, None if epoch is None else epoch_from_wire(epoch),
                 _since(a, 5))


def _decode_writes(a: list[Any]) -> Writes:
    writer, origin, writes, epoch = a[:4]
    return Writes(_str(writer), _str(origin), [(_int(n), command) for n, command in writes],
                  None if epoch is None else epoch_from_wire(epoch), _since(a, 4))


def _decode_wack(a: list[Any]) -> WriteAck:
    epoch, writer, upto, results = a[:4]
    origin = (_str(a[4]) or None) if len(a) > 4 else None
    after = _int(a[5]) if len(a) > 5 else None
    return WriteAck(epoch_from_wire(epoch), _str(writer), int(upto), {int(n): r for n, r in results}, origin, after)


def _decode_resign(a: list[Any]) -> Resign:
    epoch, pos = a
    return Resign(epoch_from_wire(epoch), position_from_wire(pos))


_DECODERS: dict[str, Callable[[list[Any]], ReplicationMessage]] = {
    "log": _decode_log,
    "ack": _decode_ack,
    "write": _decode_write,
    "writes": _decode_writes,
    "wack": _decode_wack,
    "hb": _decode_hb,
    "claim": _decode_claim,
    "promise": _decode_promise,
    "fetch": _decode_fetch,
    "tail": _decode_tail,
    "snap": _decode_snap,
    "sfetch": _decode_sfetch,
    "schunk": _decode_schunk,
    "active": _decode_active,
    "resign": _decode_resign,
}


def decode(wire: Any, *, me: str | None = None) -> ReplicationMessage:
    """The message ``wire`` holds. Raises :class:`StoreDecodeError` for anything malformed: not a
    list with a known kind, the wrong number of fields, a field of the wrong type.

    ``me``: the receiving node. A :class:`Tail` addressed to another node comes back without its
    records (every replica hears every tail; only its addressee reads them), so the others do not
    decode up to a chunk of records each time."""
    if not isinstance(wire, (list, tuple)) or not wire or not isinstance(wire[0], str):
        raise StoreDecodeError(f"a replication message is a list with a kind, got {peer_repr(wire, 80)}")
    decoder = _DECODERS.get(wire[0])
    if decoder is None:
        raise StoreDecodeError(f"unknown replication message kind {peer_repr(wire[0])}")
    fields = list(wire[1:])
    try:
        if me is not None and decoder is _decode_tail and len(fields) == 5 and fields[1] != me:
            fields[2] = []  # another node's records: not decoded
        elif me is not None and decoder is _decode_schunk and len(fields) == 11 and fields[1] != me:
            fields[6], fields[9] = [], []  # another node's snapshot chunk: not decoded
        return decoder(fields)
    except (TypeError, ValueError, IndexError, KeyError, OverflowError) as exc:  # (int() of an infinity)
        raise StoreDecodeError(f"bad {wire[0]} message: {exc}") from exc


def sender_of(msg: ReplicationMessage) -> str:
    """The endpoint (id in hex) that ``msg`` claims to come from: the node it speaks for (node ids are
    ``<endpoint id hex>.<incarnation>``), the master of its epoch for the master's messages, the
    origin of a write. A receiver believes ``msg`` only if this is the endpoint the topic it came
    on names (docs/security.md)."""
    match msg:
        case Heartbeat(node=node) | Promise(node=node) | Ack(node=node):
            return node_endpoint(node)
        case Fetch(requester=node) | Tail(source=node) | Snap(source=node) | SnapFetch(requester=node) \
                | SnapChunk(source=node):
            return node_endpoint(node)
        case Write(origin=origin) | Writes(origin=origin):
            return origin
        case Claim(epoch=epoch) | Active(epoch=epoch) | Log(epoch=epoch) | WriteAck(epoch=epoch) | Resign(epoch=epoch):
            return node_endpoint(epoch[1])
    raise TypeError(f"not a replication message: {msg!r}")
