"""The endpoint over the transport seam (broker_mqtt.transport.base), without mosquitto.

A deliberately tiny fake broker (wildcard filters, subscription identifiers, No Local, retained
messages; immediate confirmations) shows that the endpoint needs nothing beyond the interface, and
that transport errors map to the endpoint's own: a permanent refusal and a TLS verification
failure fail fast with BrokerUnavailable, a dropped connection is reported and reconnected.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from broker_mqtt import (
    BrokerUnavailable,
    ConnectionLost,
    ConnectionRestored,
    Endpoint,
    ErrorCode,
    PeerAdded,
    PeerLost,
    PeerRemoved,
)
from broker_mqtt.endpoint.presence import PeerTable, PresenceUpdate, presence_payload
from broker_mqtt.transport.base import (
    ConnAck,
    ConnectionClosed,
    ConnectOptions,
    ConnectRefused,
    Received,
    TLSVerificationFailed,
)
from broker_mqtt.wire.identity import default_client_id
from broker_mqtt.wire.message import NodeEncoder
from broker_mqtt.wire.topics import TopicLayout
from broker_mqtt.wire.topics import mqtt_filter_matches as mqtt_match

pytestmark = pytest.mark.anyio


class FakeConnection:
    def __init__(self, broker: FakeBroker, options: ConnectOptions, on_confirmed: Callable[[int], None]) -> None:
        self.broker, self.options, self._on_confirmed = broker, options, on_confirmed
        self.connack = ConnAck()
        self.subs: dict[str, tuple[int, bool]] = {}
        self._send: MemoryObjectSendStream[Received]
        self._receive: MemoryObjectReceiveStream[Received]
        self._send, self._receive = anyio.create_memory_object_stream[Received](1000)
        self._next_id = 0

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> int:
        if self not in self.broker.connections:
            raise ConnectionClosed("fake connection closed")
        self._next_id += 1
        self.broker.route(self, topic, payload, qos, retain)
        self._on_confirmed(self._next_id)  # allowed: a confirmation before publish returns
        return self._next_id

    async def subscribe(self, mqtt_filter: str, *, sub_id: int, no_local: bool, qos: int = 1) -> None:
        self.subs[mqtt_filter] = (sub_id, no_local)
        for topic, payload in self.broker.retained.items():
            if mqtt_match(mqtt_filter, topic):
                self._send.send_nowait(Received(topic, payload, 1, True, (sub_id,)))

    async def unsubscribe(self, mqtt_filter: str) -> None:
        self.subs.pop(mqtt_filter, None)

    def messages(self) -> AsyncIterator[Received]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Received]:
        async for message in self._receive:
            yield message
        raise ConnectionClosed("fake connection dropped")

    async def disconnect_ending_session(self) -> None:
        self.broker.connections.remove(self)

    def deliver(self, sender: FakeConnection, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        ids = tuple(i for f, (i, no_local) in self.subs.items() if mqtt_match(f, topic) and not (no_local and sender is self))
        if ids:
            self._send.send_nowait(Received(topic, payload, qos, retain, ids))

    def close(self) -> None:
        self._send.close()
        self._receive.close()

    def drop(self) -> None:
        self.broker.connections.remove(self)
        self._send.close()
        if self.options.will is not None:
            will = self.options.will
            self.broker.route(self, will.topic, will.payload, will.qos, will.retain)


class FakeBroker:
    """A connector; ``fail`` makes the next connects raise it."""

    def __init__(self) -> None:
        self.connections: list[FakeConnection] = []
        self.retained: dict[str, bytes] = {}
        self.fail: Exception | None = None

    def __str__(self) -> str:
        return "fake://broker"

    def route(self, sender: FakeConnection, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        if retain:
            if payload:
                self.retained[topic] = payload
            else:
                self.retained.pop(topic, None)
        for conn in list(self.connections):
            conn.deliver(sender, topic, payload, qos, False)

    @asynccontextmanager
    async def connect(
        self, options: ConnectOptions, on_confirmed: Callable[[int], None], on_rejected: Callable[[int, str], None]
    ) -> AsyncIterator[FakeConnection]:
        if self.fail is not None:
            raise self.fail
        conn = FakeConnection(self, options, on_confirmed)
        self.connections.append(conn)
        try:
            yield conn
        finally:
            if conn in self.connections:
                self.connections.remove(conn)
            conn.close()


async def test_two_endpoints_over_a_fake_transport() -> None:
    broker = FakeBroker()
    async with (
        Endpoint(connector=broker, namespace="ns", name="a") as a,
        Endpoint(connector=broker, namespace="ns", name="b") as b,
        b.subscribe("/x") as sub,
    ):
        with anyio.fail_after(10):
            assert await a.await_peer(b.id)
            await a.publish("/x/1", "hello")
            msg = await sub.get()
        assert (msg.topic, msg.data, msg.sender) == ("/x/1", "hello", a.id)
        assert await a.flush(10)
        assert a.statistics().pending == 0


async def test_a_dropped_connection_is_reported_and_reconnected() -> None:
    broker = FakeBroker()
    async with Endpoint(connector=broker, namespace="ns", reconnect_delay=(0.01, 0.02)) as ep, ep.status() as events:
        broker.connections[0].drop()
        with anyio.fail_after(10):
            first = await events.__anext__()
            second = await events.__anext__()
        assert isinstance(first, ConnectionLost) and "fake connection dropped" in first.reason
        assert isinstance(second, ConnectionRestored)
        assert ep.connected and ep.statistics().reconnects == 1


@pytest.mark.parametrize(
    ("error", "match"),
    [
        (ConnectRefused("not authorized", 0x87), "refused the connection: not authorized"),
        (TLSVerificationFailed("CERTIFICATE_VERIFY_FAILED"), "TLS: the certificate of fake://broker did not verify"),
    ],
)
async def test_permanent_connect_failures_fail_fast(error: Exception, match: str) -> None:
    broker = FakeBroker()
    broker.fail = error
    with anyio.fail_after(10), pytest.raises(BrokerUnavailable, match=match):
        async with Endpoint(connector=broker, connect_timeout=30):
            pass


async def test_other_connect_failures_are_retried_until_the_timeout() -> None:
    broker = FakeBroker()
    broker.fail = ConnectRefused("server unavailable", 0x88)
    with anyio.fail_after(10), pytest.raises(BrokerUnavailable, match="within 0.3s: server unavailable"):
        async with Endpoint(connector=broker, connect_timeout=0.3, reconnect_delay=(0.01, 0.02)):
            pass


def test_peer_table_hello_bye_and_lost() -> None:
    layout = TopicLayout("ns")
    peer_id = uuid.uuid4()
    peer = NodeEncoder(peer_id.bytes)
    table = PeerTable(layout, uuid.uuid4())
    topic = layout.presence(default_client_id(peer_id))
    added = table.receive(topic, presence_payload(peer, "hello", "p", ["/a"]))
    assert added.changed and len(added.events) == 1 and isinstance(added.events[0], PeerAdded)
    assert added.events[0].peer.topics == ("/a",) and peer_id in table
    again = table.receive(topic, presence_payload(peer, "hello", "p", ["/a", "/b"]))
    assert again.changed and again.events == () and table.peers()[0].topics == ("/a", "/b")
    lost = table.receive(topic, b"")
    assert [type(e) for e in lost.events] == [PeerLost] and peer_id not in table
    assert table.receive(topic, b"") == PresenceUpdate()  # lost twice: nothing to report
    bad = table.receive(topic, b"\xff")
    assert bad.malformed and not bad.changed and bad.events
    assert table.receive(layout.presence("bm-not-hex"), b"x").events  # names no endpoint: reported
    forged = table.receive(layout.presence("gw7"), presence_payload(peer, "hello", "p", []))
    assert forged.forged and not forged.changed and forged.events  # peer's hello on gw7's topic
    assert forged.events[0].code is ErrorCode.FORGED_MESSAGE  # type: ignore[union-attr]
    table.receive(topic, presence_payload(peer, "hello", "p", []))
    removed = table.receive(topic, presence_payload(peer, "bye", "p", []))
    assert [type(e) for e in removed.events] == [PeerRemoved] and not table.peers()
