"""The in-memory transport: :mod:`broker_mqtt.transport.base` over a :class:`MemoryBroker` core.

Theory of operation. :class:`MemoryConnector` is a thin anyio layer over the sans-io broker of
:mod:`~broker_mqtt.transport.memory_broker`: ``connect`` opens a :class:`~.memory_broker.ClientHandle`
and the :class:`MemoryConnection` it yields turns the broker's synchronous callbacks into what the
transport interface promises. There is no network and no task: every call is handled by the broker
before it returns, and each connection's incoming PUBLISHes wait in an unbounded per-connection
buffer (as aiomqtt's queue) until :meth:`MemoryConnection.messages` takes them.

How it keeps the interface's guarantees (base.py):

- ``publish`` routes the PUBLISH at once, in call order, and confirms it before returning (the
  broker's PUBACK is implied; base.py allows a confirmation before ``publish`` returns). A PUBLISH
  over the broker's maximum packet size is a protocol error: the broker closes the connection
  (the will is published), ``publish`` still returns an id, which is never confirmed, and
  ``messages()`` raises :class:`~.base.ConnectionClosed` - what a client of mosquitto sees.
- Incoming QoS 1 PUBLISHes are acknowledged when they enter the buffer, as paho acknowledges them
  when aiomqtt queues them: what sits in the buffer when the connection drops, or when the caller
  leaves ``connect``, is still yielded by ``messages()`` before it raises, and is not sent again.
- ``subscribe``/``unsubscribe``/``connect`` pass one checkpoint after acting (the SUBACK's round
  trip), so they are cancellation points like their network counterparts.
- Session expiry follows anyio's clock (simulated time included): the broker's clock is moved
  forward by the time elapsed since the previous call through any of its connectors.

For tests, the connector also plays the network and the broker's process:

- :meth:`MemoryConnector.cut` is a network cut of the connections opened through that connector
  (the broker publishes their wills and keeps their sessions; ``messages()`` raises
  :class:`~.base.ConnectionClosed`; every later operation raises it too).
- :meth:`MemoryConnector.stop` / :meth:`MemoryConnector.start` stop and start the broker (every
  connector on it sees the same broker): stopping drops every connection to it as a cut would
  (mosquitto publishes the wills of its clients when it stops; so does this), and connects fail
  with :class:`~.base.ConnectionClosed` until it starts again. Like mosquitto with persistence
  (what :class:`~broker_mqtt.EmbeddedBroker` runs), retained messages and sessions survive, with
  their subscriptions and queued QoS 1 messages, except the sessions whose last CONNECT asked for a
  clean start: mosquitto 2.0 does not persist those. For a broker that forgets everything, make a
  new :class:`MemoryBroker` (and connectors for it).
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel

from . import memory_broker as core
from .base import ConnAck, ConnectionClosed, ConnectOptions, Received
from .memory_broker import CloseReason, Delivery, MemoryBroker

__all__ = ["MemoryConnector", "MemoryConnection"]

_MAX_PACKET_ID = 65_535


class _Network:
    """What the connectors of one broker share: its open connections, whether it runs, its clock."""

    def __init__(self, broker: MemoryBroker) -> None:
        self._broker = weakref.ref(broker)  # not a strong one: it is this value's key in _networks
        self.running = True
        self.connections: set[MemoryConnection] = set()
        #: client ids whose last CONNECT asked for a clean start (their sessions do not survive stop)
        self.clean_started: set[str] = set()
        self._last_time: float | None = None

    @property
    def broker(self) -> MemoryBroker:
        broker = self._broker()
        assert broker is not None, "its connectors hold the broker"
        return broker

    def tick(self) -> None:
        """Move the broker's clock forward by the anyio time elapsed since the last tick."""
        try:
            now = anyio.current_time()
        except RuntimeError:  # not in an event loop (anyio's errors for that are RuntimeErrors)
            return
        last, self._last_time = self._last_time, now
        if last is not None and now > last:  # a new event loop's clock may be behind: start over
            self.broker.advance(self.broker.now + (now - last))

    def stop(self) -> None:
        self.tick()
        self.running = False
        for connection in list(self.connections):
            connection._drop("the broker stopped")
        for client_id in sorted(self.clean_started):
            if self.broker.has_session(client_id):  # forget it: connect with a clean start, leave
                self.broker.connect(client_id, deliver=_discard, clean_start=True).disconnect()
        self.clean_started.clear()


