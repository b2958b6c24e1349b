"""Sending: the outgoing queue of an endpoint, fed by publishers and drained over the connection.

Publishers put node messages into the :class:`~broker_mqtt.endpoint.outbox.Outbox` (which
coalesces them into PUBLISH batches); while a connection is open, :meth:`Sender.run` hands the
batches to it in outbox order, up to ``max_inflight`` unconfirmed at a time, and releases them
from the bounds as the transport confirms them (:class:`~broker_mqtt.endpoint.outbox.InFlight`
keeps the release in send order). When the connection goes, unconfirmed QoS 1 batches return to
the front of the outbox, in order, and are sent again after reconnecting (at-least-once);
unconfirmed QoS 0 batches are lost and counted.

With a :class:`~broker_mqtt.wire.signing.Signer`, every PUBLISH on the topics of the namespace's
layout (``signed_prefixes``: data, unicast, presence, bound elections) is sealed once, when first
sent, with one signature for the whole batch; a resent batch keeps its seal, so a receiver that got
it already drops the copy as a replay. Empty payloads (presence clears, the last will) stay unsigned.

Full means the outbox bounds: a publisher then waits while a connection is open and gets
:class:`PublishQueueFull` while there is none (docs/guarantees.md: nothing accepted is dropped
silently). A message larger than the broker's maximum packet size is refused at once with
:class:`PayloadTooLarge`.
"""

from __future__ import annotations

import math

import anyio

from ..errors import PayloadTooLarge, PublishQueueFull
from ..transport.base import MAX_PACKET_DEFAULT, ORDERED_WINDOW, Connection, ConnectionClosed
from ..wire.sequence import sequence_header
from ..wire.signing import Signer
from .outbox import Batch, InFlight, Outbox
from .statistics import EndpointStatistics

__all__ = ["Sender", "Signal", "PUBLISH_OVERHEAD"]

PUBLISH_OVERHEAD = 512  #: PUBLISH fixed header + topic + properties, generously
_MAX_INFLIGHT = ORDERED_WINDOW  # unconfirmed PUBLISHes per connection: beyond it a transport may reorder


