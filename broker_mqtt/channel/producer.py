"""The channel's sending end: the :class:`Producer` state machine and the events it reports."""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .config import ChannelConfig
from .errors import ChannelProtocolError, ChannelUsageError
from .messages import (
    ConsumerMessage,
    CumulativeAck,
    Event,
    EventBatch,
    Handshake,
    Heartbeat,
    Nack,
    Outgoing,
    RetransmitFailed,
)

__all__ = [
    "LossReason",
    "HandshakeCompleted",
    "ConsumerLost",
    "UnknownConsumer",
    "ProducerEvent",
    "PathState",
    "Producer",
]


# --------------------------------------------------------------------------------------------------
# Events reported to the application


class LossReason(enum.Enum):
    TIMEOUT = "timeout"  # no message for connection_timeout heartbeat intervals
    REMOVED = "removed"  # the application called remove_consumer


@dataclass(frozen=True, slots=True)
class HandshakeCompleted:
    """The consumer acknowledged its handshake."""

    consumer: str


@dataclass(frozen=True, slots=True)
class ConsumerLost:
    """The producer dropped the consumer; its messages are ignored from now on."""

    consumer: str
    reason: LossReason


@dataclass(frozen=True, slots=True)
class UnknownConsumer:
    """A consumer the producer does not know (e.g. dropped earlier) sent ``message``.

    The application may ``add_consumer`` it again; the new handshake makes it skip ahead.
    """

    consumer: str
    message: ConsumerMessage


ProducerEvent = HandshakeCompleted | ConsumerLost | UnknownConsumer


# --------------------------------------------------------------------------------------------------
# Producer


class PathState(enum.Enum):
    """A consumer as seen by the producer."""

    HANDSHAKING = "handshaking"  # handshake sent, not yet acknowledged
    CONNECTED = "connected"


class _Run:
    """Outgoing events not yet drained: ``payloads`` numbered from ``first``, to ``to`` (None: all)."""

    __slots__ = ("to", "first", "payloads")

    def __init__(self, to: str | None, first: int, payloads: list[Any]) -> None:
        self.to = to
        self.first = first
        self.payloads = payloads


@dataclass(slots=True)
class _Path:
    state: PathState
    first_seq: int
    greeting: Any
    acked: int  # every seq <= acked was delivered
    last_seen: float
    next_handshake: float