def _discard(delivery: Delivery) -> None:
    pass


_networks: weakref.WeakKeyDictionary[MemoryBroker, _Network] = weakref.WeakKeyDictionary()


def _network(broker: MemoryBroker) -> _Network:
    network = _networks.get(broker)
    if network is None:
        network = _networks[broker] = _Network(broker)
    return network


class MemoryConnector:
    """Connects to ``broker`` (a new :class:`MemoryBroker` when omitted) in this process.

    Use it wherever a :class:`~broker_mqtt.transport.base.Connector` goes, e.g.
    ``Endpoint(connector=MemoryConnector(broker))``; endpoints that should see each other use
    connectors of the same broker (one connector may serve several endpoints; give each its own
    when a test cuts one of them). ``name`` appears in messages (``memory://name``). Works on any
    anyio backend, trio's simulated clock included. See the module docstring for the guarantees
    and for :meth:`cut`, :meth:`stop` and :meth:`start`.
    """

    def __init__(self, broker: MemoryBroker | None = None, *, name: str = "broker") -> None:
        self.broker = broker if broker is not None else MemoryBroker()
        self.name = name
        self._network = _network(self.broker)
        self._mine: set[MemoryConnection] = set()

    def __str__(self) -> str:
        return f"memory://{self.name}"

    @property
    def running(self) -> bool:
        """False between :meth:`stop` and :meth:`start` (of any connector of this broker)."""
        return self._network.running

    def cut(self, client_id: str | None = None) -> int:
        """Cut the network under the open connections made through this connector (only the one
        of ``client_id`` when given): the broker publishes their wills and keeps their sessions.
        Returns how many were cut. Never blocks."""
        network = self._network
        network.tick()
        cut = [c for c in self._mine if client_id is None or c.client_id == client_id]
        for connection in cut:
            connection._drop("the network connection was cut")
        return len(cut)

    def stop(self) -> None:
        """Stop the broker: every connection to it drops (wills published), connects fail until
        :meth:`start`; retained messages and sessions survive as the module docstring says."""
        self._network.stop()

    def start(self) -> None:
        """Start the broker again (nothing happens if it runs)."""
        self._network.running = True

    @asynccontextmanager
    async def connect(
        self,
        options: ConnectOptions,
        on_confirmed: Callable[[int], None],
        on_rejected: Callable[[int, str], None],
    ) -> AsyncIterator[MemoryConnection]:
        """See :meth:`~broker_mqtt.transport.base.Connector.connect`. Raises
        :class:`~broker_mqtt.transport.base.ConnectionClosed` while the broker is stopped, and
        ValueError for a malformed will topic or session expiry (nothing is opened then)."""
        await anyio.lowlevel.checkpoint()
        network = self._network
        if not network.running:
            raise ConnectionClosed(f"cannot connect to {self}: connection refused (the broker is stopped)")
        network.tick()
        connection = MemoryConnection(self, options, on_confirmed)
        try:
            yield connection
        finally:
            connection._close()

    def _forget(self, connection: MemoryConnection) -> None:
        self._mine.discard(connection)
        self._network.connections.discard(connection)


