"""Endpoint: an MQTT 5 client that speaks node messages (Zeek Broker's endpoint, over MQTT).

Theory of operation. An :class:`Endpoint` owns one task group with one *connection task*. That
task connects (TCP_NODELAY, MQTT 5, a last will that clears this endpoint's retained presence),
subscribes every filter the subscription table holds, announces presence, then runs a *sender*
(drains the :class:`~broker_mqtt.endpoint.outbox.Outbox`, one PUBLISH per batch) beside a *receiver*
(dispatches each PUBLISH by its subscription identifiers). When the connection fails both stop;
the task waits with exponential backoff and starts over; the session (``clean_start=False``,
``session_expiry`` seconds) makes the broker keep our subscriptions and queue QoS 1 messages
during the outage, across a broker restart too when the broker persists sessions. Applications never see the
outage except as :class:`ConnectionLost` / :class:`ConnectionRestored` status events:
subscribers keep iterating and publishers keep queueing (up to the outbox bound).

Guarantees (docs/guarantees.md): per publisher and topic, messages arrive in order. QoS 1
(default) is at-least-once across connection loss and broker restarts (a batch whose PUBACK was
lost is sent again). QoS 0 batches on the wire when the connection drops are lost; queued ones
are sent after reconnecting. A subscriber never gets one message twice because of overlapping
filters. Nothing accepted is dropped silently: a publish that cannot be queued raises.

Own messages. Data filters are subscribed with MQTT's No Local on, so the broker never sends an
endpoint back what it published (dispatch.py). Subscribers with local prefixes
(``subscribe(..., local=...)``) get the endpoint's own node messages under them in-process instead,
when they are sent (:meth:`Endpoint._deliver_own`), in send order; an own message that the broker
still sends back is dropped by sender id.
"""

from __future__ import annotations

import logging
import math
import os
import random
import socket
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import aiomqtt
import anyio
from aiomqtt.exceptions import MqttConnectError
from anyio.abc import TaskGroup, TaskStatus
from paho.mqtt.client import MQTT_ERR_SUCCESS
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from ..errors import BrokerUnavailable, PayloadTooLarge, PublishQueueFull, UsageError
from ..transport.broker_url import BrokerURL, TLSOptions
from ..transport.embedded import EmbeddedBroker, acquire_shared_broker, release_shared_broker
from ..wire import codec
from ..wire.message import Kind, NodeEncoder, decode_batch
from ..wire.topics import TopicLayout, covers, prefix_matches, validate_prefix, validate_topic
from .dispatch import Filter, Subscribe, SubscriptionTable, Unsubscribe, minimal_prefixes
from .events import (
    ConnectionLost,
    ConnectionRestored,
    ErrorCode,
    ErrorEvent,
    Message,
    PeerAdded,
    PeerInfo,
    PeerLost,
    PeerRemoved,
    StatusEvent,
)
from .outbox import Batch, InFlight, Outbox
from .subscription import RawMessage, RawSubscription, StatusStream, Subscription, _Stream

__all__ = ["Endpoint", "Subscription", "RawSubscription", "RawMessage", "EndpointStatistics"]

log = logging.getLogger("broker_mqtt")

_PRESENCE_SID = 1
_UNICAST_SID = 2
_PUBLISH_OVERHEAD = 512  # fixed header + topic + properties, generously
_MAX_PACKET_DEFAULT = 268_435_455
_MAX_INFLIGHT = 16  # unconfirmed PUBLISHes per connection (paho queues beyond its own limit of 20)


class _Signal:
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


@dataclass(slots=True)
class EndpointStatistics:
    """Counters since the endpoint started (see :meth:`Endpoint.statistics`)."""

    published: int = 0  #: node messages accepted by publish/unicast
    publishes_sent: int = 0  #: PUBLISH packets handed to the MQTT client
    received: int = 0  #: data node messages received
    publishes_received: int = 0  #: PUBLISH packets received
    delivered: int = 0  #: messages handed to subscribers
    malformed: int = 0  #: undecodable PUBLISHes or node messages
    rejected: int = 0  #: PUBLISHes the broker refused (PUBACK reason >= 0x80)
    qos0_lost: int = 0  #: QoS 0 messages on the wire when a connection dropped
    reconnects: int = 0
    status_dropped: int = 0  #: status events a full status stream could not take
    pending: int = 0  #: messages queued or in flight now