class Producer:
    """The sending end; see :mod:`broker_mqtt.channel`. Not thread-safe, does no I/O."""

    def __init__(self, producer_id: str, now: float, *, config: ChannelConfig | None = None) -> None:
        self.id = producer_id
        self.config = config if config is not None else ChannelConfig()
        self._next_seq = 1
        self._buffer: deque[Any] = deque()  # payloads of events next_seq - len(_buffer) .. next_seq - 1
        self._paths: dict[str, _Path] = {}
        self._outbox: list[Outgoing | _Run] = []
        self._last_broadcast = now
        self._now = now

    # -- introspection --------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """Sequence number of the latest produced event (0 before the first)."""
        return self._next_seq - 1

    @property
    def consumers(self) -> dict[str, PathState]:
        return {cid: path.state for cid, path in self._paths.items()}

    def has_consumer(self, consumer: str) -> bool:
        """Whether ``consumer`` is a consumer (handshaking or connected)."""
        return consumer in self._paths

    def acked(self, consumer: str) -> int:
        """Highest sequence number ``consumer`` acknowledged cumulatively."""
        return self._paths[consumer].acked

    @property
    def buffered(self) -> int:
        """Events kept for retransmission (use it for back-pressure)."""
        return len(self._buffer)

    @property
    def idle(self) -> bool:
        """No pending handshake and every consumer acknowledged the latest event."""
        return all(p.state is PathState.CONNECTED and p.acked == self.last_seq for p in self._paths.values())

    @property
    def next_deadline(self) -> float:
        """When ``tick`` has work to do next."""
        deadlines = [self._last_broadcast + self.config.heartbeat_interval]
        for path in self._paths.values():
            deadlines.append(path.last_seen + self.config.timeout)
            if path.state is PathState.HANDSHAKING:
                deadlines.append(path.next_handshake)
        return min(deadlines)

    # -- inputs ---------------------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        if now < self._now:
            raise ChannelUsageError(f"time went backwards: {now} < {self._now}")
        self._now = now

    def add_consumer(self, consumer: str, now: float, *, greeting: Any = None) -> int:
        """Start a handshake with ``consumer`` from the current sequence number; return it.

        The consumer receives every event produced from now on. Re-adding a known consumer
        restarts its handshake (it skips anything it missed in between).
        """
        self._advance(now)
        first = self._next_seq
        self._paths[consumer] = _Path(PathState.HANDSHAKING, first, greeting, first - 1, now,
                                      now + self.config.heartbeat_interval)
        self._send_handshake(consumer)
        return first

    def remove_consumer(self, consumer: str, now: float) -> list[ProducerEvent]:
        """Forget ``consumer`` (no-op if unknown); its unacknowledged events may be released."""
        self._advance(now)
        if self._paths.pop(consumer, None) is None:
            return []
        self._trim()
        return [ConsumerLost(consumer, LossReason.REMOVED)]

    def produce(self, payload: Any, now: float) -> int:
        """Broadcast ``payload`` as the next event; return its sequence number."""
        if now < self._now:
            self._advance(now)
        self._now = now
        seq = self._next_seq
        self._next_seq = seq + 1
        buffer = self._buffer
        if self._paths:  # the lowest ACK does not change: only the size bound can evict
            buffer.append(payload)
            if len(buffer) > self.config.buffer_size:
                buffer.popleft()
        elif buffer:  # no consumers: nothing is kept
            buffer.clear()
        out = self._outbox
        last = out[-1] if out else None
        if type(last) is _Run and last.to is None:  # it ends with seq - 1: extend it
            last.payloads.append(payload)
        else:
            out.append(_Run(None, seq, [payload]))
        self._last_broadcast = now
        return seq

    def handle(self, message: ConsumerMessage, now: float) -> list[ProducerEvent]:
        """Process a message from a consumer; return what happened.

        Messages for another producer are ignored. Raises :class:`ChannelProtocolError` (state
        unchanged) if a consumer acknowledges or asks for events that were never produced.
        """
        self._advance(now)
        if message.producer != self.id:
            return []
        path = self._paths.get(message.consumer)
        if path is None:
            return [UnknownConsumer(message.consumer, message)]
        events: list[ProducerEvent] = []
        match message:
            case CumulativeAck(seq=seq):
                if seq > self.last_seq:
                    raise ChannelProtocolError(
                        f"{message.consumer} acknowledged {seq} but the last event is {self.last_seq}")
                path.last_seen = now
                if path.state is PathState.HANDSHAKING and seq >= path.first_seq - 1:
                    path.state = PathState.CONNECTED
                    events.append(HandshakeCompleted(message.consumer))
                if seq > path.acked:
                    path.acked = seq
                    self._trim()
            case Nack(ranges=ranges):
                if max(last for _, last in ranges) > self.last_seq:
                    raise ChannelProtocolError(
                        f"{message.consumer} asked for {ranges} but the last event is {self.last_seq}")
                path.last_seen = now
                self._retransmit(message.consumer, path, ranges)
        return events

    def tick(self, now: float) -> list[ProducerEvent]:
        """Run the timers due at ``now``: heartbeat, handshake repeats, consumer timeouts."""
        self._advance(now)
        events: list[ProducerEvent] = []
        for consumer, path in list(self._paths.items()):
            if now >= path.last_seen + self.config.timeout:
                del self._paths[consumer]
                events.append(ConsumerLost(consumer, LossReason.TIMEOUT))
            elif path.state is PathState.HANDSHAKING and now >= path.next_handshake:
                path.next_handshake = now + self.config.heartbeat_interval
                self._send_handshake(consumer)
        if events:
            self._trim()
        if now >= self._last_broadcast + self.config.heartbeat_interval:
            self._outbox.append(Outgoing(Heartbeat(self.id, self.last_seq)))
            self._last_broadcast = now
        return events

    def to_send(self, *, batch: int = 1) -> list[Outgoing]:
        """Drain and return the messages to send, in order.

        With ``batch`` > 1, each run of consecutive events to the same destination comes as
        :class:`EventBatch` messages of up to ``batch`` events (a lone event stays an
        :class:`Event`).
        """
        pending, self._outbox = self._outbox, []
        out: list[Outgoing] = []
        pid = self.id
        for item in pending:
            if type(item) is not _Run:
                out.append(item)  # type: ignore[arg-type]  # not a _Run: an Outgoing
                continue
            payloads, first, to = item.payloads, item.first, item.to
            if batch <= 1 or len(payloads) == 1:
                out.extend(Outgoing(Event(pid, first + i, p), to) for i, p in enumerate(payloads))
                continue
            for i in range(0, len(payloads), batch):
                chunk = payloads[i:i + batch]
                out.append(Outgoing(EventBatch(pid, first + i, tuple(chunk)) if len(chunk) > 1
                                    else Event(pid, first + i, chunk[0]), to))
        return out

    def buffered_payloads(self, after: int = 0) -> list[Any]:
        """The payloads of the buffered events with sequence numbers above ``after``, in order."""
        start = self._next_seq - len(self._buffer)
        return list(self._buffer)[max(0, after + 1 - start):]

    # -- internals ------------------------------------------------------------------------------

    def _send_handshake(self, consumer: str) -> None:
        path = self._paths[consumer]
        self._outbox.append(Outgoing(Handshake(self.id, consumer, path.first_seq,
                                               self.config.heartbeat_interval, path.greeting), consumer))

    def _trim(self) -> None:
        """Drop buffered events that every consumer acknowledged."""
        low = min((p.acked for p in self._paths.values()), default=self.last_seq)
        buffer = self._buffer
        drop = min(low - (self._next_seq - len(buffer)) + 1, len(buffer))
        if drop == len(buffer):
            buffer.clear()
        else:
            for _ in range(drop):
                buffer.popleft()

    def _retransmit(self, consumer: str, path: _Path, ranges: Iterable[tuple[int, int]]) -> None:
        buf_start = self._next_seq - len(self._buffer)
        failed: list[tuple[int, int]] = []
        resend: list[_Run] = []
        for first, last in ranges:
            first = max(first, path.acked + 1)
            if first > last:
                continue
            if first < buf_start:
                failed.append((first, min(last, buf_start - 1)))
            start = max(first, buf_start)
            if start <= last:
                resend.append(_Run(consumer, start, list(itertools.islice(self._buffer, start - buf_start,
                                                                          last + 1 - buf_start))))
        if failed:
            first, last = min(f for f, _ in failed), max(hi for _, hi in failed)
            self._outbox.append(Outgoing(RetransmitFailed(self.id, consumer, first, last), consumer))
        self._outbox.extend(resend)