class MemoryConnection:
    """An open connection to a :class:`MemoryBroker` (see :class:`~broker_mqtt.transport.base.Connection`)."""

    def __init__(self, connector: MemoryConnector, options: ConnectOptions, on_confirmed: Callable[[int], None]) -> None:
        self._connector = connector
        self._network = network = connector._network
        self._on_confirmed = on_confirmed
        self._reason: str | None = None
        self._next_id = 0
        #: PUBLISHes received (acknowledged) and not taken yet: readable until taken, also after the end
        self._inbox: deque[Received] = deque()
        self._reader: anyio.Event | None = None  # set when a PUBLISH arrives or the connection ends
        self._early_acks: list[int] = []
        self._handle: core.ClientHandle | None = None
        will = options.will
        handle = network.broker.connect(
            options.client_id,
            deliver=self._deliver,
            closed=self._closed_by_broker,
            clean_start=options.clean_start,
            session_expiry=options.session_expiry,
            will=core.Will(will.topic, will.payload, will.qos, will.retain) if will else None,
        )
        self._handle = handle
        self.client_id = handle.client_id
        for packet_id in self._early_acks:  # QoS 1 deliveries of a resumed session, during connect
            handle.puback(packet_id)
        self._early_acks.clear()
        ack = handle.connack
        self.connack = ConnAck(ack.maximum_packet_size, ack.subscription_identifier_available)
        if options.clean_start:
            network.clean_started.add(self.client_id)
        else:
            network.clean_started.discard(self.client_id)
        network.connections.add(self)
        connector._mine.add(self)

    # -- broker callbacks ----------------------------------------------------------------------
    def _deliver(self, delivery: Delivery) -> None:
        if self._reason is not None:
            return
        self._inbox.append(Received(delivery.topic, delivery.payload, delivery.qos, delivery.retain,
                                    delivery.subscription_ids))
        self._wake()
        if delivery.packet_id is not None:
            if self._handle is None:
                self._early_acks.append(delivery.packet_id)
            elif not self._handle.closed:
                self._handle.puback(delivery.packet_id)

    def _closed_by_broker(self, reason: CloseReason) -> None:
        self._ended(f"the broker closed the connection ({reason.value})")

    def _ended(self, reason: str) -> None:
        if self._reason is None:
            self._reason = f"{self._connector}: {reason}"
            self._wake()  # messages() yields what is buffered, then raises
            self._connector._forget(self)

    def _drop(self, reason: str) -> None:
        """The network connection dies under this connection (a cut, the broker stopping)."""
        handle = self._handle
        if handle is not None and not handle.closed:
            handle.drop()
        self._ended(reason)

    def _close(self) -> None:
        """Leaving ``connect``: a normal DISCONNECT if still open (the session stays), then clean up."""
        handle = self._handle
        if handle is not None and not handle.closed:
            self._network.tick()
            handle.disconnect()
        self._ended("the connection was closed")  # what is buffered stays readable (acknowledged)

    def _wake(self) -> None:
        reader = self._reader
        if reader is not None:
            self._reader = None
            reader.set()

    def _check_open(self) -> core.ClientHandle:
        handle = self._handle
        if self._reason is not None or handle is None or handle.closed:
            raise ConnectionClosed(self._reason or f"{self._connector}: the connection is closed")
        return handle

    # -- the Connection interface ---------------------------------------------------------------
    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> int:
        """See :meth:`~broker_mqtt.transport.base.Connection.publish`; confirms before returning.
        A malformed topic raises ValueError (as paho does); nothing is sent then."""
        handle = self._check_open()
        self._network.tick()
        self._next_id = self._next_id % _MAX_PACKET_ID + 1
        packet_id = self._next_id
        try:
            handle.publish(topic, payload, qos=qos, retain=retain)
        except core.PacketTooLarge:
            return packet_id  # the broker closed the connection; this PUBLISH is never confirmed
        self._on_confirmed(packet_id)
        return packet_id

    async def subscribe(self, mqtt_filter: str, *, sub_id: int, no_local: bool, qos: int = 1) -> None:
        handle = self._check_open()
        try:
            handle.subscribe(mqtt_filter, qos=qos, sub_id=sub_id, no_local=no_local)
        except core.ProtocolError as exc:  # a real broker closes the connection
            self._drop(f"protocol error: {exc}")
            raise ConnectionClosed(self._reason or str(exc)) from None
        await anyio.lowlevel.checkpoint()

    async def unsubscribe(self, mqtt_filter: str) -> None:
        self._check_open().unsubscribe(mqtt_filter)
        await anyio.lowlevel.checkpoint()

    def messages(self) -> _Messages:
        return _Messages(self)

    async def disconnect_ending_session(self) -> None:
        handle = self._handle
        if handle is not None and not handle.closed:
            self._network.tick()
            handle.disconnect(session_expiry=0)
            self._ended("the connection was closed (session ended)")
        await anyio.lowlevel.checkpoint()


class _Messages:
    """A connection's buffered PUBLISHes; raises ConnectionClosed once the connection has ended."""

    __slots__ = ("_connection",)

    def __init__(self, connection: MemoryConnection) -> None:
        self._connection = connection

    def __aiter__(self) -> _Messages:
        return self

    async def __anext__(self) -> Received:
        connection = self._connection
        await anyio.lowlevel.checkpoint()
        while True:
            if connection._inbox:
                return connection._inbox.popleft()
            if connection._reason is not None:
                raise ConnectionClosed(connection._reason)
            reader = connection._reader = anyio.Event()
            await reader.wait()
