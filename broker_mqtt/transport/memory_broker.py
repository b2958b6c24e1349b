"""An in-memory MQTT 5 broker core: the semantics of mosquitto 2.0 with no network, sans-io.

:class:`MemoryBroker` is a plain object. A client calls :meth:`MemoryBroker.connect` and gets a
:class:`ClientHandle`; the handle's methods are the packets a client sends (PUBLISH, SUBSCRIBE,
UNSUBSCRIBE, PUBACK, DISCONNECT) plus :meth:`ClientHandle.drop` for a network connection that
dies. What the broker sends back goes to the client's ``deliver`` callback as :class:`Delivery`
values (PUBLISH packets), and to its ``closed`` callback when the broker ends the connection.
Every call is handled completely before it returns; the PUBACK for a QoS 1 PUBLISH is implied.
Callbacks run synchronously, in order, at the end of the outermost broker call: a callback may
call the broker again (its effects are queued behind the callbacks already due), so a thin I/O
layer can feed them to a per-client queue or act on them at once. A callback that raises makes
the broker call raise; the callbacks still due run at the end of the next call. Time is an input:
:meth:`MemoryBroker.advance` moves the broker's clock, which only session expiry reads.

Semantics, each matching mosquitto 2.0 (checked by the ``mosquitto`` tests next to this one):

- **Topics and filters** (MQTT 5 §4.7): ``+`` matches one level, ``#`` the rest (the parent level
  too); a filter starting with a wildcard does not match a topic starting with ``$``. Malformed
  topics and filters raise :class:`InvalidTopic`. Shared subscriptions are not supported.
- **One copy per matching subscription.** A PUBLISH that matches several subscriptions of one
  client is delivered once per subscription, each copy carrying that subscription's identifier
  (mosquitto does this; MQTT 5 §3.3.4 also allows one copy with all identifiers, which it does not).
  The order of the copies among one client's subscriptions is not part of the contract.
- **Subscription options:** delivered QoS = min(published, subscribed); No Local skips the
  client's own PUBLISHes; the forwarded RETAIN flag is 0 unless Retain As Published is set.
  Subscribing again to the same filter replaces its QoS and identifier only (No Local and Retain
  As Published keep their first values: mosquitto 2.0) and sends the retained messages again.
- **Retained messages:** a retained PUBLISH replaces the topic's retained message, an empty
  payload clears it (and is still forwarded); a SUBSCRIBE sends the matching retained messages
  with RETAIN 1.
- **Sessions:** a session outlives its connection for ``session_expiry`` seconds (0: it ends with
  the connection; :data:`NEVER_EXPIRES`: never). While the client is away its subscriptions
  stay and QoS 1 messages queue (QoS 0 ones are dropped, mosquitto's ``queue_qos0_messages
  false``). On reconnect without clean start, QoS 1 messages sent and not acknowledged are sent
  again first (same packet id, DUP 1), in order, then the queued ones.
- **Takeover:** a connect with a client id whose session is connected closes the old connection
  (its ``closed`` callback gets :attr:`CloseReason.TAKEN_OVER`). The session continues when the
  new connect does not ask for a clean start and the old session expiry was not 0.
- **Last will:** published when the connection ends other than by a normal DISCONNECT (a drop, a
  protocol error, a DISCONNECT asking for it). On takeover mosquitto publishes the old
  connection's will only when the session does not continue (clean start, or expiry 0); so do we.
  A DISCONNECT may change the session expiry; 0 ends the session.
- **Order:** everything one publisher sends reaches each subscriber in the order sent (per
  subscription), across disconnects of the subscriber.
- **Limits:** a PUBLISH larger than ``max_packet_size`` (MQTT's total size) is a protocol error:
  the connection is closed (will published) and :class:`PacketTooLarge` raised. mosquitto 2.0
  compares remaining length + 1 instead, so it lets through packets a byte or two longer: what
  passes here passes there. CONNACK carries the values a client needs (:class:`ConnAck`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import Enum
from itertools import count

from ..errors import TopicError
from ..wire.topics import mqtt_filter_matches, validate_mqtt_filter, validate_mqtt_topic

__all__ = [
    "NEVER_EXPIRES", "ClientHandle", "CloseReason", "ConnAck", "ConnectionClosed", "Delivery",
    "InvalidTopic", "MemoryBroker", "MemoryBrokerError", "PacketTooLarge", "ProtocolError", "Will",
    "publish_packet_size", "topic_matches", "validate_filter", "validate_topic",
]

NEVER_EXPIRES = 0xFFFFFFFF  #: session expiry interval meaning "never" (MQTT 5 §3.1.2.11.2)
MAX_PACKET_ID = 65_535
MAX_SUBSCRIPTION_ID = 268_435_455


class MemoryBrokerError(Exception):
    """Base class of the errors this module raises."""


class InvalidTopic(MemoryBrokerError, ValueError):
    """The caller passed a malformed topic name or topic filter."""


class ProtocolError(MemoryBrokerError):
    """The client broke MQTT 5 (a real broker would close the connection)."""


class PacketTooLarge(ProtocolError):
    """A PUBLISH over the broker's maximum packet size; the connection has been closed."""


