"""The master of a data store, sans-io (Zeek Broker's ``master_actor``; ``docs/stores.md`` § 3).

Theory of operation:

* The master owns the authoritative copy in a :class:`~.backend.Backend`. Every write (local via
  :meth:`Master.execute`, or remote from a clone's writer channel) is applied in arrival order by
  :func:`apply_write`; a successful write is broadcast to the clones on the master's channel
  (a :class:`~broker_mqtt.channel.Producer`) as its canonical effect (``Put``/``Erase``/``Clear``).
* Expiry: every write sets the key's expiry to the write's ``expiry`` (``None``: never), as in
  Broker. The master alone enforces it: when ``tick(now)`` passes a key's expiry the key is removed
  and an ``Expire`` broadcast. ``next_deadline`` includes the earliest expiry.
* A clone joins with ``AttachClone``; the master answers with a channel handshake whose greeting is
  a snapshot, so the clone starts at the master's current sequence number. A clone the channel
  lost that speaks again is re-added the same way (it reloads the snapshot).
* Each clone that writes owns a writer channel towards the master (the clone produces, the master
  consumes, one :class:`~broker_mqtt.channel.Consumer` per writer, created on its handshake).
  Writer channels never time out: a partitioned clone's buffered writes apply when it returns.
  A writer's handshake greeting names the node to send its ACKs to (the clone's id).
  A remote ``PutUnique`` is answered with ``PutUniqueResult`` or ``RequestFailed`` broadcast on
  the clone channel right after its effect (reliable; clones ignore answers for others). Any
  other remote write that fails is reported to its clone as ``RequestFailed(clone, 0, error)``.

Nothing here does I/O or reads a clock. Outgoing messages are :class:`Envelope` values drained
with ``to_send()``; ``to=None`` means "all clones of this store".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeGuard

from .. import channel as ch
from ..errors import peer_repr
from .backend import Backend, Entry
from .commands import (
    Append,
    AttachClone,
    BroadcastCommand,
    Clear,
    ControlMessage,
    Decrement,
    Erase,
    Expire,
    Increment,
    InsertInto,
    PlainWriteCommand,
    Pop,
    Push,
    Put,
    PutUnique,
    PutUniqueResult,
    RemoveFrom,
    RequestFailed,
    WriteCommand,
    decode_command,
    snapshot_to_wire,
)
from .errors import NoSuchKey, StoreDecodeError, StoreError, TypeClash

__all__ = [
    "Envelope",
    "apply_write",
    "CloneAttached",
    "CloneLost",
    "RemoteWriteFailed",
    "WritesLost",
    "MasterEvent",
    "Master",
]

_WRITES = frozenset({Put, PutUnique, Erase, Clear, Increment, Decrement, Append, InsertInto, RemoveFrom, Push, Pop})


def _is_plain_write(command: object) -> TypeGuard[PlainWriteCommand]:
    """Whether ``command`` is one of the write commands a master applies (that very class, not a subclass)."""
    return type(command) in _WRITES

#: Events per EventBatch message: the cores send each run of consecutive channel events in batches
#: of at most this many (``Producer.to_send(batch=...)``).
MAX_BATCH = 256
NEVER_TIMEOUT = 10**9  # heartbeat intervals: writer channels are never dropped for silence


@dataclass(frozen=True, slots=True)
class Envelope:
    """A message to send: to node ``to``, or to every clone of the store when ``to`` is None."""

    message: ch.Message | ControlMessage
    to: str | None = None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _new_value(current: Any, exists: bool, cmd: WriteCommand) -> Any:
    """The value ``cmd`` leaves at its key; raise TypeClash or NoSuchKey (nothing changed)."""
    match cmd:
        case Increment(amount=amount) | Decrement(amount=amount):
            sign = 1 if isinstance(cmd, Increment) else -1
            if not exists:
                return sign * amount
            if not _is_number(current) or type(current) is not type(amount):
                raise TypeClash(f"cannot {cmd.KIND.value} {type(current).__name__} {peer_repr(cmd.key)} "
                                f"by {type(amount).__name__}")
            return current + sign * amount
        case Append(value=value):
            if not isinstance(value, (str, bytes)):
                raise TypeClash(f"can only append str or bytes, not {type(value).__name__}")
            if not exists:
                return value
            if type(current) is not type(value):
                raise TypeClash(f"cannot append {type(value).__name__} to "
                                f"{type(current).__name__} {peer_repr(cmd.key)}")
            joined: Any = current
            return joined + value
        case InsertInto(index=index, value=value):
            if not exists:
                current = set() if value is None else {}
            if isinstance(current, (set, frozenset)):
                if value is not None:
                    raise TypeClash(f"{peer_repr(cmd.key)} is a set: insert_into takes no value")
                return set(current) | {index}
            if isinstance(current, dict):
                return {**current, index: value}
            raise TypeClash(f"cannot insert_into {type(current).__name__} {peer_repr(cmd.key)}")
        case RemoveFrom(index=index):
            if not exists:
                raise NoSuchKey(cmd.key)
            if isinstance(current, (set, frozenset)):
                return set(current) - {index}
            if isinstance(current, dict):
                return {k: v for k, v in current.items() if k != index}
            raise TypeClash(f"cannot remove_from {type(current).__name__} {peer_repr(cmd.key)}")
        case Push(value=value):
            if not exists:
                return [value]
            if not isinstance(current, (list, tuple)):
                raise TypeClash(f"cannot push to {type(current).__name__} {peer_repr(cmd.key)}")
            return [*current, value]
        case Pop():
            if not exists:
                raise NoSuchKey(cmd.key)
            if not isinstance(current, (list, tuple)):
                raise TypeClash(f"cannot pop from {type(current).__name__} {peer_repr(cmd.key)}")
            return list(current[:-1])
    raise AssertionError(cmd)  # pragma: no cover


def _live(entry: Entry | None, now: float) -> Entry | None:
    """The entry unless it expired (the master's tick may not have swept it yet)."""
    return None if entry is None or (entry.expiry is not None and entry.expiry <= now) else entry


def apply_write(backend: Backend, cmd: PlainWriteCommand, now: float, *, seq: int | None = None,
                publisher: str | None = None) -> tuple[Any, BroadcastCommand | None]:
    """Apply one write to ``backend``; return ``(result, effect to broadcast or None)``.

    ``result`` is whether a PutUnique inserted, else None. ``seq`` is recorded with the change;
    ``publisher`` (the writing node, None: the master itself) is stamped on the effect.
    Raises TypeClash / NoSuchKey / BackendError with the backend unchanged.
    """
    if type(cmd) is Put:  # the hot path
        expiry = cmd.expiry
        backend.put(cmd.key, cmd.value, None if expiry is None else now + expiry, seq=seq)
        return None, cmd if cmd.publisher == publisher else Put(cmd.key, cmd.value, expiry, publisher)

    def expiry_of(duration: float | None) -> float | None:
        return None if duration is None else now + duration

    match cmd:
        case PutUnique(key=key, value=value, expiry=expiry):
            if _live(backend.get_entry(key), now) is not None:
                return False, None
            backend.put(key, value, expiry_of(expiry), seq=seq)
            return True, Put(key, value, expiry, publisher)
        case Erase(key=key):
            backend.erase(key, seq=seq)
            return None, Erase(key, publisher)
        case Clear():
            backend.clear(seq=seq)
            return None, Clear(publisher)
    entry = _live(backend.get_entry(cmd.key), now)
    value = _new_value(None if entry is None else entry.value, entry is not None, cmd)
    expiry = cmd.expiry
    backend.put(cmd.key, value, expiry_of(expiry), seq=seq)
    return None, Put(cmd.key, value, expiry, publisher)


@dataclass(frozen=True, slots=True)
class CloneAttached:
    clone: str


@dataclass(frozen=True, slots=True)
class CloneLost:
    clone: str
    reason: ch.LossReason


@dataclass(frozen=True, slots=True)
class RemoteWriteFailed:
    """A write from ``writer`` failed (nothing changed; only the writer is told, by RequestFailed)."""

    writer: str
    command: Any
    error: StoreError


@dataclass(frozen=True, slots=True)
class WritesLost:
    """Writes ``first..last`` of ``writer`` never arrived (its channel could not retransmit them)."""

    writer: str
    first: int
    last: int


MasterEvent = CloneAttached | CloneLost | RemoteWriteFailed | WritesLost


class Master:
    """One store's master: authoritative state, clone channel, writer inputs. See module docstring."""

    def __init__(self, name: str, node_id: str, backend: Backend, now: float, *,
                 config: ch.ChannelConfig | None = None) -> None:
        self.name = name
        self.id = node_id
        self.backend = backend
        self.config = config if config is not None else ch.ChannelConfig()
        self._writer_config = dataclasses.replace(self.config, connection_timeout=NEVER_TIMEOUT)
        self.producer = ch.Producer(node_id, now, config=self.config)
        self._inputs: dict[str, ch.Consumer] = {}
        self._reply_to: dict[str, str] = {}  # writer id -> node id
        self._attempts: dict[str, int] = {}  # clone -> highest AttachClone attempt answered
        self._outbox: list[Envelope] = []
        self._now = now

    # -- reads (local, never stale) -------------------------------------------------------------

    def get(self, key: Any) -> Any:
        """The value of ``key``; raise NoSuchKey."""
        return self.backend.get(key)

    def exists(self, key: Any) -> bool:
        return self.backend.exists(key)

    def keys(self) -> list[Any]:
        return self.backend.keys()

    def snapshot(self) -> list[Entry]:
        return self.backend.snapshot()

    # -- state ----------------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """No pending clone handshake, every clone ACKed the latest command, no buffered writes."""
        return self.producer.idle and all(c.idle for c in self._inputs.values())

    @property
    def next_deadline(self) -> float:
        deadlines = [self.producer.next_deadline, *(c.next_deadline for c in self._inputs.values())]
        expiry = self.backend.next_expiry()
        if expiry is not None:
            deadlines.append(expiry)
        return min(deadlines)

    # -- inputs ---------------------------------------------------------------------------------

    def execute(self, command: WriteCommand, now: float) -> Any:
        """Apply a local write now; return PutUnique's result (bool), else None.

        Raises TypeClash / NoSuchKey / BackendError; then nothing changed and nothing is sent.
        Raises TypeError for anything that is not a write command (caller's mistake).
        """
        if not _is_plain_write(command):
            raise TypeError(f"not a store write command: {command!r}")
        return self._apply(command, now, None)

    def _apply(self, command: PlainWriteCommand, now: float, publisher: str | None) -> Any:
        if now > self._now:
            self._now = now
        producer = self.producer
        if type(command) is Put:  # the hot path: apply_write's Put case, broadcast without an effect object
            key, value, expiry = command.key, command.value, command.expiry
            self.backend.put(key, value, None if expiry is None else now + expiry, seq=producer.last_seq + 1)
            producer.produce(["put", key, value, expiry] if publisher is None
                             else ["put", key, value, expiry, publisher], now)
            return None
        result, effect = apply_write(self.backend, command, now, seq=producer.last_seq + 1, publisher=publisher)
        if effect is not None:
            producer.produce(effect.to_wire(), now)
        return result

    def handle(self, message: ch.Message | ControlMessage, now: float) -> list[MasterEvent]:
        """Process a message from a clone (control or channel); return what happened.

        Messages for other producers/nodes are ignored. Raises ChannelProtocolError for a clone
        that breaks the channel protocol (state unchanged).
        """
        self._now = max(self._now, now)
        events: list[MasterEvent] = []
        match message:
            case AttachClone(clone=clone, attempt=attempt):
                if attempt > self._attempts.get(clone, -1):
                    self._attempts[clone] = attempt
                    self._add_clone(clone, now)
            case ch.CumulativeAck() | ch.Nack():
                if message.producer == self.id:
                    events.extend(self._producer_events(self.producer.handle(message, now), now))
            case ch.Handshake() | ch.Event() | ch.EventBatch() | ch.Heartbeat() | ch.RetransmitFailed():
                events.extend(self._from_writer(message, now))
        self._collect()
        return events

    def tick(self, now: float) -> list[MasterEvent]:
        """Run due timers: expiries, channel heartbeats/timeouts, writer ACKs."""
        self._now = max(self._now, now)
        events: list[MasterEvent] = []
        expiry = self.backend.next_expiry()
        if expiry is not None and expiry <= now:
            for key in self.backend.expire(now, seq=self.producer.last_seq):
                self.producer.produce(Expire(key).to_wire(), now)
            self.backend.set_last_seq(self.producer.last_seq)
        events.extend(self._producer_events(self.producer.tick(now), now))
        for writer, consumer in list(self._inputs.items()):
            events.extend(self._writer_events(writer, consumer.tick(now), now))
        self._collect()
        return events

    def to_send(self) -> list[Envelope]:
        """Drain and return the messages to send, in order."""
        self._collect()
        out, self._outbox = self._outbox, []
        return out

    # -- internals ------------------------------------------------------------------------------

    def _add_clone(self, clone: str, now: float) -> None:
        greeting = snapshot_to_wire(self.backend.snapshot())
        self.producer.add_consumer(clone, now, greeting=greeting)

    def _producer_events(self, events: list[ch.ProducerEvent], now: float) -> list[MasterEvent]:
        out: list[MasterEvent] = []
        for event in events:
            match event:
                case ch.HandshakeCompleted(consumer=clone):
                    out.append(CloneAttached(clone))
                case ch.ConsumerLost(consumer=clone, reason=reason):
                    out.append(CloneLost(clone, reason))
                case ch.UnknownConsumer(consumer=clone) if clone in self._attempts:
                    self._add_clone(clone, now)  # dropped earlier but alive: resynchronise it
        return out

    def _from_writer(self, message: ch.ProducerMessage, now: float) -> list[MasterEvent]:
        writer = message.producer
        consumer = self._inputs.get(writer)
        if consumer is None:
            if not isinstance(message, ch.Handshake) or message.consumer != self.id:
                return []
            consumer = self._inputs[writer] = ch.Consumer(self.id, writer, now, config=self._writer_config)
            # the writer's handshake greeting is the node to answer (a clone's id); default: the writer
            self._reply_to[writer] = message.greeting if isinstance(message.greeting, str) else writer
        return self._writer_events(writer, consumer.handle(message, now), now)

    def _writer_events(self, writer: str, events: list[ch.ConsumerEvent], now: float) -> list[MasterEvent]:
        out: list[MasterEvent] = []
        for event in events:
            if type(event) is ch.Delivered:  # the common case first
                out.extend(self._remote_write(writer, event.payload, now))
                continue
            match event:
                case ch.EventsLost(first=first, last=last):
                    out.append(WritesLost(writer, first, last))
                case ch.ProducerLost():  # pragma: no cover - writer channels never time out
                    del self._inputs[writer]
        return out

    def _remote_write(self, writer: str, payload: Any, now: float) -> list[MasterEvent]:
        try:
            command = decode_command(payload)
            if not _is_plain_write(command):
                raise StoreDecodeError(f"writers may not send {command.KIND.value}")
            result = self._apply(command, now, self._reply_to.get(writer, writer))
        except StoreError as exc:
            if isinstance(payload, list) and payload[:1] == ["put_unique"]:
                try:
                    cmd = PutUnique.from_wire(payload)
                    self.producer.produce(RequestFailed(cmd.who, cmd.request_id, exc).to_wire(), now)
                except StoreError:
                    pass
            else:  # tell the writing clone too: request id 0 stands for "one of your plain writes"
                self.producer.produce(RequestFailed(self._reply_to.get(writer, writer), 0, exc).to_wire(), now)
            return [RemoteWriteFailed(writer, payload, exc)]
        if isinstance(command, PutUnique):
            self.producer.produce(PutUniqueResult(command.who, command.request_id, result).to_wire(), now)
        return []

    def _collect(self) -> None:
        for out in self.producer.to_send(batch=MAX_BATCH):
            self._outbox.append(Envelope(out.message, out.to))
        for writer, consumer in self._inputs.items():
            for msg in consumer.to_send():
                self._outbox.append(Envelope(msg, self._reply_to[writer]))
