"""Endpoint: an MQTT 5 client that speaks node messages (Zeek Broker's endpoint, over MQTT).

Theory of operation. An :class:`Endpoint` owns one task group. Its *connection task* connects
through a :class:`~broker_mqtt.transport.base.Connector` (MQTT 5 through aiomqtt by default,
transport/mqtt.py; a last will clears this endpoint's retained presence), subscribes every filter
the subscription table holds, announces presence (presence.py), then runs a *sender* (send.py:
drains the :class:`~broker_mqtt.endpoint.outbox.Outbox`, one PUBLISH per batch), while a *receiver*
task that outlives the connections (receive.py) dispatches each PUBLISH by its subscription
identifiers. When the connection fails (a send fails, or its stream of PUBLISHes, read as they
arrive, ends) the sender stops, the task waits (backoff.py) and starts over, and the receiver still
hands over what the lost one received (:meth:`Receiver.run_streams`). The session
(``clean_start=False``, ``session_expiry`` seconds) makes the broker keep our subscriptions and
queue QoS 1 messages during the outage, across a broker restart too when it persists sessions.
Applications see the outage only as :class:`ConnectionLost` / :class:`ConnectionRestored` status
events: subscribers keep iterating and publishers keep queueing (up to the outbox bound).

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
import uuid
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.abc import TaskGroup, TaskStatus
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..errors import BrokerUnavailable, UsageError
from ..transport.base import (
    Connection,
    ConnectionClosed,
    ConnectOptions,
    Connector,
    ConnectRefused,
    TLSVerificationFailed,
    Will,
)
from ..transport.broker_url import TLSOptions
from ..transport.embedded import EmbeddedBroker, release_shared_broker, resolve_broker
from ..transport.failover import FailoverConnector
from ..transport.mqtt import MQTTConnector
from ..wire import codec
from ..wire.identity import resolve_identity
from ..wire.message import Kind, NodeEncoder
from ..wire.signing import TrustStore
from ..wire.topics import TopicLayout, validate_prefix, validate_topic
from .backoff import DEFAULT_RECONNECT_DELAY, Backoff
from .dispatch import Subscribe, SubscriptionTable, Unsubscribe, minimal_prefixes
from .event_stream import EventStream
from .events import ConnectionLost, ConnectionRestored, ErrorCode, ErrorEvent, PeerInfo, StatusEvent
from .keys import EndpointKeys
from .outbox import Outbox
from .presence import PeerTable, announced_prefixes, presence_payload
from .receive import PRESENCE_SID, UNICAST_SID, Receiver
from .send import PUBLISH_OVERHEAD, Sender, Signal
from .statistics import EndpointStatistics
from .subscription import Overflow, RawMessage, RawSubscription, Subscription, _Stream, deliver_own

__all__ = ["Endpoint", "Subscription", "RawSubscription", "RawMessage", "EndpointStatistics"]

log = logging.getLogger("broker_mqtt")


class Endpoint:
    """A node of the network: publishes, subscribes, unicasts and tracks its peers.

    ``broker`` is a URL (``mqtt://[user:password@]host:port``, ``mqtts://...`` with ``tls``), an
    :class:`EmbeddedBroker`, or None: then ``$BROKER_MQTT_URL`` if set, else a mosquitto embedded
    in this process and shared by every such endpoint of the process. Several URLs (a list, or one
    string of URLs separated by commas) are the nodes of a clustered broker: the endpoint connects
    to the first and, whenever an attempt fails or the connection drops, tries the next one
    (:class:`~broker_mqtt.transport.failover.FailoverConnector`). ``connector`` replaces all
    that: the endpoint then connects through it (any transport, see
    :mod:`broker_mqtt.transport.base`) and ``broker`` and ``tls`` are not used.

    ``client_id`` is the MQTT client id, named in every topic the endpoint publishes to, so that
    a broker ACL can let a principal write as itself only (``docs/security.md``): give it the
    principal's name (``gateway-7``) and the endpoint's ``id`` is derived from it (the same after a
    restart). Without one it is ``bm-<id hex>`` (``id`` given, or random). Raises
    :class:`UsageError` for a client id that cannot be a topic level or starts with ``bm-``.

    ``signing_key`` (Ed25519) seals every PUBLISH the endpoint sends on the namespace's topics, one
    signature per batch; ``trust`` (public keys by client id) makes it drop, count and report
    (:attr:`ErrorCode.BAD_SIGNATURE`) whatever arrives there not sealed by its sender's key, or
    replayed (``docs/signing.md``, ``docs/security.md``). With a fleet key in ``trust`` it also learns
    keys from fleet-signed key records (retained on ``<ns>/k/<client id>``) and publishes its own
    ``key_record`` there.

    ``reconnect_delay=(low, high)``: reconnect waits, ``low`` doubling to the cap ``high``, x0.5-1.5, reset
    after a connection that lived (backoff.py); the cap bounds heal-to-rejoined (~1.5 * ``high``).

    Entering connects (raising :class:`BrokerUnavailable` after ``connect_timeout``); leaving
    says goodbye (PeerRemoved at the peers), flushes what is queued (up to ``close_timeout``),
    ends the MQTT session and cancels every task the endpoint started.
    """

    def __init__(
        self,
        broker: str | Sequence[str] | EmbeddedBroker | None = None,
        *,
        name: str | None = None,
        namespace: str = "bm",
        id: uuid.UUID | None = None,  # noqa: A002 - the natural name
        client_id: str | None = None,
        signing_key: Ed25519PrivateKey | None = None,
        trust: TrustStore | None = None,
        key_record: bytes | None = None,
        tls: TLSOptions | None = None,
        qos: int = 1,
        connect_timeout: float = 10.0,
        close_timeout: float = 5.0,
        keepalive: int = 10,
        session_expiry: int = 60,
        reconnect_delay: tuple[float, float] = DEFAULT_RECONNECT_DELAY,
        max_batch_bytes: int = 256 * 1024,
        max_pending_bytes: int = 64 * 1024 * 1024,
        max_pending_messages: int = 200_000,
        subscriber_buffer: int = 256,
        status_buffer: int = 1000,
        connector: Connector | None = None,
    ) -> None:
        if qos not in (0, 1):
            raise UsageError("qos must be 0 or 1")
        self.id, self.client_id = resolve_identity(id, client_id)  # client_id: named in every topic it publishes
        self.name = name or f"endpoint-{self.id.hex[:8]}"
        self.layout = TopicLayout(namespace)
        self.qos = qos
        self._broker_arg = broker
        self._connector_arg = connector
        self._tls = tls
        self._connect_timeout = connect_timeout
        self._close_timeout = close_timeout
        self._keepalive = keepalive
        self._session_expiry = session_expiry
        self._backoff = Backoff(*reconnect_delay)  # raises UsageError for a bad pair; resets only after a connection that lived
        self._subscriber_buffer = subscriber_buffer
        self._max_batch_bytes = max_batch_bytes
        self._status_buffer = status_buffer
        self._id_bytes = self.id.bytes
        self._encoder = NodeEncoder(self._id_bytes)
        self._outbox = Outbox(
            max_batch_bytes=max_batch_bytes,
            max_pending_bytes=max_pending_bytes,
            max_pending_messages=max_pending_messages,
        )
        self._table: SubscriptionTable[_Stream] = SubscriptionTable(first_id=4)  # 1-3: PRESENCE_SID, UNICAST_SID, KEYS_SID
        #: subscribers with local prefixes, and their (minimal) levels: they get own messages at send time
        self._locals: dict[Subscription, list[tuple[str, ...]]] = {}
        self._presence = PeerTable(self.layout, self.id)
        self._status_streams: list[EventStream[StatusEvent]] = []
        self._stats = EndpointStatistics()
        self._sender = sender = Sender(self._outbox, self._stats)
        self._enqueue = sender.enqueue
        self._enqueue_nowait = sender.enqueue_nowait
        self._peers_changed = Signal()
        self._connector: Connector | None = None
        self._uses_shared = False
        self._tg: TaskGroup | None = None
        self._closing = False
        self._last_error: str | None = None
        self._topic_cache: dict[str, str] = {}
        self._presence_topic = self.layout.presence(self.client_id)
        self._receiver = Receiver(
            name=self.name, layout=self.layout, me=self._id_bytes,
            table=self._table, stats=self._stats, report=self._report, on_presence=self._on_presence,
        )
        self._receiver.own_presence, self._receiver.on_own_presence = self._presence_topic, self._own_presence_in
        self._hello: bytes | None = None  # the retained hello last announced
        self._keys = EndpointKeys(self.layout, self.client_id, signing_key=signing_key, trust=trust,
                                  key_record=key_record, stats=self._stats, report=self._report)
        self._keys.attach(sender, self._receiver)

    # -- lifecycle ----------------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        self._connector = self._connector_arg
        if self._connector is None:
            urls, self._uses_shared = await resolve_broker(self._broker_arg)
            connectors = [MQTTConnector(u, self._tls if self._tls is not None else TLSOptions() if u.tls else None)
                          for u in urls]
            self._connector = connectors[0] if len(connectors) == 1 else FailoverConnector(connectors)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._receiver.run_streams)  # every connection's PUBLISHes, in order
        try:
            with anyio.fail_after(self._connect_timeout):
                await self._tg.start(self._connection_task)
        except BaseException as exc:
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)
            self._release_broker()
            if isinstance(exc, TimeoutError):
                raise BrokerUnavailable(
                    f"could not connect to the broker at {self._connector} within {self._connect_timeout}s"
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

    def _release_broker(self) -> None:
        if self._uses_shared:
            self._uses_shared = False
            release_shared_broker()

    async def _connection_task(self, *, task_status: TaskStatus[None]) -> None:
        first, attempt = True, 0
        backoff = self._backoff
        connector = self._connector
        assert connector is not None
        # Always clean_start=False: mosquitto 2.0 persists across its restarts only sessions whose client
        # never asked for a clean start, even with a session expiry set (a new endpoint id has no old session).
        # The will clears our retained presence when the connection drops without a goodbye.
        options = ConnectOptions(self.client_id, clean_start=False, session_expiry=self._session_expiry,
                                 keepalive=self._keepalive, will=Will(self._presence_topic, b"", qos=1, retain=True))
        while True:
            try:
                async with connector.connect(options, self._sender.confirmed, self._rejected) as conn:
                    # first: what arrives while subscribing (the session's backlog) is acknowledged too
                    incoming = self._receiver.receive(conn.messages())
                    await self._on_connected(conn)
                    if first:
                        task_status.started()
                    else:
                        self._stats.reconnects += 1
                        self._report(ConnectionRestored(attempt))
                    first, attempt = False, 0
                    backoff.connected(anyio.current_time())
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._sender.run, conn)
                        await incoming.ended.wait()
                        raise ConnectionClosed(incoming.reason)
            except* (ConnectionClosed, OSError) as group:  # OSError: should a transport let one through
                self._last_error = reason = "; ".join(str(e) for e in group.exceptions)
                single = not isinstance(connector, FailoverConnector) or len(connector.connectors) == 1
                if first and single and any(isinstance(e, ConnectRefused) and e.permanent for e in group.exceptions):
                    raise BrokerUnavailable(f"the broker at {connector} refused the connection: {reason}") from None
                if first and single and any(isinstance(e, TLSVerificationFailed) for e in group.exceptions):
                    raise BrokerUnavailable(f"TLS: the certificate of {connector} did not verify ({reason}); "
                                            "check TLSOptions.ca_file and the broker's host name") from None
            finally:
                was_connected = self._sender.conn is not None
                self._sender.conn = None
                self._sender.progress.notify()
            if self._closing:
                return
            if was_connected:
                log.warning("%s: broker connection lost (%s); reconnecting", self.name, self._last_error)
                self._report(ConnectionLost(self._last_error or "connection closed"))
            attempt += 1
            await anyio.sleep(backoff.next_delay(anyio.current_time()))

    async def _on_connected(self, conn: Connection) -> None:
        self._sender.max_packet = conn.connack.max_packet
        self._receiver.sub_ids_available = conn.connack.subscription_ids_available
        for change in self._keys.subscriptions():  # first: peers' keys before their retained presence
            await self._mqtt_subscribe(conn, change)
        await self._mqtt_subscribe(conn, Subscribe(self.layout.presence_filter(), PRESENCE_SID, True))
        # No Local: unicasts to ourselves never go through the broker (send_node delivers them).
        await self._mqtt_subscribe(conn, Subscribe(self.layout.unicast_filter(self.id.hex), UNICAST_SID, True))
        for change in self._table.all_subscribes():
            await self._mqtt_subscribe(conn, change)
        if (record := self._keys.own_record()) is not None:
            self._enqueue_nowait(record[0], 1, record[1], retain=True)
        seal = self._sender.signer.overhead if self._sender.signer is not None else 0
        self._outbox.max_batch_bytes = min(self._max_batch_bytes, conn.connack.max_packet - PUBLISH_OVERHEAD - seal)
        self._sender.conn = conn
        self._announce()
        self._sender.progress.notify()

    @staticmethod
    async def _mqtt_subscribe(conn: Connection, change: Subscribe) -> None:
        await conn.subscribe(change.mqtt_filter, sub_id=change.sub_id, no_local=change.no_local)

    async def _apply(self, changes: Iterable[Subscribe | Unsubscribe]) -> None:
        conn = self._sender.conn
        if conn is None:
            return  # subscribed on (re)connect
        try:
            for change in changes:
                if isinstance(change, Subscribe):
                    await self._mqtt_subscribe(conn, change)
                else:
                    await conn.unsubscribe(change.mqtt_filter)
        except ConnectionClosed:
            pass  # the connection task resubscribes everything after reconnecting

    async def _leave(self) -> None:
        if self._sender.conn is None:
            return
        self._closing = True
        self._enqueue_nowait(self._presence_topic, 1, self._presence_payload("bye"), retain=False)
        self._enqueue_nowait(self._presence_topic, 1, b"", retain=True)
        await self.flush()
        if self._sender.conn is not None:
            await self._sender.conn.disconnect_ending_session()

    # -- sending ------------------------------------------------------------------------------
    def _data_topic(self, topic: str) -> str:
        mqtt_topic = self._topic_cache.get(topic)
        if mqtt_topic is None:
            mqtt_topic = self.layout.data(topic, self.client_id)
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
        self.check_payload_size(max(map(len, messages)))
        await self._sender.make_room(len(messages), sum(map(len, messages)))
        self._outbox.add_many(mqtt_topic, self.qos if qos is None else qos, messages)
        self._stats.published += len(messages)
        self._sender.wakeup.notify()
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
                self.check_payload_size(len(data))
                self._stats.published += 1
            else:
                await self._enqueue(self.layout.unicast(to[0].hex(), self.client_id, topic), qos, data)
        else:
            await self._enqueue(self._data_topic(topic), qos, data)
        if self._locals and (to is None or self._id_bytes in to):
            self._deliver_own(kind, topic, levels, [packed])

    def _deliver_own(self, kind: Kind, topic: str, levels: tuple[str, ...], payloads: list[bytes]) -> None:
        """Hand own messages to the local subscribers of ``kind`` (see :func:`.subscription.deliver_own`)."""
        self._stats.delivered += deliver_own(self._locals, kind, topic, levels, payloads, self._id_bytes)

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
            self._enqueue_nowait(mqtt_topic, qos, bytes(payload), retain=retain, urgent=True)
            return
        await self._enqueue(mqtt_topic, qos, bytes(payload), retain=retain, coalesce=False)

    def verify(self, mqtt_topic: str, payload: bytes, *, sender: str, retained: bool = False) -> bytes:
        """``payload`` received on ``mqtt_topic`` with its seal checked and removed, for layers that
        receive raw PUBLISHes on the namespace's topics (bound elections); as is when the endpoint
        has no ``trust``. ``sender``: the client id the topic names. Raises
        :class:`~broker_mqtt.wire.signing.SignatureError` (a :class:`DecodeError`) and counts it."""
        return self._keys.verify(mqtt_topic, payload, sender=sender, retained=retained)

    @property
    def max_payload(self) -> int:
        """The most bytes of node message or raw payload one PUBLISH carries (:meth:`check_payload_size`)."""
        return self._sender.max_payload

    def check_payload_size(self, size: int) -> None:
        """Raise :class:`PayloadTooLarge` if a node message or raw payload of ``size`` bytes would
        not fit in one PUBLISH the broker accepts (its maximum packet size, from the last
        CONNACK, less room for the PUBLISH header); for layers that check before they queue."""
        self._sender.check_size(size)

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far was taken by the broker; False on timeout."""
        return await self._sender.flush(timeout)

    def _rejected(self, packet_id: int, reason: str) -> None:
        """The broker refused PUBLISH ``packet_id`` (PUBACK reason >= 0x80); it is confirmed next."""
        self._stats.rejected += 1
        self._report(ErrorEvent(ErrorCode.PUBLISH_REJECTED, f"broker refused a PUBLISH: {reason}"))

    # -- presence -----------------------------------------------------------------------------
    def _on_presence(self, topic: str, payload: bytes) -> None:
        update = self._presence.receive(topic, payload)
        if update.malformed:
            self._stats.malformed += 1
        if update.forged:
            self._stats.forged += 1
        for event in update.events:
            self._report(event)
        if update.changed:
            self._peers_changed.notify()

    def _presence_payload(self, op: str) -> bytes:
        return presence_payload(self._encoder, op, self.name, announced_prefixes(self._table))

    def _announce(self) -> None:
        if self._sender.conn is not None and not self._closing:
            self._hello = self._presence_payload("hello")
            self._enqueue_nowait(self._presence_topic, 1, self._hello, retain=True)

    def _own_presence_in(self, payload: bytes | None) -> None:
        """Someone else wrote our retained presence (a clear, another hello; None: one that failed
        its check): announce ours again, so that peers and late joiners still know us."""
        if payload != self._hello:
            self._announce()

    # -- subscribing --------------------------------------------------------------------------
    def subscribe(
        self,
        *prefixes: str,
        local: bool | Iterable[str] = False,
        buffer: int | None = None,
        kind: Kind = Kind.DATA,
        overflow: Overflow = "wait",
    ) -> Subscription:
        """Subscribe to topic prefixes; use as ``async with ep.subscribe("/a", "/b") as sub``.

        ``local=True`` also delivers this endpoint's own messages (publish, publish_encoded,
        send_node and unicasts to itself) of ``kind`` on these prefixes, each once; ``local`` may
        instead be a collection of prefixes, each under one of ``prefixes``: own messages under
        those only. They are handed over in-process when sent, not echoed by the broker: own messages keep their
        send order, but relative to other endpoints' messages they may come earlier than the
        broker would have delivered them. Publishing never waits for a full local subscriber
        (its own messages are held beyond ``buffer``). ``buffer`` bounds the PUBLISH batches held
        for this subscriber (default ``subscriber_buffer``); ``overflow`` says what a full one does:
        ``"wait"`` (the endpoint's receiver waits: nothing is lost, but every subscriber of the
        endpoint waits), ``"drop_oldest"`` or ``"drop_newest"`` (the receiver never waits for it;
        drops are counted and reported: :class:`Subscription`). ``kind`` selects which node
        messages it gets (data by default; stores use command). Raises :class:`TopicError` at once
        for prefixes MQTT cannot carry.
        """
        return Subscription(self, prefixes, local=local, buffer=buffer or self._subscriber_buffer, kind=kind,
                            overflow=overflow)

    def subscribe_raw(self, *mqtt_filters: str, buffer: int | None = None,
                      overflow: Overflow = "wait") -> RawSubscription:
        """Receive bare PUBLISHes on MQTT filters outside the data layout (own messages included);
        ``buffer`` and ``overflow`` as :meth:`subscribe`'s."""
        return RawSubscription(self, mqtt_filters, buffer=buffer or self._subscriber_buffer, overflow=overflow)

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
            if isinstance(sub, Subscription):
                self._locals.pop(sub, None)
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
    def status(self, *, buffer: int | None = None) -> EventStream[StatusEvent]:
        """Status events from now on: ``async with ep.status() as events: async for e in events``.

        A consumer that falls ``buffer`` events behind loses the newest ones (counted in
        ``statistics().status_dropped``); data messages are never affected.
        """
        return EventStream(self._status_streams, buffer or self._status_buffer)

    def _report(self, event: StatusEvent) -> None:
        for stream in self._status_streams:
            if not stream._put(event):
                self._stats.status_dropped += 1

    def peers(self) -> list[PeerInfo]:
        """The peers currently known (announced and not lost or removed)."""
        return self._presence.peers()

    async def await_peer(self, peer: uuid.UUID, timeout: float | None = None) -> bool:
        """Wait until ``peer`` is known and its subscriptions are active; False on timeout."""
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while peer not in self._presence:
                await self._peers_changed.wait()
            return True
        return False

    @property
    def connected(self) -> bool:
        return self._sender.conn is not None

    def statistics(self) -> EndpointStatistics:
        """A snapshot of the endpoint's counters."""
        stats = EndpointStatistics(**{k: getattr(self._stats, k) for k in EndpointStatistics.__slots__})
        stats.pending = self._outbox.pending_messages
        return stats

    def __repr__(self) -> str:
        return f"<Endpoint {self.name} {self.id} {'connected' if self.connected else 'disconnected'}>"