class ConnectionClosed(MemoryBrokerError):
    """The handle's connection has ended (disconnect, drop, takeover or protocol error)."""


class CloseReason(Enum):
    NORMAL = "normal"  #: the client sent DISCONNECT
    DROPPED = "dropped"  #: the network connection died
    TAKEN_OVER = "taken over"  #: another connection with the same client id took the session
    PACKET_TOO_LARGE = "packet too large"  #: the client sent a PUBLISH over the limit


@dataclass(frozen=True, slots=True)
class Will:
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False


@dataclass(frozen=True, slots=True)
class ConnAck:
    session_present: bool
    maximum_packet_size: int
    subscription_identifier_available: bool
    retain_available: bool = True


@dataclass(frozen=True, slots=True)
class Delivery:
    """A PUBLISH the broker sends a client. QoS 1 ones carry a packet id to :meth:`ClientHandle.puback`."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    subscription_ids: tuple[int, ...] = ()
    packet_id: int | None = None
    dup: bool = False


# -- topics ------------------------------------------------------------------------------------


def validate_topic(topic: str) -> str:
    """Return ``topic`` if it is a valid MQTT topic name (no wildcards), else raise :class:`InvalidTopic`."""
    try:
        return validate_mqtt_topic(topic)
    except TopicError as exc:
        raise InvalidTopic(str(exc)) from None


def validate_filter(topic_filter: str) -> str:
    """Return ``topic_filter`` if it is a valid MQTT topic filter, else raise :class:`InvalidTopic`."""
    if isinstance(topic_filter, str) and topic_filter.startswith("$share/"):
        raise InvalidTopic(f"filter {topic_filter!r}: shared subscriptions are not supported")
    try:
        return validate_mqtt_filter(topic_filter)
    except TopicError as exc:
        raise InvalidTopic(str(exc)) from None


#: True if the (valid) filter matches the (valid) topic, per MQTT 5 §4.7.
topic_matches = mqtt_filter_matches


def _varint_len(n: int) -> int:
    size = 1
    while n >= 128:
        n //= 128
        size += 1
    return size


def publish_packet_size(topic: str, payload: bytes, qos: int, properties_len: int = 0) -> int:
    """Bytes of a PUBLISH packet on the wire (fixed header included), with ``properties_len`` bytes of properties."""
    remaining = 2 + len(topic.encode()) + (2 if qos else 0)
    remaining += _varint_len(properties_len) + properties_len + len(payload)
    return 1 + _varint_len(remaining) + remaining


# -- broker state ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Subscription:
    qos: int
    sub_id: int | None
    no_local: bool
    retain_as_published: bool


@dataclass(slots=True, eq=False)
class _Session:
    client_id: str
    expiry: int
    subscriptions: dict[str, _Subscription] = field(default_factory=dict)
    inflight: dict[int, Delivery] = field(default_factory=dict)  #: sent QoS 1, not acknowledged; in order
    queued: deque[Delivery] = field(default_factory=deque)  #: not sent yet, in order
    next_packet_id: int = 1
    connection: ClientHandle | None = None
    expires_at: float | None = None  #: set while disconnected; None: never


Deliver = Callable[[Delivery], None]
Closed = Callable[[CloseReason], None]


class ClientHandle:
    """One client's network connection to a :class:`MemoryBroker`: call its methods to send packets.

    Every method raises :class:`ConnectionClosed` once the connection has ended.
    """

    def __init__(
        self, broker: MemoryBroker, session: _Session, connack: ConnAck, will: Will | None,
        deliver: Deliver, closed: Closed | None, receive_maximum: int,
    ) -> None:
        self._broker = broker
        self._session = session
        self.connack = connack
        self._will = will
        self._deliver = deliver
        self._closed_cb = closed
        self.receive_maximum = receive_maximum
        self.close_reason: CloseReason | None = None

    @property
    def client_id(self) -> str:
        return self._session.client_id

    @property
    def closed(self) -> bool:
        return self.close_reason is not None

    def _check_open(self) -> None:
        if self.close_reason is not None:
            raise ConnectionClosed(f"connection of {self.client_id!r} is closed ({self.close_reason.value})")

    def publish(self, topic: str, payload: bytes, *, qos: int = 0, retain: bool = False) -> None:
        """Send a PUBLISH. On return the broker has accepted it (a QoS 1 PUBACK is implied) and routed it.

        Raises :class:`InvalidTopic` (nothing happens), or :class:`PacketTooLarge` (the connection
        is closed as if dropped: the will is published).
        """
        self._check_open()
        validate_topic(topic)
        if qos not in (0, 1):
            raise ValueError(f"qos must be 0 or 1, not {qos!r}")
        payload = bytes(payload)
        size = publish_packet_size(topic, payload, qos)
        with self._broker._batch():
            if size > self._broker.max_packet_size:
                self._broker._close(self, CloseReason.PACKET_TOO_LARGE, publish_will=True, notify=True)
                raise PacketTooLarge(f"PUBLISH of {size} bytes over maximum packet size {self._broker.max_packet_size}")
            self._broker._route(topic, payload, qos, retain, publisher=self.client_id)

    def subscribe(
        self, topic_filter: str, *, qos: int = 1, sub_id: int | None = None, no_local: bool = False,
        retain_as_published: bool = False,
    ) -> None:
        """Subscribe (or subscribe again, see the module docstring); matching retained messages follow at once.

        Raises :class:`InvalidTopic`, :class:`ProtocolError` (a subscription identifier the broker
        does not offer or out of range), ValueError (bad QoS); the subscription is then unchanged.
        """
        self._check_open()
        validate_filter(topic_filter)
        if qos not in (0, 1):
            raise ValueError(f"qos must be 0 or 1, not {qos!r}")
        if sub_id is not None:
            if not self._broker.subscription_identifiers:
                raise ProtocolError("this broker does not offer subscription identifiers")
            if not 1 <= sub_id <= MAX_SUBSCRIPTION_ID:
                raise ProtocolError(f"subscription identifier {sub_id} outside 1..{MAX_SUBSCRIPTION_ID}")
        with self._broker._batch():
            existing = self._session.subscriptions.get(topic_filter)
            if existing is not None:  # mosquitto 2.0 updates only QoS and identifier
                existing.qos, existing.sub_id = qos, sub_id
                sub = existing
            else:
                sub = _Subscription(qos, sub_id, no_local, retain_as_published)
                self._session.subscriptions[topic_filter] = sub
            for topic, (payload, retained_qos) in self._broker._retained.items():
                if topic_matches(topic_filter, topic):
                    self._broker._enqueue(self._session, Delivery(
                        topic, payload, min(retained_qos, sub.qos), True, self._broker._ids(sub)))

    def unsubscribe(self, topic_filter: str) -> bool:
        """Remove the subscription to exactly ``topic_filter``; False if there was none. Queued messages stay."""
        self._check_open()
        validate_filter(topic_filter)
        return self._session.subscriptions.pop(topic_filter, None) is not None

    def puback(self, packet_id: int) -> None:
        """Acknowledge the QoS 1 delivery ``packet_id``; an unknown id is ignored (idempotent)."""
        self._check_open()
        with self._broker._batch():
            if self._session.inflight.pop(packet_id, None) is not None:
                self._broker._pump(self._session)

    def disconnect(self, *, session_expiry: int | None = None, publish_will: bool = False) -> None:
        """Send DISCONNECT: the will is discarded unless ``publish_will`` (reason 0x04).

        ``session_expiry`` replaces the one given at connect; 0 ends the session now. Raises
        :class:`ProtocolError` (connection left open) for a non-zero value when connect gave 0.
        """
        self._check_open()
        if session_expiry is not None:
            if self._session.expiry == 0 and session_expiry != 0:
                raise ProtocolError("session expiry was 0 at connect: DISCONNECT may not set it")
            self._session.expiry = session_expiry
        with self._broker._batch():
            self._broker._close(self, CloseReason.NORMAL, publish_will=publish_will, notify=False)

    def drop(self) -> None:
        """The network connection died: the will is published, the session kept for its expiry."""
        self._check_open()
        with self._broker._batch():
            self._broker._close(self, CloseReason.DROPPED, publish_will=True, notify=False)


class MemoryBroker:
    """An MQTT 5 broker in memory (see the module docstring for its guarantees).

    ``max_packet_size`` is announced in CONNACK and enforced on PUBLISH; with
    ``subscription_identifiers=False`` the broker announces none and refuses them.
    """

    def __init__(self, *, max_packet_size: int = 16 * 1024 * 1024, subscription_identifiers: bool = True) -> None:
        self.max_packet_size = max_packet_size
        self.subscription_identifiers = subscription_identifiers
        self.now = 0.0
        self._sessions: dict[str, _Session] = {}
        self._retained: dict[str, tuple[bytes, int]] = {}
        self._callbacks: deque[tuple[ClientHandle, Delivery | CloseReason]] = deque()
        self._depth = 0
        self._auto_ids = count(1)

    # -- client-facing ---------------------------------------------------------------------
    def connect(
        self, client_id: str, *, deliver: Deliver, clean_start: bool = True, session_expiry: int = 0,
        will: Will | None = None, closed: Closed | None = None, receive_maximum: int = MAX_PACKET_ID,
    ) -> ClientHandle:
        """Open a connection (CONNECT/CONNACK). Taking over a connected session closes its connection.

        An empty ``client_id`` gets a broker-assigned one (``ClientHandle.client_id``). Messages due
        to a resumed session are delivered before this returns (see the module docstring).
        ``receive_maximum`` bounds the QoS 1 deliveries awaiting PUBACK. Raises
        :class:`InvalidTopic` for a bad will topic, ValueError for bad numbers; nothing changes then.
        """
        if will is not None:
            validate_topic(will.topic)
        if not 0 <= session_expiry <= NEVER_EXPIRES:
            raise ValueError(f"session_expiry {session_expiry} outside 0..{NEVER_EXPIRES}")
        if not 1 <= receive_maximum <= MAX_PACKET_ID:
            raise ValueError(f"receive_maximum {receive_maximum} outside 1..{MAX_PACKET_ID}")
        client_id = client_id or f"auto-{next(self._auto_ids)}"
        with self._batch():
            old = self._sessions.get(client_id)
            resume = old is not None and not clean_start and old.expiry > 0
            if old is not None and old.connection is not None:
                self._close(old.connection, CloseReason.TAKEN_OVER, publish_will=not resume, notify=True,
                            keep_session=True)
            if old is not None and not resume:
                del self._sessions[client_id]
            session = self._sessions[client_id] if resume else _Session(client_id, session_expiry)
            self._sessions[client_id] = session
            session.expiry, session.expires_at = session_expiry, None
            connack = ConnAck(resume, self.max_packet_size, self.subscription_identifiers)
            handle = ClientHandle(self, session, connack, will, deliver, closed, receive_maximum)
            session.connection = handle
            for delivery in session.inflight.values():
                self._callbacks.append((handle, replace(delivery, dup=True)))
            self._pump(session)
        return handle

    def advance(self, now: float) -> None:
        """Move the broker's clock to ``now`` (seconds, never backwards); ends the sessions that expired."""
        if now < self.now:
            raise ValueError(f"time runs forward: {now} < {self.now}")
        self.now = now
        for client_id, session in list(self._sessions.items()):
            if session.connection is None and session.expires_at is not None and session.expires_at <= now:
                del self._sessions[client_id]

    def next_deadline(self) -> float | None:
        """When the next disconnected session expires (for the I/O layer's timer); None if none will."""
        deadlines = [s.expires_at for s in self._sessions.values() if s.connection is None and s.expires_at is not None]
        return min(deadlines, default=None)

    def has_session(self, client_id: str) -> bool:
        return client_id in self._sessions

    def retained(self) -> dict[str, bytes]:
        """A copy of the retained messages, topic -> payload."""
        return {topic: payload for topic, (payload, _qos) in self._retained.items()}

    # -- internals ---------------------------------------------------------------------------
    def _ids(self, sub: _Subscription) -> tuple[int, ...]:
        return (sub.sub_id,) if sub.sub_id is not None and self.subscription_identifiers else ()

    def _route(self, topic: str, payload: bytes, qos: int, retain: bool, *, publisher: str) -> None:
        if retain:
            if payload:
                self._retained[topic] = (payload, qos)
            else:
                self._retained.pop(topic, None)
        for session in self._sessions.values():
            for topic_filter, sub in session.subscriptions.items():
                if sub.no_local and session.client_id == publisher:
                    continue
                if topic_matches(topic_filter, topic):
                    delivery = Delivery(topic, payload, min(qos, sub.qos), retain and sub.retain_as_published,
                                        self._ids(sub))
                    self._enqueue(session, delivery)

    def _enqueue(self, session: _Session, delivery: Delivery) -> None:
        if session.connection is None and delivery.qos == 0:
            return  # mosquitto's queue_qos0_messages false
        session.queued.append(delivery)
        self._pump(session)

    def _pump(self, session: _Session) -> None:
        """Send queued deliveries, in order, while connected and packet ids (and receive maximum) allow."""
        handle = session.connection
        while handle is not None and session.queued:
            delivery = session.queued[0]
            if delivery.qos == 1:
                if len(session.inflight) >= handle.receive_maximum:
                    return
                packet_id = self._packet_id(session)
                delivery = replace(delivery, packet_id=packet_id)
                session.inflight[packet_id] = delivery
            session.queued.popleft()
            self._callbacks.append((handle, delivery))

    def _packet_id(self, session: _Session) -> int:
        while session.next_packet_id in session.inflight:  # receive_maximum < 65536 keeps one free
            session.next_packet_id = session.next_packet_id % MAX_PACKET_ID + 1
        packet_id = session.next_packet_id
        session.next_packet_id = packet_id % MAX_PACKET_ID + 1
        return packet_id

    def _close(self, handle: ClientHandle, reason: CloseReason, *, publish_will: bool, notify: bool,
               keep_session: bool = False) -> None:
        session = handle._session
        handle.close_reason = reason
        session.connection = None
        session.queued = deque(d for d in session.queued if d.qos == 1)
        if notify:
            self._callbacks.append((handle, reason))
        if not keep_session:
            if session.expiry == 0:
                self._sessions.pop(session.client_id, None)
            elif session.expiry != NEVER_EXPIRES:
                session.expires_at = self.now + session.expiry
        will = handle._will
        if publish_will and will is not None:
            self._route(will.topic, will.payload, will.qos, will.retain, publisher=session.client_id)

    @contextmanager
    def _batch(self) -> Iterator[None]:
        """Run the callbacks due when the outermost broker call ends (also when it raises)."""
        self._depth += 1
        try:
            yield
        finally:
            try:
                if self._depth == 1:
                    self._flush()
            finally:
                self._depth -= 1

    def _flush(self) -> None:
        while self._callbacks:
            handle, item = self._callbacks.popleft()
            if isinstance(item, CloseReason):
                if handle._closed_cb is not None:
                    handle._closed_cb(item)
            elif not handle.closed:  # a closed connection loses what was on its wire
                handle._deliver(item)