class Endpoint:
    """A node of the network: publishes, subscribes, unicasts and tracks its peers.

    ``broker`` is a URL (``mqtt://[user:password@]host:port``, ``mqtts://...`` with ``tls``), an
    :class:`EmbeddedBroker`, or None: then ``$BROKER_MQTT_URL`` if set, else a mosquitto embedded
    in this process and shared by every such endpoint of the process.

    Entering connects (raising :class:`BrokerUnavailable` after ``connect_timeout``); leaving
    says goodbye (PeerRemoved at the peers), flushes what is queued (up to ``close_timeout``),
    ends the MQTT session and cancels every task the endpoint started.
    """

    def __init__(
        self,
        broker: str | EmbeddedBroker | None = None,
        *,
        name: str | None = None,
        namespace: str = "bm",
        id: uuid.UUID | None = None,  # noqa: A002 - the natural name
        tls: TLSOptions | None = None,
        qos: int = 1,
        connect_timeout: float = 10.0,
        close_timeout: float = 5.0,
        keepalive: int = 10,
        session_expiry: int = 60,
        reconnect_delay: tuple[float, float] = (0.05, 5.0),
        max_batch_bytes: int = 256 * 1024,
        max_pending_bytes: int = 64 * 1024 * 1024,
        max_pending_messages: int = 200_000,
        subscriber_buffer: int = 256,
        status_buffer: int = 1000,
    ) -> None:
        if qos not in (0, 1):
            raise UsageError("qos must be 0 or 1")
        self.id = id or uuid.uuid4()
        self.name = name or f"endpoint-{self.id.hex[:8]}"
        self.layout = TopicLayout(namespace)
        self.qos = qos
        self._broker_arg = broker
        self._tls = tls
        self._connect_timeout = connect_timeout
        self._close_timeout = close_timeout
        self._keepalive = keepalive
        self._session_expiry = session_expiry
        self._reconnect_delay = reconnect_delay
        self._subscriber_buffer = subscriber_buffer
        self._max_batch_bytes = max_batch_bytes
        self._status_buffer = status_buffer
        self._id_bytes = self.id.bytes
        self._encoder = NodeEncoder(self._id_bytes)
        self._client_id = f"bm-{self.id.hex}"
        self._outbox = Outbox(
            max_batch_bytes=max_batch_bytes,
            max_pending_bytes=max_pending_bytes,
            max_pending_messages=max_pending_messages,
        )
        self._table: SubscriptionTable[_Stream] = SubscriptionTable(first_id=3)
        #: subscribers with local prefixes, and their (minimal) levels: they get own messages at send time
        self._locals: dict[Subscription, list[tuple[str, ...]]] = {}
        self._peers: dict[uuid.UUID, PeerInfo] = {}
        self._status_streams: list[StatusStream] = []
        self._stats = EndpointStatistics()
        self._wakeup = _Signal()  # sender: something was queued
        self._progress = _Signal()  # publishers/flush: something was sent, or the link changed
        self._peers_changed = _Signal()
        self._client: aiomqtt.Client | None = None
        self._inflight: InFlight | None = None
        self._url: BrokerURL | None = None
        self._uses_shared = False
        self._tg: TaskGroup | None = None
        self._max_packet = _MAX_PACKET_DEFAULT
        self._sub_ids_available = True
        self._closing = False
        self._topic_cache: dict[str, str] = {}
        self._unicast_topic = self.layout.unicast(self.id.hex)
        self._presence_topic = self.layout.presence(self.id.hex)
        self._data_head = self.layout.namespace + "/d/"

    # -- lifecycle ----------------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        self._url = await self._resolve_broker()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            with anyio.fail_after(self._connect_timeout):
                await self._tg.start(self._connection_task)
        except BaseException as exc:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)
            self._release_broker()
            if isinstance(exc, TimeoutError):
                raise BrokerUnavailable(
                    f"could not connect to the broker at {self._url} within {self._connect_timeout}s"
                    + (f": {self._last_error}" if self._last_error else "")
                ) from None
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._tg is not None
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._close_timeout):
                await self._leave()
        finally:
            self._tg.cancel_scope.cancel()
            try:
                await self._tg.__aexit__(None, None, None)
            finally:
                for stream in list(self._status_streams):
                    stream._close()
                self._release_broker()

    _last_error: str | None = None

    async def _resolve_broker(self) -> BrokerURL:
        broker = self._broker_arg
        if broker is None:
            broker = os.environ.get("BROKER_MQTT_URL") or None
        if broker is None:
            self._uses_shared = True
            shared = await acquire_shared_broker()
            return BrokerURL.parse(shared.url)
        if isinstance(broker, EmbeddedBroker):
            if not broker.running:
                await broker.astart()
            return BrokerURL.parse(broker.url)
        url = BrokerURL.parse(broker)
        if url.tls and self._tls is None:
            self._tls = TLSOptions()
        return url

    def _release_broker(self) -> None:
        if self._uses_shared:
            self._uses_shared = False
            release_shared_broker()

    def _make_client(self, *, clean_start: bool) -> aiomqtt.Client:
        url = self._url
        assert url is not None
        connect_props = Properties(PacketTypes.CONNECT)
        connect_props.SessionExpiryInterval = self._session_expiry
        client = aiomqtt.Client(
            url.host,
            url.port,
            username=url.username,
            password=url.password,
            identifier=self._client_id,
            protocol=aiomqtt.ProtocolVersion.V5,
            will=aiomqtt.Will(self._presence_topic, b"", qos=1, retain=True),
            clean_start=clean_start,
            keepalive=self._keepalive,
            properties=connect_props,
            tls_context=self._tls.context() if self._tls else None,
            tls_insecure=(not self._tls.verify) if self._tls else None,
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            timeout=10,
        )
        # aiomqtt drops CONNACK properties and PUBACK reason codes; we need both.
        paho = client._client
        # paho types its callback slots as Optional; aiomqtt has set both.
        on_connect: Any = paho.on_connect
        on_publish: Any = paho.on_publish

        def _on_connect(c: Any, userdata: Any, flags: Any, reason: Any, props: Any = None) -> None:
            self._max_packet = getattr(props, "MaximumPacketSize", _MAX_PACKET_DEFAULT)
            self._sub_ids_available = bool(getattr(props, "SubscriptionIdentifierAvailable", 1))
            on_connect(c, userdata, flags, reason, props)

        def _on_publish(c: Any, userdata: Any, mid: int, reason: Any, props: Any) -> None:
            if reason is not None and getattr(reason, "is_failure", False):
                self._stats.rejected += 1
                self._report(ErrorEvent(ErrorCode.PUBLISH_REJECTED, f"broker refused a PUBLISH: {reason}"))
            on_publish(c, userdata, mid, reason, props)
            self._confirmed(mid)

        paho.on_connect, paho.on_publish = _on_connect, _on_publish
        return client

    async def _connection_task(self, *, task_status: TaskStatus[None]) -> None:
        first = True
        attempt = 0
        low, high = self._reconnect_delay
        delay = low
        while True:
            # Always clean_start=False: mosquitto 2.0 persists across its restarts only sessions
            # whose client never asked for a clean start, even with a session expiry set. A new
            # endpoint id has no old session, so this inherits nothing on the first connect.
            client = self._make_client(clean_start=False)
            try:
                async with client:
                    await self._on_connected(client)
                    if first:
                        task_status.started()
                    else:
                        self._stats.reconnects += 1
                        self._report(ConnectionRestored(attempt))
                    first, attempt, delay = False, 0, low
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._send_loop, client)
                        await self._receive_loop(client)
                        raise aiomqtt.MqttError("connection closed")
            except* (aiomqtt.MqttError, OSError) as group:
                reason = "; ".join(str(e) for e in group.exceptions)
                self._last_error = reason
                if first and any(_refused(e) for e in group.exceptions):
                    raise BrokerUnavailable(f"the broker at {self._url} refused the connection: {reason}") from None
                if first and "CERTIFICATE_VERIFY_FAILED" in reason:
                    raise BrokerUnavailable(
                        f"TLS: the certificate of {self._url} did not verify ({reason}); "
                        "check TLSOptions.ca_file and the broker's host name"
                    ) from None
            finally:
                was_connected = self._client is not None
                self._client = None
                self._progress.notify()
            if self._closing:
                return
            if was_connected:
                log.warning("%s: broker connection lost (%s); reconnecting", self.name, self._last_error)
                self._report(ConnectionLost(self._last_error or "connection closed"))
            attempt += 1
            await anyio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, high)

    async def _on_connected(self, client: aiomqtt.Client) -> None:
        await self._mqtt_subscribe(client, Subscribe(self.layout.presence_filter(), _PRESENCE_SID, True))
        # No Local: unicasts to ourselves never go through the broker (send_node delivers them).
        await self._mqtt_subscribe(client, Subscribe(self._unicast_topic, _UNICAST_SID, True))
        for change in self._table.all_subscribes():
            await self._mqtt_subscribe(client, change)
        self._outbox.max_batch_bytes = min(self._max_batch_bytes, self._max_packet - _PUBLISH_OVERHEAD)
        self._client = client
        self._announce()
        self._progress.notify()

    async def _mqtt_subscribe(self, client: aiomqtt.Client, change: Subscribe) -> None:
        props = Properties(PacketTypes.SUBSCRIBE)
        props.SubscriptionIdentifier = change.sub_id
        await client.subscribe(
            change.mqtt_filter, options=SubscribeOptions(qos=1, noLocal=change.no_local), properties=props
        )

    async def _apply(self, changes: Iterable[Subscribe | Unsubscribe]) -> None:
        client = self._client
        if client is None:
            return  # subscribed on (re)connect
        try:
            for change in changes:
                if isinstance(change, Subscribe):
                    await self._mqtt_subscribe(client, change)
                else:
                    await client.unsubscribe(change.mqtt_filter)
        except aiomqtt.MqttError:
            pass  # the connection task resubscribes everything after reconnecting

    async def _leave(self) -> None:
        client = self._client
        if client is None:
            return
        self._closing = True
        self._enqueue_nowait(self._presence_topic, 1, self._presence_payload("bye"), retain=False)
        self._enqueue_nowait(self._presence_topic, 1, b"", retain=True)
        await self.flush()
        if self._client is not None:
            _disconnect_ending_session(self._client)
            await anyio.sleep(0.01)

    # -- sending ------------------------------------------------------------------------------
    def _data_topic(self, topic: str) -> str:
        mqtt_topic = self._topic_cache.get(topic)
        if mqtt_topic is None:
            mqtt_topic = self.layout.data(topic)
            if len(self._topic_cache) < 10_000:
                self._topic_cache[topic] = mqtt_topic
        return mqtt_topic

    async def publish(self, topic: str, value: Any, *, qos: int | None = None) -> None:
        """Publish ``value`` on ``topic`` to every subscriber of a prefix of it.

        Returns once the message is queued (not when delivered: see :meth:`flush`); waits while
        the outgoing queue is full and the broker reachable. Raises :class:`TopicError`,
        :class:`EncodeError` or :class:`PayloadTooLarge` for bad input, and
        :class:`PublishQueueFull` when the broker is unreachable and the queue is at its bound.
        """
        mqtt_topic = self._data_topic(topic)
        packed = codec.encode(value)
        data = self._encoder.encode(Kind.DATA, topic, packed)
        if self._outbox.full:
            await self._enqueue(mqtt_topic, self.qos if qos is None else qos, data)
        else:  # the fast path: no extra coroutine frame per message
            self._enqueue_nowait(mqtt_topic, self.qos if qos is None else qos, data)
        if self._locals:
            self._deliver_own(Kind.DATA, topic, validate_topic(topic), [packed])

    async def publish_encoded(self, topic: str, payloads: Sequence[bytes], *, qos: int | None = None) -> None:
        """Publish values already encoded, one data message per item of ``payloads``, in order.

        Each item must be one value exactly as :func:`broker_mqtt.wire.codec.encode` returns it (one
        CBOR item of the data model); each message is then byte for byte the one
        :meth:`publish` sends for that value, so subscribers cannot tell them apart. This is for
        producers that encode many values at once (the Spark bridge encodes whole Arrow batches
        column by column): the envelopes are built in one pass and the messages queued together.
        The items are **not** checked: a malformed one reaches the subscribers, which skip it and
        report an :class:`ErrorEvent` (``MALFORMED_PAYLOAD``).

        All or nothing: returns once every message is queued, waiting (while the broker is
        reachable) until the outgoing queue has room for all of them — an empty queue always
        has; cancelled while waiting, none is queued. Raises :class:`TopicError` for a bad topic,
        :class:`UsageError` when ``payloads`` is a single bytes object rather than a sequence of
        them, :class:`PayloadTooLarge` when one message exceeds what the broker accepts and
        :class:`PublishQueueFull` when the broker is unreachable and the queue has no room.
        """
        if isinstance(payloads, (bytes, bytearray, memoryview)):
            raise UsageError("publish_encoded takes a sequence of encoded values, not one bytes object")
        mqtt_topic = self._data_topic(topic)
        if not payloads:
            return
        messages = self._encoder.encode_many(Kind.DATA, topic, payloads)
        self._check_size(max(map(len, messages)))
        size = sum(map(len, messages))
        outbox = self._outbox
        while not outbox.has_room(len(messages), size):
            if self._client is None:
                raise PublishQueueFull(
                    f"broker unreachable and {outbox.pending_messages} messages "
                    f"({outbox.pending_bytes} bytes) already queued"
                )
            await self._progress.wait()
        outbox.add_many(mqtt_topic, self.qos if qos is None else qos, messages)
        self._stats.published += len(messages)
        self._wakeup.notify()
        if self._locals:
            self._deliver_own(
                Kind.DATA, topic, validate_topic(topic), [p if type(p) is bytes else bytes(p) for p in payloads]
            )

    async def unicast(self, peer: uuid.UUID, topic: str, value: Any, *, qos: int | None = None) -> None:
        """Send ``value`` on ``topic`` to the endpoint ``peer`` only (its subscribers of ``topic``)."""
        await self.send_node(Kind.DATA, topic, value, receivers=(peer,), qos=qos)

    async def send_node(
        self,
        kind: Kind,
        topic: str,
        value: Any,
        *,
        receivers: tuple[uuid.UUID, ...] | None = None,
        qos: int | None = None,
    ) -> None:
        """Send a node message of any kind (stores and channels use :attr:`Kind.COMMAND`).

        With one receiver it goes to that endpoint's unicast topic; with none, or several, it is
        published on ``topic`` (several receivers: only they accept it). Subscribers created
        with ``subscribe(..., kind=k)`` receive only messages of kind ``k``. This endpoint's own
        ``local`` subscribers get the message here, when it is sent (if it is for them); a
        unicast to this endpoint itself does not go through the broker at all.
        """
        levels = validate_topic(topic)
        packed = codec.encode(value)
        to = None if receivers is None else tuple(r.bytes for r in receivers)
        data = self._encoder.encode(kind, topic, packed, to)
        qos = self.qos if qos is None else qos
        if to is not None and len(to) == 1:
            if to[0] == self._id_bytes:  # to ourselves: only our local subscribers can get it
                self._check_size(len(data))
                self._stats.published += 1
            else:
                await self._enqueue(self.layout.unicast(to[0].hex()), qos, data)
        else:
            await self._enqueue(self._data_topic(topic), qos, data)
        if self._locals and (to is None or self._id_bytes in to):
            self._deliver_own(kind, topic, levels, [packed])

    def _deliver_own(self, kind: Kind, topic: str, levels: tuple[str, ...], payloads: list[bytes]) -> None:
        """Hand this endpoint's own messages on ``topic`` to its subscribers of ``kind`` with a local
        prefix that matches.

        Called at send time, only when such subscribers exist: the broker does not send our own
        messages back (No Local), and the receive path drops any that still come. The prefix
        test is :meth:`SubscriptionTable.match`'s; a subscriber's prefixes are minimal, so at
        most one of them matches. Never waits (see ``Subscription``).
        """
        messages: list[Message] | None = None
        for sub, prefixes in self._locals.items():
            if sub.kind is kind and any(prefix_matches(p, levels) for p in prefixes):
                if messages is None:
                    me = self._id_bytes
                    messages = [Message(topic, me, p) for p in payloads]
                self._stats.delivered += len(messages)
                sub._deliver_own(messages)

    async def publish_raw(self, mqtt_topic: str, payload: bytes, *, qos: int = 1, retain: bool = False,
                          urgent: bool = False) -> None:
        """Publish bare bytes on an MQTT topic, one PUBLISH per call (no envelope, no coalescing).

        ``urgent``: the PUBLISH goes before everything already queued and does not wait for room
        in the outgoing queue (for small, time-critical messages such as an election's pings; a
        topic's messages should all be urgent or none, since the two lanes are not ordered).
        """
        if not mqtt_topic or "+" in mqtt_topic or "#" in mqtt_topic:
            raise UsageError(f"cannot publish on MQTT topic {mqtt_topic!r}")
        if urgent:
            self._check_size(len(payload))
            self._outbox.add(mqtt_topic, qos, bytes(payload), retain=retain, urgent=True)
            self._stats.published += 1
            self._wakeup.notify()
            return
        await self._enqueue(mqtt_topic, qos, bytes(payload), retain=retain, coalesce=False)

    def _check_size(self, size: int) -> None:
        limit = self._max_packet - _PUBLISH_OVERHEAD
        if size > limit:
            raise PayloadTooLarge(size, self._max_packet)

    async def _enqueue(
        self, mqtt_topic: str, qos: int, data: bytes, *, retain: bool = False, coalesce: bool = True
    ) -> None:
        if self._outbox.full:
            self._check_size(len(data))
            while self._outbox.full:
                if self._client is None:
                    raise PublishQueueFull(
                        f"broker unreachable and {self._outbox.pending_messages} messages "
                        f"({self._outbox.pending_bytes} bytes) already queued"
                    )
                await self._progress.wait()
        self._enqueue_nowait(mqtt_topic, qos, data, retain=retain, coalesce=coalesce)

    def _enqueue_nowait(
        self, mqtt_topic: str, qos: int, data: bytes, *, retain: bool = False, coalesce: bool = True
    ) -> None:
        self._check_size(len(data))
        self._outbox.add(mqtt_topic, qos, data, retain=retain, coalesce=coalesce)
        self._stats.published += 1
        self._wakeup.notify()

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far was taken by the broker; False on timeout."""
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while self._outbox.pending_messages:
                await self._progress.wait()
            return True
        return False

    async def _send_loop(self, client: aiomqtt.Client) -> None:
        """Hand batches to paho in order, up to ``InFlight.limit`` unconfirmed at a time.

        paho's publish() only queues the packet, synchronously and in call order, so batches
        leave in outbox order; confirmations come back through :meth:`_confirmed`. When the
        connection goes, unconfirmed QoS 1 batches return to the front of the outbox in order
        (sent again after reconnecting: at-least-once); unconfirmed QoS 0 batches are lost.
        """
        outbox, inflight = self._outbox, InFlight(_MAX_INFLIGHT)
        self._inflight = inflight
        paho = client._client
        try:
            while True:
                while not inflight.full and (batch := outbox.take()) is not None:
                    info = paho.publish(batch.topic, bytes(batch.data), batch.qos, batch.retain)
                    if info.rc != MQTT_ERR_SUCCESS:
                        outbox.retry(batch)
                        raise aiomqtt.MqttCodeError(info.rc, "could not publish")
                    self._stats.publishes_sent += 1
                    self._release(inflight.sent(batch, info.mid))
                await self._wakeup.wait()
        finally:
            self._inflight = None
            for batch in reversed(inflight.unconfirmed()):
                if batch.qos == 0:
                    self._stats.qos0_lost += batch.count
                    outbox.done(batch)
                else:
                    outbox.retry(batch)
            self._progress.notify()

    def _confirmed(self, packet_id: int) -> None:
        """paho's on_publish: PUBACK (QoS 1) or written (QoS 0) for ``packet_id``."""
        if self._inflight is not None:
            self._release(self._inflight.confirm(packet_id))

    def _release(self, batches: list[Batch]) -> None:
        if batches:
            for batch in batches:
                self._outbox.done(batch)
            self._progress.notify()
            self._wakeup.notify()  # room in the window

    # -- receiving ----------------------------------------------------------------------------
    async def _receive_loop(self, client: aiomqtt.Client) -> None:
        async for mqtt_message in client.messages:
            try:
                await self._dispatch(mqtt_message)
            except Exception as exc:  # a bug must not kill the receive loop; report it loudly
                log.exception("%s: error handling a message on %s", self.name, mqtt_message.topic)
                self._report(ErrorEvent(ErrorCode.MALFORMED_MESSAGE, repr(exc), topic=str(mqtt_message.topic)))

    async def _dispatch(self, mqtt_message: aiomqtt.Message) -> None:
        self._stats.publishes_received += 1
        topic = mqtt_message.topic.value
        payload = mqtt_message.payload
        if not isinstance(payload, bytes):
            payload = bytes(payload) if isinstance(payload, bytearray) else b""
        props = mqtt_message.properties
        sub_ids = getattr(props, "SubscriptionIdentifier", None) if props is not None else None
        if not sub_ids:
            if self._sub_ids_available:
                log.warning("%s: broker sends no subscription identifiers; matching topics instead", self.name)
                self._sub_ids_available = False
            await self._dispatch_by_topic(topic, payload, mqtt_message.retain)
            return
        if _PRESENCE_SID in sub_ids:
            self._on_presence(topic, payload)
        if _UNICAST_SID in sub_ids:
            await self._on_node_messages(topic, payload, None)
        filters = self._table.targets(sub_ids)
        if not filters:
            return
        if filters[0].levels is None:
            item = RawMessage(topic, payload, mqtt_message.retain)
            for f in filters:
                for sub in f.subscribers:
                    if not sub._deliver_nowait([item]):
                        await sub._deliver([item])
            return
        await self._on_node_messages(topic, payload, filters)

    async def _dispatch_by_topic(self, topic: str, payload: bytes, retain: bool) -> None:
        if self.layout.presence_id(topic) is not None:
            self._on_presence(topic, payload)
        elif topic == self._unicast_topic:
            await self._on_node_messages(topic, payload, None)
        elif topic.startswith(self._data_head):
            await self._on_node_messages(topic, payload, self._table.match(tuple(topic[len(self._data_head):].split("/"))))
        else:
            item = RawMessage(topic, payload, retain)
            for f in self._table.by_filter.values():
                if f.levels is None and _mqtt_match(f.mqtt_filter, topic):
                    for sub in f.subscribers:
                        await sub._deliver([item])

    async def _on_node_messages(self, topic: str, payload: bytes, filters: list[Filter[_Stream]] | None) -> None:
        """Deliver the node messages of one PUBLISH; ``filters`` None means unicast (match by topic)."""
        messages, error = decode_batch(payload)
        if error is not None:
            self._stats.malformed += 1
            self._report(ErrorEvent(ErrorCode.MALFORMED_MESSAGE, str(error), topic=topic))
        if not messages:
            return
        me = self._id_bytes
        if filters is not None:
            # Every message of a data PUBLISH matched the same filters: flatten them once.
            expected = topic[len(self._data_head):]
            expected_slash = "/" + expected
            flat: list[tuple[_Stream, Kind, list[Message]]] = [
                (sub, sub.kind, []) for f in filters for sub in f.subscribers  # type: ignore[attr-defined]
            ]
        else:
            # Unicast: each message may match other subscribers; the lists are kept per topic
            # and per subscriber, so the hand-over still happens once per PUBLISH.
            by_topic: dict[str, list[tuple[_Stream, Kind, list[Message]]]] = {}
            by_sub: dict[_Stream, list[Message]] = {}
        received = 0
        for kind, sender, receivers, _ttl, node_topic, packed in messages:
            if receivers is not None and me not in receivers:
                continue
            if filters is None:
                flat = by_topic.get(node_topic)  # type: ignore[assignment]
                if flat is None:
                    try:
                        levels = validate_topic(node_topic)
                    except UsageError:
                        self._stats.malformed += 1
                        continue
                    flat = by_topic[node_topic] = [
                        (sub, sub.kind, by_sub.setdefault(sub, []))  # type: ignore[attr-defined]
                        for f in self._table.match(levels)
                        for sub in f.subscribers
                    ]
            elif node_topic != expected and node_topic != expected_slash:
                self._stats.malformed += 1
                self._report(
                    ErrorEvent(ErrorCode.MALFORMED_MESSAGE, f"node message topic {node_topic!r} "
                               f"does not match its MQTT topic {topic!r}", topic=topic)
                )
                continue
            received += 1
            if sender == me:
                # Our own message came back (No Local ignored, or an old subscription's window):
                # local subscribers already got it when it was sent.
                continue
            msg = Message(node_topic, sender, packed)
            for _sub, sub_kind, batch in flat:
                if sub_kind is kind:
                    batch.append(msg)
        self._stats.received += received
        if filters is None:
            await self._hand_over(by_sub.items())
        else:
            await self._hand_over((sub, batch) for sub, _kind, batch in flat)

    async def _hand_over(self, batches: Iterable[tuple[_Stream, list[Message]]]) -> None:
        for sub, batch in batches:
            if batch:
                self._stats.delivered += len(batch)
                if not sub._deliver_nowait(batch):
                    await sub._deliver(batch)

    def _on_presence(self, topic: str, payload: bytes) -> None:
        hex_id = self.layout.presence_id(topic)
        if hex_id is None or hex_id == self.id.hex:
            return
        try:
            peer_id = uuid.UUID(hex=hex_id)
        except ValueError:
            self._report(ErrorEvent(ErrorCode.MALFORMED_MESSAGE, "presence topic with a bad endpoint id", topic=topic))
            return
        if not payload:
            info = self._peers.pop(peer_id, None)
            if info is not None:
                self._report(PeerLost(info))
                self._peers_changed.notify()
            return
        messages, error = decode_batch(payload)
        try:
            if error is not None or len(messages) != 1 or messages[0].kind is not Kind.CONTROL:
                raise codec.DecodeError(str(error) if error else "presence must be one control message")
            if messages[0].sender != peer_id.bytes:
                raise codec.DecodeError("presence sender does not match its topic")
            body = codec.decode(messages[0].payload)
            if not isinstance(body, dict) or body.get("op") not in ("hello", "bye"):
                raise codec.DecodeError("presence body must be a map with op hello or bye")
            info = PeerInfo(peer_id, str(body.get("name", "")), tuple(str(t) for t in body.get("topics", ())))
        except codec.DecodeError as exc:
            self._stats.malformed += 1
            self._report(ErrorEvent(ErrorCode.MALFORMED_MESSAGE, f"bad presence: {exc}", topic=topic))
            return
        if body["op"] == "bye":
            known = self._peers.pop(peer_id, None)
            if known is not None:
                self._report(PeerRemoved(known))
        else:
            known = self._peers.get(peer_id)
            self._peers[peer_id] = info
            if known is None:
                self._report(PeerAdded(info))
        self._peers_changed.notify()

    # -- presence -----------------------------------------------------------------------------
    def _subscribed_prefixes(self) -> list[str]:
        out: dict[str, None] = {}
        for f in self._table.by_filter.values():
            if f.levels is not None:
                out["/" + "/".join(f.levels)] = None
        return list(out)

    def _presence_payload(self, op: str) -> bytes:
        body = {"op": op, "name": self.name, "topics": self._subscribed_prefixes()}
        return self._encoder.encode(Kind.CONTROL, "presence", codec.encode(body))

    def _announce(self) -> None:
        if self._client is not None and not self._closing:
            self._enqueue_nowait(self._presence_topic, 1, self._presence_payload("hello"), retain=True)

    # -- subscribing --------------------------------------------------------------------------
    def subscribe(
        self,
        *prefixes: str,
        local: bool | Iterable[str] = False,
        buffer: int | None = None,
        kind: Kind = Kind.DATA,
    ) -> Subscription:
        """Subscribe to topic prefixes; use as ``async with ep.subscribe("/a", "/b") as sub``.

        ``local=True`` also delivers this endpoint's own messages (publish, publish_encoded,
        send_node and unicasts to itself) of ``kind`` on these prefixes, each once; ``local`` may
        instead be a collection of prefixes, each under one of ``prefixes``: own messages under
        those only. They are handed over in-process when sent, not echoed by the broker: own messages keep their
        send order, but relative to other endpoints' messages they may come earlier than the
        broker would have delivered them. Publishing never waits for a full local subscriber
        (its own messages are held beyond ``buffer``). ``buffer`` bounds the
        PUBLISH batches held for this subscriber (default ``subscriber_buffer``). ``kind``
        selects which node messages it gets (data by default; stores use command).
        Raises :class:`TopicError` at once for prefixes MQTT cannot carry.
        """
        if not prefixes:
            raise UsageError("subscribe needs at least one topic prefix")
        for p in prefixes:
            validate_prefix(p)
        return Subscription(self, prefixes, local=_local_prefixes(local, prefixes),
                            buffer=buffer or self._subscriber_buffer, kind=kind)

    def subscribe_raw(self, *mqtt_filters: str, buffer: int | None = None) -> RawSubscription:
        """Receive bare PUBLISHes on MQTT filters outside the data layout (own messages included)."""
        if not mqtt_filters:
            raise UsageError("subscribe_raw needs at least one MQTT filter")
        return RawSubscription(self, mqtt_filters, buffer=buffer or self._subscriber_buffer)

    async def _add_subscriber(self, sub: Subscription) -> None:
        levels = minimal_prefixes(validate_prefix(p) for p in sub.prefixes)
        filters = [(self.layout.data_filter("/".join(lv) or "/"), lv) for lv in levels]
        changes = self._table.add(sub, filters)
        if sub.local:
            self._locals[sub] = minimal_prefixes(validate_prefix(p) for p in sub.local)
        await self._apply(changes)
        self._announce()

    async def _add_raw_subscriber(self, sub: RawSubscription) -> None:
        await self._apply(self._table.add(sub, [(f, None) for f in dict.fromkeys(sub.filters)]))

    async def _remove_subscriber(self, sub: _Stream) -> None:
        with anyio.CancelScope(shield=True):
            self._locals.pop(sub, None)  # type: ignore[arg-type]
            await self._apply(self._table.remove(sub))
            if isinstance(sub, Subscription):
                self._announce()

    # -- services that live as long as the endpoint (stores) ---------------------------------------
    async def start_service(self, fn: Any, *args: Any) -> Any:
        """Run ``await fn(*args, task_status=...)`` in the endpoint's task group; return what it
        passes to ``task_status.started()``. It is cancelled when the endpoint closes."""
        if self._tg is None:
            raise UsageError("the endpoint is not open: use it as `async with Endpoint(...) as ep`")
        return await self._tg.start(fn, *args)

    # -- status and peers ---------------------------------------------------------------------
    def status(self, *, buffer: int | None = None) -> StatusStream:
        """Status events from now on: ``async with ep.status() as events: async for e in events``.

        A consumer that falls ``buffer`` events behind loses the newest ones (counted in
        ``statistics().status_dropped``); data messages are never affected.
        """
        return StatusStream(self, buffer or self._status_buffer)

    def _report(self, event: StatusEvent) -> None:
        for stream in self._status_streams:
            if not stream._deliver_nowait([event]):
                self._stats.status_dropped += 1

    def peers(self) -> list[PeerInfo]:
        """The peers currently known (announced and not lost or removed)."""
        return list(self._peers.values())

    async def await_peer(self, peer: uuid.UUID, timeout: float | None = None) -> bool:
        """Wait until ``peer`` is known and its subscriptions are active; False on timeout."""
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while peer not in self._peers:
                await self._peers_changed.wait()
            return True
        return False

    @property
    def connected(self) -> bool:
        return self._client is not None

    def statistics(self) -> EndpointStatistics:
        """A snapshot of the endpoint's counters."""
        stats = EndpointStatistics(**{k: getattr(self._stats, k) for k in EndpointStatistics.__slots__})
        stats.pending = self._outbox.pending_messages
        return stats

    def __repr__(self) -> str:
        return f"<Endpoint {self.name} {self.id} {'connected' if self.connected else 'disconnected'}>"


