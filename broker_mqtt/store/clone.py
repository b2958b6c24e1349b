"""A clone of a data store, sans-io (Zeek Broker's ``clone_actor``; ``docs/stores.md`` § 4).

Theory of operation:

* The clone keeps a local copy in a backend (memory by default) and answers reads from it.
  It is *stale* until it has loaded a snapshot from the master, and again from the moment it
  learns it missed commands (``EventsLost``) or lost the master (``ProducerLost``) until the
  next snapshot. Reads of a stale clone raise :class:`Stale` unless ``allow_stale=True``.
* Synchronising: the clone sends ``AttachClone(attempt)`` every heartbeat interval with a fresh
  channel :class:`~broker_mqtt.channel.Consumer` until the master's handshake arrives; its greeting
  is the snapshot, loaded atomically. Then the master's broadcasts (``Put``/``Erase``/``Clear``/
  ``Expire``) are applied in sequence order, each recorded with its sequence number. Any loss
  starts a new attempt.
* Writes never touch the local copy: they go to the master on the clone's writer channel (created
  on the first write) and come back as broadcasts. While the master is unreachable, up to
  ``write_buffer`` unacknowledged writes are buffered in that channel; the next write raises
  :class:`WriteBufferFull` (nothing queued). ``PutUnique`` gets a request id; its answer (or a
  :class:`Timeout` after ``request_timeout``) is reported as an event.

No I/O, no clock: the caller passes ``now``, calls ``tick`` at ``next_deadline``, drains ``to_send``.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from .. import channel as ch
from .backend import Backend, MemoryBackend
from .commands import (
    AttachClone,
    Clear,
    Command,
    ComputedCommand,
    ControlMessage,
    Erase,
    Expire,
    Put,
    PutUnique,
    PutUniqueResult,
    RequestFailed,
    WriteCommand,
    decode_broadcast,
    decode_command,
    snapshot_from_wire,
)
from .errors import Stale, StoreDecodeError, StoreError, Timeout, WriteBufferFull
from .master import _WRITES, MAX_BATCH, NEVER_TIMEOUT, Envelope, _new_value

__all__ = [
    "CloneState",
    "Synced",
    "WentStale",
    "PutUniqueAnswered",
    "RequestError",
    "CloneWriteFailed",
    "CloneEvent",
    "Clone",
    "DEFAULT_WRITE_BUFFER",
    "DEFAULT_REQUEST_TIMEOUT",
]

DEFAULT_WRITE_BUFFER = 1024  # unacknowledged writes a clone buffers before WriteBufferFull
DEFAULT_REQUEST_TIMEOUT = 10.0  # seconds a put_unique waits for the master's answer
_UNCHECKED = frozenset({Put, PutUnique, Erase, Clear})  # writes that cannot fail at the master (types)


class CloneState(enum.Enum):
    ATTACHING = "attaching"  # stale: waiting for a snapshot from the master
    SYNCED = "synced"


@dataclass(frozen=True, slots=True)
class Synced:
    """A snapshot was loaded; the clone is up to date from sequence number ``first_seq``."""

    first_seq: int


@dataclass(frozen=True, slots=True)
class WentStale:
    """The clone stopped being synchronised (``reason``) and is re-attaching."""

    reason: str


@dataclass(frozen=True, slots=True)
class PutUniqueAnswered:
    request_id: int
    inserted: bool


@dataclass(frozen=True, slots=True)
class RequestError:
    """Request ``request_id`` failed: Timeout (outcome unknown) or the master's error."""

    request_id: int
    error: StoreError


@dataclass(frozen=True, slots=True)
class CloneWriteFailed:
    """The master refused one of this clone's plain writes (not a put_unique); nothing changed."""

    error: StoreError


CloneEvent = Synced | WentStale | PutUniqueAnswered | RequestError | CloneWriteFailed