class Signal:
    """Wake waiters on the next :meth:`notify` (check the condition before waiting)."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def notify(self) -> None:
        event = self._event
        if event is not None:
            self._event = None
            event.set()

    async def wait(self) -> None:
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()


class Sender:
    """The outbox, its bounds for publishers and the window of PUBLISHes in flight.

    The endpoint sets :attr:`conn` while a connection is open (and notifies :attr:`progress`
    when it changes) and :attr:`max_packet` from each CONNACK.
    """

    def __init__(self, outbox: Outbox, stats: EndpointStatistics, *, max_inflight: int = _MAX_INFLIGHT) -> None:
        self.outbox = outbox
        self.conn: Connection | None = None  #: the open connection, None while disconnected
        self.max_packet = MAX_PACKET_DEFAULT  #: the broker's maximum packet size (last CONNACK)
        self.wakeup = Signal()  #: the send loop: something was queued, or the window has room
        self.progress = Signal()  #: publishers and flush: something was sent, or the link changed
        self._stats = stats
        self._max_inflight = max_inflight
        self._inflight: InFlight | None = None
        self.signer: Signer | None = None  #: seals PUBLISHes on ``signed_prefixes`` (None: no signing)
        self.signed_prefixes: tuple[str, ...] = ()

    @property
    def max_payload(self) -> int:
        """The most bytes of payload one PUBLISH carries (the broker's maximum packet less the
        PUBLISH header and a seal)."""
        return self.max_packet - PUBLISH_OVERHEAD - (self.signer.overhead if self.signer else 0)

    def check_size(self, size: int) -> None:
        """Raise :class:`PayloadTooLarge` if ``size`` bytes do not fit in one PUBLISH."""
        if size > self.max_payload:
            raise PayloadTooLarge(size, self.max_packet)

    def _queue_full(self) -> PublishQueueFull:
        outbox = self.outbox
        return PublishQueueFull(
            f"broker unreachable and {outbox.pending_messages} messages "
            f"({outbox.pending_bytes} bytes) already queued"
        )

    async def enqueue(
        self, mqtt_topic: str, qos: int, data: bytes, *, retain: bool = False, coalesce: bool = True
    ) -> None:
        """Queue one message, waiting while the outbox is full and connected."""
        if self.outbox.full:
            self.check_size(len(data))
            while self.outbox.full:
                if self.conn is None:
                    raise self._queue_full()
                await self.progress.wait()
        self.enqueue_nowait(mqtt_topic, qos, data, retain=retain, coalesce=coalesce)

    def enqueue_nowait(
        self, mqtt_topic: str, qos: int, data: bytes, *, retain: bool = False, coalesce: bool = True,
        urgent: bool = False,
    ) -> None:
        """Queue one message whatever the bounds say (see :meth:`Outbox.add` for the options)."""
        self.check_size(len(data))
        self.outbox.add(mqtt_topic, qos, data, retain=retain, coalesce=coalesce, urgent=urgent)
        self._stats.published += 1
        self.wakeup.notify()

    async def make_room(self, messages: int, size: int) -> None:
        """Wait until ``messages`` messages of ``size`` bytes in all fit the bounds (see
        :meth:`Outbox.has_room`); :class:`PublishQueueFull` if they do not and there is no connection."""
        outbox = self.outbox
        while not outbox.has_room(messages, size):
            if self.conn is None:
                raise self._queue_full()
            await self.progress.wait()

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far was confirmed; False on timeout."""
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while self.outbox.pending_messages:
                await self.progress.wait()
            return True
        return False

    async def run(self, conn: Connection) -> None:
        """Hand batches to ``conn`` in order, up to ``max_inflight`` unconfirmed at a time, until
        the connection fails (raises :class:`ConnectionClosed`) or the caller cancels.

        ``conn.publish`` only queues the packet, synchronously and in call order, so batches
        leave in outbox order; confirmations come back through :meth:`confirmed`. When the
        connection goes, unconfirmed QoS 1 batches return to the front of the outbox in order
        (sent again after reconnecting: at-least-once); unconfirmed QoS 0 batches are lost.
        """
        outbox, inflight = self.outbox, InFlight(self._max_inflight)
        self._inflight = inflight
        publish = conn.publish
        try:
            while True:
                while not inflight.full and (batch := outbox.take()) is not None:
                    payload = batch.wire
                    if payload is None:
                        data = bytes(batch.data)
                        if batch.stream is not None:
                            data = sequence_header(batch.stream, batch.first) + data
                        payload = batch.wire = self._seal(batch.topic, data)
                    try:
                        packet_id = publish(batch.topic, payload, batch.qos, batch.retain)
                    except ConnectionClosed:
                        outbox.retry(batch)
                        raise
                    self._stats.publishes_sent += 1
                    self._release(inflight.sent(batch, packet_id))
                await self.wakeup.wait()
        finally:
            self._inflight = None
            for batch in reversed(inflight.unconfirmed()):
                if batch.qos == 0:
                    self._stats.qos0_lost += batch.count
                    outbox.done(batch)
                else:
                    outbox.retry(batch)
            self.progress.notify()

    def _seal(self, topic: str, payload: bytes) -> bytes:
        signer = self.signer
        if signer is None or not payload or not topic.startswith(self.signed_prefixes):
            return payload
        return signer.seal(topic, payload)

    def confirmed(self, packet_id: int) -> None:
        """The transport confirmed ``packet_id``: PUBACK (QoS 1) or written (QoS 0)."""
        if self._inflight is not None:
            self._release(self._inflight.confirm(packet_id))

    def _release(self, batches: list[Batch]) -> None:
        if batches:
            for batch in batches:
                self.outbox.done(batch)
            self.progress.notify()
            self.wakeup.notify()  # room in the window