def _refused(exc: BaseException) -> bool:
    """A CONNACK refusal that retrying will not fix (bad credentials, not authorized, banned)."""
    rc = getattr(exc, "rc", None)
    value = getattr(rc, "value", rc)
    return isinstance(exc, MqttConnectError) and value in (0x84, 0x85, 0x86, 0x87, 0x8A, 0x8C, 4, 5)


def _disconnect_ending_session(client: aiomqtt.Client) -> None:
    """DISCONNECT with Session Expiry 0, so the broker forgets our session (aiomqtt cannot say it)."""
    props = Properties(PacketTypes.DISCONNECT)
    props.SessionExpiryInterval = 0
    try:
        client._client.disconnect(properties=props)
    except Exception:  # noqa: BLE001 - best effort; the session then expires on its own
        log.debug("could not send DISCONNECT with session expiry 0", exc_info=True)


def _mqtt_match(mqtt_filter: str, topic: str) -> bool:
    f_levels, t_levels = mqtt_filter.split("/"), topic.split("/")
    for i, level in enumerate(f_levels):
        if level == "#":
            return True
        if i >= len(t_levels) or (level != "+" and level != t_levels[i]):
            return False
    return len(f_levels) == len(t_levels)


def _local_prefixes(local: Any, prefixes: tuple[str, ...]) -> tuple[str, ...]:
    """``subscribe``'s ``local`` as the prefixes on which own messages are delivered; UsageError if bad."""
    if local is True or local is False:
        return prefixes if local else ()
    if isinstance(local, (str, bytes)) or not isinstance(local, Iterable):
        raise UsageError(f"local takes True, False or a collection of topic prefixes, not {local!r}")
    own = tuple(local)
    if not all(isinstance(p, str) for p in own):
        raise UsageError(f"local takes topic prefixes (strings), not {own!r}")
    subscribed = [validate_prefix(p) for p in prefixes]
    for p in own:
        if not any(covers(s, validate_prefix(p)) for s in subscribed):
            raise UsageError(f"local prefix {p!r} is not under a subscribed prefix {list(prefixes)}")
    return own