class Clone:
    """One store's clone; see the module docstring."""

    def __init__(self, name: str, clone_id: str, master_id: str, now: float, *,
                 backend: Backend | None = None, config: ch.ChannelConfig | None = None,
                 write_buffer: int = DEFAULT_WRITE_BUFFER, request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                 incarnation: int = 0) -> None:
        self.name = name
        self.id = clone_id
        self.master = master_id
        self.backend = backend if backend is not None else MemoryBackend()
        self.config = config if config is not None else ch.ChannelConfig()
        self.write_buffer = write_buffer
        self.request_timeout = request_timeout
        self.writer_id = f"{clone_id}/w{incarnation}"
        self._writer_config = dataclasses.replace(self.config, connection_timeout=NEVER_TIMEOUT,
                                                  buffer_size=max(write_buffer, 1))
        self.state = CloneState.ATTACHING
        # the broadcast command being applied to the backend, if any: lets an observing backend
        # tell an erase from an expiry, and see the publisher
        self.applying: Any = None
        self._attempt = -1
        self._consumer = ch.Consumer(clone_id, master_id, now, config=self.config)
        self._writer: ch.Producer | None = None
        self._next_request = 1
        self._requests: dict[int, float] = {}  # request id -> deadline
        self._outbox: list[Envelope] = []
        self._next_attach = now
        self._now = now
        self._reattach(now)

    # -- reads ----------------------------------------------------------------------------------

    @property
    def stale(self) -> bool:
        return self.state is not CloneState.SYNCED

    def _check(self, allow_stale: bool) -> None:
        if self.stale and not allow_stale:
            raise Stale(f"clone {self.id} of store {self.name!r} is not synchronised with {self.master}")

    def get(self, key: Any, *, allow_stale: bool = False) -> Any:
        """The local value of ``key``; raise NoSuchKey, or Stale while not synchronised."""
        self._check(allow_stale)
        return self.backend.get(key)

    def exists(self, key: Any, *, allow_stale: bool = False) -> bool:
        self._check(allow_stale)
        return self.backend.exists(key)

    def keys(self, *, allow_stale: bool = False) -> list[Any]:
        self._check(allow_stale)
        return self.backend.keys()

    # -- state ----------------------------------------------------------------------------------

    @property
    def unacked_writes(self) -> int:
        if self._writer is None or not self._writer.has_consumer(self.master):
            return 0
        return self._writer.last_seq - self._writer.acked(self.master)

    @property
    def idle(self) -> bool:
        """Synchronised, nothing buffered from the master, every local write ACKed, no request open."""
        return (self.state is CloneState.SYNCED and self._consumer.idle and not self._requests
                and (self._writer is None or self._writer.idle))

    @property
    def next_deadline(self) -> float:
        deadlines = [self._consumer.next_deadline, *self._requests.values()]
        if self.state is CloneState.ATTACHING:
            deadlines.append(self._next_attach)
        if self._writer is not None:
            deadlines.append(self._writer.next_deadline)
        return min(deadlines)

    # -- writes ---------------------------------------------------------------------------------

    def execute(self, command: WriteCommand, now: float) -> int | None:
        """Queue a write for the master; return the request id of a PutUnique, else None.

        Never blocks. Raises WriteBufferFull (nothing queued) when ``write_buffer`` writes are
        still unacknowledged. The effect shows locally once the master's broadcast arrives.
        """
        if now > self._now:
            self._now = now
        if type(command) not in _WRITES:
            raise TypeError(f"not a store write command: {command!r}")
        if self.unacked_writes >= self.write_buffer:
            raise WriteBufferFull(f"clone {self.id}: {self.unacked_writes} writes not yet acknowledged "
                                  f"by master {self.master}")
        request_id = None
        if isinstance(command, PutUnique):
            request_id = self._next_request
            self._next_request += 1
            command = dataclasses.replace(command, who=self.id, request_id=request_id)
            self._requests[request_id] = now + self.request_timeout
        if self._writer is None:
            self._writer = ch.Producer(self.writer_id, now, config=self._writer_config)
            self._writer.add_consumer(self.master, now, greeting=self.id)  # greeting: where to ACK
        self._writer.produce(command.to_wire(), now)  # collected by to_send()
        return request_id

    def put_unique(self, key: Any, value: Any, now: float, *, expiry: float | None = None) -> int:
        """Queue a PutUnique; return its request id (answered by PutUniqueAnswered/RequestError)."""
        request_id = self.execute(PutUnique(key, value, expiry, self.id, 0), now)
        assert request_id is not None
        return request_id

    def precheck(self, command: WriteCommand) -> None:
        """Refuse at once what the master would refuse, judged on the local copy: raise TypeClash or
        NoSuchKey (nothing queued, nothing changed).

        Only while synced with no own write in flight (else the copy may not show that write yet,
        and the master alone judges: a failure there comes back as :class:`CloneWriteFailed`).
        """
        if type(command) in _UNCHECKED or self.stale or self.unacked_writes:
            return
        if isinstance(command, (Clear, ComputedCommand)):
            return  # no key to check here: the master judges it
        entry = self.backend.get_entry(command.key)
        _new_value(None if entry is None else entry.value, entry is not None, command)

    def unacknowledged(self) -> list[Command]:
        """The writes queued for the master that it has not acknowledged, oldest first (all of them
        if the master never heard of this clone's writer): what to re-queue when the clone binds to
        a new master. Changes nothing."""
        writer = self._writer
        if writer is None:
            return []
        acked = writer.acked(self.master) if self.master in writer.consumers else 0
        return [decode_command(p) for p in writer.buffered_payloads(acked)]

    # -- inputs ---------------------------------------------------------------------------------

    def handle(self, message: ch.Message | ControlMessage, now: float) -> list[CloneEvent]:
        """Process a message from the master; return what happened. Others' messages are ignored."""
        self._now = max(self._now, now)
        events: list[CloneEvent] = []
        match message:
            case ch.CumulativeAck() | ch.Nack():
                if self._writer is not None and message.producer == self.writer_id:
                    self._writer.handle(message, now)
            case ch.Handshake() | ch.Event() | ch.EventBatch() | ch.Heartbeat() | ch.RetransmitFailed():
                events.extend(self._from_master(self._consumer.handle(message, now), now))
        self._collect()
        return events

    def tick(self, now: float) -> list[CloneEvent]:
        """Run due timers: ACKs, master liveness, attach repeats, request timeouts."""
        self._now = max(self._now, now)
        events = self._from_master(self._consumer.tick(now), now)
        if self._writer is not None:
            self._writer.tick(now)
        if self.state is CloneState.ATTACHING and now >= self._next_attach:
            self._send_attach(now)
        for rid, deadline in list(self._requests.items()):
            if now >= deadline:
                del self._requests[rid]
                events.append(RequestError(rid, Timeout(f"no answer to put_unique {rid} from {self.master}")))
        self._collect()
        return events

    def to_send(self) -> list[Envelope]:
        """Drain and return the messages for the master, in order (all have ``to`` = master id)."""
        self._collect()
        out, self._outbox = self._outbox, []
        return out

    # -- internals ------------------------------------------------------------------------------

    def _from_master(self, events: list[ch.ConsumerEvent], now: float) -> list[CloneEvent]:
        """Apply the master channel's events. A loss followed (in the same batch) by a new
        handshake is healed by its snapshot; any other loss starts a new attach attempt."""
        out: list[CloneEvent] = []
        lost: str | None = None
        for event in events:
            if type(event) is ch.Delivered and lost is None and self.state is CloneState.SYNCED:
                try:  # the common case first (what the Delivered case below does)
                    command = decode_broadcast(event.payload)
                except StoreDecodeError as exc:
                    lost = f"bad command {event.seq}: {exc}"
                    break
                if type(command) is Put:
                    self.applying = command
                    self.backend.put(command.key, command.value, None, seq=event.seq)
                else:
                    out.extend(self._apply(command, event.seq))
                continue
            match event:
                case ch.Connected(first_seq=first, greeting=greeting):
                    try:
                        entries = snapshot_from_wire(greeting)
                    except StoreDecodeError as exc:
                        lost = f"bad snapshot: {exc}"
                        break
                    self.backend.replace_all(entries, seq=first - 1)
                    self.state, lost = CloneState.SYNCED, None
                    out.append(Synced(first))
                case ch.Delivered(seq=seq, payload=payload) if lost is None:
                    try:
                        out.extend(self._apply(decode_broadcast(payload), seq))
                    except StoreDecodeError as exc:
                        lost = f"bad command {seq}: {exc}"
                        break
                case ch.EventsLost(first=first, last=last):
                    self.state, lost = CloneState.ATTACHING, f"missed commands {first}..{last}"
                case ch.ProducerLost():
                    lost = "master unreachable"
        if lost is not None:
            self._reattach(now)
            out.append(WentStale(lost))
        return out

    def _apply(self, command: Any, seq: int) -> list[CloneEvent]:
        self.applying = command
        match command:
            case Put(key=key, value=value):
                self.backend.put(key, value, None, seq=seq)
            case Erase(key=key) | Expire(key=key):
                self.backend.erase(key, seq=seq)
            case Clear():
                self.backend.clear(seq=seq)
            case PutUniqueResult(who=who, request_id=rid, inserted=inserted) if who == self.id:
                if self._requests.pop(rid, None) is not None:
                    return [PutUniqueAnswered(rid, inserted)]
            case RequestFailed(who=who, request_id=rid, error=error) if who == self.id:
                if self._requests.pop(rid, None) is not None:
                    return [RequestError(rid, error)]
                if rid == 0:
                    return [CloneWriteFailed(error)]
        return []

    def _reattach(self, now: float) -> None:
        self.state = CloneState.ATTACHING
        self._attempt += 1
        self._consumer = ch.Consumer(self.id, self.master, now, config=self.config)
        self._send_attach(now)

    def _send_attach(self, now: float) -> None:
        self._next_attach = now + self.config.heartbeat_interval
        self._outbox.append(Envelope(AttachClone(self.id, self._attempt), self.master))

    def _collect(self) -> None:
        for msg in self._consumer.to_send():
            self._outbox.append(Envelope(msg, self.master))
        if self._writer is not None:
            for out in self._writer.to_send(batch=MAX_BATCH):
                self._outbox.append(Envelope(out.message, self.master))
