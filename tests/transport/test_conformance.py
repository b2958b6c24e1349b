"""The transport conformance suite: every test runs on each transport, with the same assertions.

``world`` is one of the transports behind :mod:`broker_mqtt.transport.base`: the aiomqtt connector
on the embedded mosquitto of tests/conftest.py (``mosquitto``; each connector reaches it through
its own :class:`~cuttable.CuttableRelay`, so a test can cut the network under one client) and the
:class:`MemoryConnector` on a fresh :class:`MemoryBroker` (``memory``). Two levels:

- the :class:`~broker_mqtt.transport.base.Connection` interface itself: confirmations, subscription
  identifiers and No Local, wildcards, retained messages, the will, the session across a
  reconnect, order per publisher, the maximum packet size;
- the :class:`Endpoint` on top: pub/sub by prefix, own messages, peers, reconnecting after a cut.

Tests wait for events (messages, confirmations, status events) and never for time to pass; a
claim that something did *not* arrive is checked against a marker sent after it by the same
publisher (order per publisher makes the marker a proof).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from cuttable import CuttableRelay

from broker_mqtt import (
    ConnectionLost,
    ConnectionRestored,
    EmbeddedBroker,
    Endpoint,
    PeerAdded,
    PeerLost,
    PeerRemoved,
    StatusEvent,
)
from broker_mqtt.transport import MemoryBroker, MemoryConnector
from broker_mqtt.transport.base import (
    ConnectionClosed,
    ConnectOptions,
    Connector,
    Received,
    Will,
)
from broker_mqtt.transport.broker_url import BrokerURL
from broker_mqtt.transport.memory_broker import publish_packet_size
from broker_mqtt.transport.mqtt import MQTTConnector

pytestmark = pytest.mark.anyio

TIMEOUT = 20  # generous: the machine may be loaded; a passing test takes milliseconds


# -- the two transports ------------------------------------------------------------------------


class World:
    """Makes connectors to one broker and cuts the network under them; names are test-unique."""

    def __init__(self, kind: str, mosquitto: EmbeddedBroker | None) -> None:
        self.kind = kind
        self.ns = "c" + uuid.uuid4().hex[:10]
        self._mosquitto = mosquitto
        self._memory = MemoryBroker()
        self._relays: dict[int, CuttableRelay] = {}

    @property
    def max_packet(self) -> int:
        return self._mosquitto.max_packet_size if self._mosquitto else self._memory.max_packet_size

    def connector(self) -> Connector:
        """A new connector to the broker (its own network path: :meth:`cut` cuts only it)."""
        if self._mosquitto is None:
            return MemoryConnector(self._memory, name=self.ns)
        if self.kind == "own mosquitto":  # no relay: one that closes links while the broker is down
            return MQTTConnector(BrokerURL.parse(self._mosquitto.url))  # stalls aiomqtt's connect 10 s
        relay = CuttableRelay(self._mosquitto.port)
        connector = MQTTConnector(BrokerURL.parse(f"mqtt://127.0.0.1:{relay.port}"))
        self._relays[id(connector)] = relay
        return connector

    def cut(self, connector: Connector) -> None:
        """Cut the network under every connection ``connector`` has open."""
        if isinstance(connector, MemoryConnector):
            assert connector.cut() > 0
        else:
            assert self._relays[id(connector)].cut() > 0

    async def stop(self) -> None:
        """Stop the broker: every connection drops; connecting fails until :meth:`start`."""
        if self._mosquitto is None:
            MemoryConnector(self._memory).stop()
        else:
            assert self.kind == "own mosquitto", "only a world's own mosquitto may be stopped"
            await anyio.to_thread.run_sync(self._mosquitto.stop)

    async def start(self) -> None:
        if self._mosquitto is None:
            MemoryConnector(self._memory).start()
        else:
            await self._mosquitto.astart()

    def topic(self, name: str) -> str:
        return f"{self.ns}/{name}"

    def client_id(self, name: str) -> str:
        return f"{self.ns}-{name}"

    def close(self) -> None:
        for relay in self._relays.values():
            relay.close()
            assert not relay.errors, relay.errors


@pytest.fixture(params=["memory", pytest.param("mosquitto", marks=pytest.mark.mosquitto)])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    mosquitto = request.getfixturevalue("broker") if request.param == "mosquitto" else None
    w = World(request.param, mosquitto)
    try:
        yield w
    finally:
        w.close()


@pytest.fixture(params=["memory", pytest.param("mosquitto", marks=pytest.mark.mosquitto)])
def restartable_world(request: pytest.FixtureRequest) -> Iterator[World]:
    """A world whose broker the test may stop and start (mosquitto: its own, with persistence,
    reached directly: :meth:`World.cut` is not available there)."""
    if request.param == "memory":
        w = World("memory", None)
        try:
            yield w
        finally:
            w.close()
        return
    with _own_world() as w:
        yield w


@contextmanager
def _own_world(**broker_options: Any) -> Iterator[World]:
    """A world on a mosquitto of its own (``broker_options``: :class:`EmbeddedBroker`'s), closed after."""
    with EmbeddedBroker(**broker_options) as mosquitto:
        w = World("own mosquitto", mosquitto)
        try:
            yield w
        finally:
            w.close()


# -- a client over the Connection interface ------------------------------------------------------


class Client:
    """One open connection, with its confirmations and received PUBLISHes collected for the test."""

    def __init__(self, connection: Any, connector: Connector) -> None:
        self.conn = connection
        self.connector = connector
        self.confirmed: list[int] = []
        self.rejected: list[tuple[int, str]] = []
        self._changed = anyio.Event()
        self._inbox: list[Received] = []
        self.ended: BaseException | None = None  # how messages() ended: ConnectionClosed or StopAsyncIteration

    def _on_confirmed(self, packet_id: int) -> None:
        self.confirmed.append(packet_id)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _read(self) -> None:
        try:
            async for message in self.conn.messages():
                self._inbox.append(message)
                self._wake()
            self.ended = StopAsyncIteration()
        except ConnectionClosed as exc:
            self.ended = exc
        self._wake()

    async def wait_for(self, predicate: Any) -> None:
        with anyio.fail_after(TIMEOUT):
            while not predicate():
                await self._changed.wait()

    async def take(self, n: int) -> list[Received]:
        """The next ``n`` PUBLISHes received."""
        await self.wait_for(lambda: len(self._inbox) >= n)
        out, self._inbox = self._inbox[:n], self._inbox[n:]
        return out

    async def take_until(self, payload: bytes) -> list[Received]:
        """Everything received up to and including the PUBLISH with ``payload`` (the marker)."""
        await self.wait_for(lambda: any(m.payload == payload for m in self._inbox))
        i = next(i for i, m in enumerate(self._inbox) if m.payload == payload)
        out, self._inbox = self._inbox[: i + 1], self._inbox[i + 1 :]
        return out

    async def wait_closed(self) -> BaseException:
        await self.wait_for(lambda: self.ended is not None)
        assert self.ended is not None
        return self.ended

    async def publish_confirmed(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> int:
        packet_id: int = self.conn.publish(topic, payload, qos, retain)
        await self.wait_for(lambda: packet_id in self.confirmed)
        return packet_id


@asynccontextmanager
async def client(
    world: World, name: str, *, connector: Connector | None = None, **options: Any
) -> AsyncIterator[Client]:
    """Connect as client ``name`` and read its messages in the background while the block runs.

    Leaving closes the connection normally; after a cut, leaving may report the cut (a
    ConnectionClosed), which is ignored here: the Endpoint ignores it too.
    """
    connector = connector or world.connector()
    options.setdefault("clean_start", True)
    opts = ConnectOptions(world.client_id(name), **options)
    holder: list[Client] = []
    cm = connector.connect(opts, lambda i: holder[0]._on_confirmed(i),
                           lambda i, r: holder[0].rejected.append((i, r)))
    try:
        async with cm as conn, anyio.create_task_group() as tg:
            c = Client(conn, connector)
            holder.append(c)
            tg.start_soon(c._read)
            yield c
            tg.cancel_scope.cancel()
    except ConnectionClosed:
        if not holder or holder[0].ended is None:
            raise


def payloads(messages: list[Received]) -> list[bytes]:
    return [m.payload for m in messages]


# -- the Connection interface --------------------------------------------------------------------


async def test_connack(world: World) -> None:
    async with client(world, "a") as a:
        assert a.conn.connack.max_packet == world.max_packet
        assert a.conn.connack.subscription_ids_available


async def test_every_publish_is_confirmed_once(world: World) -> None:
    topic = world.topic("confirm")
    async with client(world, "a") as a, client(world, "s") as s:
        await s.conn.subscribe(topic, sub_id=1, no_local=False)
        ids = [a.conn.publish(topic, b"%d" % i, i % 2, False) for i in range(40)]
        assert len(set(ids)) == len(ids)
        await a.wait_for(lambda: set(ids) <= set(a.confirmed))
        assert sorted(a.confirmed) == sorted(ids) and not a.rejected
        got = await s.take(40)
        assert payloads(got) == [b"%d" % i for i in range(40)]
        assert [m.qos for m in got] == [i % 2 for i in range(40)]


def _sizes(n: int) -> list[int]:
    """Payload sizes: mostly small, every 7th 5,000 bytes and every 50th 100,000 (a PUBLISH split
    across the reader's 64 KiB reads, which paho reads and acknowledges itself)."""
    return [100_000 if i % 50 == 49 else 5_000 if i % 7 == 6 else 10 for i in range(n)]


@pytest.mark.mosquitto
async def test_the_subscriber_acknowledges_every_qos1_publish() -> None:
    """Every QoS 1 PUBLISH received is acknowledged, whether the reader takes it or paho does (the
    reader sends its PUBACKs after the subscriber's turn): a mosquitto that keeps one PUBLISH
    unacknowledged to a client sends the next only after its PUBACK, so all 300 arrive only if
    every PUBACK went."""
    with _own_world(extra_config="max_inflight_messages 1") as w:
        topic = w.topic("acks")
        async with client(w, "a") as a, client(w, "s") as s:
            await s.conn.subscribe(topic, sub_id=1, no_local=False)
            sent = [b"%d " % i + bytes(size) for i, size in enumerate(_sizes(300))]
            for payload in sent:
                a.conn.publish(topic, payload, 1, False)
            assert payloads(await s.take(300)) == sent


@pytest.mark.mosquitto
async def test_pubacks_leave_in_the_order_their_publishes_came(monkeypatch: pytest.MonkeyPatch) -> None:
    """MQTT 5 [MQTT-4.6.0-2]: PUBACKs in the order of their PUBLISHes, also when the reader's
    delayed ones meet one that paho sends for a PUBLISH it read itself (mosquitto numbers a fresh
    client's PUBLISHes 1, 2, 3, ...)."""
    import paho.mqtt.client as paho_client

    acked: list[int] = []
    send_puback = paho_client.Client._send_puback

    def recording(self: Any, mid: int) -> Any:
        acked.append(mid)
        return send_puback(self, mid)

    monkeypatch.setattr(paho_client.Client, "_send_puback", recording)
    with _own_world() as w:
        topic = w.topic("order")
        async with client(w, "a") as a, client(w, "s") as s:
            await s.conn.subscribe(topic, sub_id=1, no_local=False)
            for i, size in enumerate(_sizes(600)):
                a.conn.publish(topic, b"%d " % i + bytes(size), 1, False)
            assert len(await s.take(600)) == 600
            with anyio.fail_after(TIMEOUT):
                while len(acked) < 600:  # the last PUBACKs leave a turn or two of the loop later
                    await anyio.lowlevel.checkpoint()
    assert acked == list(range(1, 601))


async def test_wildcards(world: World) -> None:
    t = world.topic
    async with client(world, "a") as a, client(world, "s") as s:
        await s.conn.subscribe(t("x/+/z"), sub_id=1, no_local=False)
        await s.conn.subscribe(t("y/#"), sub_id=2, no_local=False)
        for topic in ("x/1/z", "x/1/2/z", "x/z", "y", "y/1/2", "w/1", "end"):
            a.conn.publish(t(topic), topic.encode(), 1, False)
        await s.conn.subscribe(t("end"), sub_id=3, no_local=False)
        a.conn.publish(t("end"), b"end", 1, False)
        got = await s.take_until(b"end")
        assert [(m.topic, m.subscription_ids) for m in got] == [
            (t("x/1/z"), (1,)), (t("y"), (2,)), (t("y/1/2"), (2,)), (t("end"), (3,))
        ]


async def test_subscription_ids_and_no_local(world: World) -> None:
    """One copy per matching subscription, each with its identifier; No Local skips own PUBLISHes
    for that subscription only."""
    t = world.topic
    async with client(world, "a") as a, client(world, "b") as b:
        await a.conn.subscribe(t("n/#"), sub_id=7, no_local=True)
        await a.conn.subscribe(t("n/+"), sub_id=8, no_local=False)
        a.conn.publish(t("n/1"), b"own", 1, False)
        assert [(m.payload, m.subscription_ids) for m in await a.take(1)] == [(b"own", (8,))]
        b.conn.publish(t("n/2"), b"peer", 1, False)
        got = await a.take(2)
        assert sorted(m.subscription_ids for m in got) == [(7,), (8,)]
        assert payloads(got) == [b"peer", b"peer"]
        await a.conn.unsubscribe(t("n/+"))
        b.conn.publish(t("n/3"), b"after", 1, False)
        assert [(m.payload, m.subscription_ids) for m in await a.take(1)] == [(b"after", (7,))]


async def test_subscribing_again_replaces_the_subscription(world: World) -> None:
    t = world.topic
    async with client(world, "a") as a, client(world, "b") as b:
        await a.conn.subscribe(t("r"), sub_id=1, no_local=False)
        await a.conn.subscribe(t("r"), sub_id=2, no_local=False)
        b.conn.publish(t("r"), b"x", 1, False)
        assert [(m.payload, m.subscription_ids) for m in await a.take(1)] == [(b"x", (2,))]


async def test_retained_messages(world: World) -> None:
    t = world.topic
    async with client(world, "a") as a:
        await a.publish_confirmed(t("ret/1"), b"one", retain=True)
        await a.publish_confirmed(t("ret/2"), b"two", retain=True)
        await a.publish_confirmed(t("ret/2"), b"", retain=True)  # clears it
        async with client(world, "s") as s:
            await s.conn.subscribe(t("ret/#"), sub_id=4, no_local=False)
            [retained] = await s.take(1)
            assert (retained.topic, retained.payload, retained.retain, retained.subscription_ids) == (
                t("ret/1"), b"one", True, (4,))
            a.conn.publish(t("ret/1"), b"live", 1, True)  # to a subscriber already there: RETAIN 0
            [live] = await s.take(1)
            assert (live.payload, live.retain) == (b"live", False)
        await a.publish_confirmed(t("ret/1"), b"", retain=True)


async def test_the_will_comes_on_a_cut_not_on_a_normal_close(world: World) -> None:
    t = world.topic
    async with client(world, "s") as s:
        await s.conn.subscribe(t("will/#"), sub_id=1, no_local=False)
        async with client(world, "quiet", will=Will(t("will/quiet"), b"quiet gone", qos=1)):
            pass
        async with client(world, "w", will=Will(t("will/w"), b"w gone", qos=1)) as w:
            world.cut(w.connector)
            assert isinstance(await w.wait_closed(), (ConnectionClosed, StopAsyncIteration))
            with pytest.raises(ConnectionClosed):
                w.conn.publish(t("x"), b"after the cut", 1, False)
            with pytest.raises(ConnectionClosed):
                await w.conn.subscribe(t("x"), sub_id=1, no_local=False)
        got = await s.take(1)
        assert [(m.topic, m.payload) for m in got] == [(t("will/w"), b"w gone")]


async def test_disconnect_ending_session_sends_no_will_and_forgets_the_session(world: World) -> None:
    t = world.topic
    async with client(world, "s") as s, client(world, "p") as p:
        await s.conn.subscribe(t("e/#"), sub_id=1, no_local=False)
        session: dict[str, Any] = {"clean_start": False, "session_expiry": 60}
        async with client(world, "e", will=Will(t("e/will"), b"will"), **session) as e:
            await e.conn.subscribe(t("e/data"), sub_id=1, no_local=False)
            await e.conn.disconnect_ending_session()
            assert isinstance(await e.wait_closed(), (ConnectionClosed, StopAsyncIteration))
        await p.publish_confirmed(t("e/data"), b"while away")
        async with client(world, "e", **session) as e:
            await e.conn.subscribe(t("e/data"), sub_id=2, no_local=False)
            await p.publish_confirmed(t("e/data"), b"marker")
            assert payloads(await e.take_until(b"marker")) == [b"marker"]  # nothing was kept
        assert payloads(await s.take_until(b"marker")) == [b"while away", b"marker"]  # and no will


@pytest.mark.parametrize("leave", ["close", "cut"])
async def test_the_session_keeps_qos1_messages_until_the_reconnect(world: World, leave: str) -> None:
    """Subscriptions and QoS 1 messages outlive the connection, and come in order on reconnecting."""
    t = world.topic
    session: dict[str, Any] = {"clean_start": False, "session_expiry": 60}
    async with client(world, "p") as p:
        async with client(world, "a", **session) as a:
            await a.conn.subscribe(t("s/#"), sub_id=5, no_local=False)
            await p.publish_confirmed(t("s/1"), b"before")
            assert payloads(await a.take(1)) == [b"before"]
            if leave == "cut":
                world.cut(a.connector)
                await a.wait_closed()
        p.conn.publish(t("s/1"), b"one", 1, False)
        p.conn.publish(t("s/2"), b"zero", 0, False)
        p.conn.publish(t("s/2"), b"two", 1, False)
        await p.publish_confirmed(t("s/1"), b"three")
        async with client(world, "a", **session) as a:
            p.conn.publish(t("s/1"), b"live", 1, False)
            got = await a.take_until(b"live")
            if leave == "cut" and got[0].payload == b"before":
                got = got[1:]  # its PUBACK was lost in the cut: sent again, first (at-least-once)
            # the QoS 0 one is dropped while the session has no connection (mosquitto's default),
            # but the broker may not have seen the connection go yet when it came
            got = [m for m in got if m.payload != b"zero"]
            assert payloads(got) == [b"one", b"two", b"three", b"live"]
            assert {m.subscription_ids for m in got} == {(5,)} and {m.qos for m in got} == {1}


WINDOW = 16  #: unconfirmed PUBLISHes the endpoint allows itself (endpoint/send.py)


async def test_order_per_publisher(world: World) -> None:
    """One publisher's PUBLISHes arrive in order, across topics and QoS levels, while it keeps at
    most WINDOW unconfirmed as the endpoint does. (Beyond paho's own window of 20 unconfirmed
    QoS 1 PUBLISHes, paho holds QoS 1 ones back and lets QoS 0 ones overtake them: the aiomqtt
    transport keeps call order only inside that window.)"""
    t = world.topic
    n = 600
    async with client(world, "p") as p, client(world, "s") as s:
        await s.conn.subscribe(t("o/#"), sub_id=1, no_local=False)
        sent: list[int] = []
        for i in range(n):  # two topics, both QoS
            if len(sent) >= WINDOW:
                await p.wait_for(lambda: len(p.confirmed) >= len(sent) - WINDOW + 1)
            sent.append(p.conn.publish(t(f"o/{i % 2}"), b"%d" % i, (i // 2) % 2, False))
        got = await s.take(n)
        assert payloads(got) == [b"%d" % i for i in range(n)]


async def test_publishes_of_every_size_arrive_whole_and_in_order(world: World) -> None:
    """Small PUBLISHes (the aiomqtt transport decodes them itself from the bytes read) and ones
    larger than its 64 KiB read (paho reads those, across several reads) interleaved, both QoS:
    each arrives whole, with its subscription identifier, in the order sent."""
    t = world.topic
    sizes = [0, 1, 300, 70_000, 5, 200_000, 65_536, 65_535, 40, 131_073, 2, 9_000] * 3
    async with client(world, "p") as p, client(world, "s") as s:
        await s.conn.subscribe(t("z/#"), sub_id=9, no_local=False)
        sent: list[bytes] = []
        for i, size in enumerate(sizes):
            if len(sent) >= WINDOW:
                await p.wait_for(lambda: len(p.confirmed) >= len(sent) - WINDOW + 1)
            payload = bytes([i % 251]) * size
            sent.append(payload)
            p.conn.publish(t(f"z/{i % 3}"), payload, i % 2, False)
        got = await s.take(len(sizes))
        assert payloads(got) == sent
        assert [m.topic for m in got] == [t(f"z/{i % 3}") for i in range(len(sizes))]
        assert [m.qos for m in got] == [i % 2 for i in range(len(sizes))]
        assert all(m.subscription_ids == (9,) for m in got)


async def test_maximum_packet_size(world: World) -> None:
    """A PUBLISH of exactly the announced maximum passes; a larger one is a protocol error: the
    broker closes the connection (the will is published) and never confirms it."""
    t = world.topic
    async with client(world, "s") as s:
        await s.conn.subscribe(t("big/#"), sub_id=1, no_local=False)
        async with client(world, "p", will=Will(t("big/will"), b"p gone")) as p:
            max_packet = p.conn.connack.max_packet
            topic = t("big/fits")
            size = max_packet - publish_packet_size(topic, b"", 1)
            while publish_packet_size(topic, bytes(size), 1) > max_packet:  # the length field grew
                size -= 1
            assert publish_packet_size(topic, bytes(size), 1) == max_packet
            await p.publish_confirmed(topic, bytes(size))
            assert [len(m.payload) for m in await s.take(1)] == [size]
            packet_id = p.conn.publish(t("big/over"), bytes(size + 100), 1, False)
            await p.wait_closed()
            assert packet_id not in p.confirmed
        assert [(m.topic, m.payload) for m in await s.take(1)] == [(t("big/will"), b"p gone")]


async def test_a_broker_restart_keeps_retained_messages_and_sessions(restartable_world: World) -> None:
    """Stopping drops every connection (publishing the wills) and refuses connects until the
    broker starts again; retained messages survive, and so do sessions, except those whose last
    CONNECT asked for a clean start (mosquitto 2.0 with persistence)."""
    world = restartable_world
    t = world.topic
    session: dict[str, Any] = {"session_expiry": 60}
    async with client(world, "p") as p:
        await p.publish_confirmed(t("ret"), b"retained", retain=True)
    async with (
        client(world, "kept", clean_start=False, **session) as kept,
        client(world, "clean", clean_start=True, **session) as clean,
        client(world, "w", will=Will(t("will"), b"w gone", retain=True)) as w,
    ):
        for c in (kept, clean):
            await c.conn.subscribe(t("data"), sub_id=1, no_local=False)
        await world.stop()
        for c in (kept, clean, w):
            assert isinstance(await c.wait_closed(), (ConnectionClosed, StopAsyncIteration))
        with pytest.raises(ConnectionClosed):
            async with client(world, "refused"):
                pass
        await world.start()
    async with client(world, "p") as p:
        await p.publish_confirmed(t("data"), b"after the restart")
        async with client(world, "kept", clean_start=False, **session) as kept:
            assert payloads(await kept.take(1)) == [b"after the restart"]
        async with client(world, "clean", clean_start=False, **session) as clean:
            await clean.conn.subscribe(t("marker"), sub_id=2, no_local=False)
            await p.publish_confirmed(t("marker"), b"marker")
            assert payloads(await clean.take_until(b"marker")) == [b"marker"]  # its session was gone
        async with client(world, "fresh") as fresh:
            await fresh.conn.subscribe(t("ret"), sub_id=1, no_local=False)
            await fresh.conn.subscribe(t("will"), sub_id=2, no_local=False)
            got = await fresh.take(2)
            assert sorted((m.topic, m.payload, m.retain) for m in got) == [
                (t("ret"), b"retained", True), (t("will"), b"w gone", True)]


# -- the Endpoint on top ---------------------------------------------------------------------------

FAST: dict[str, Any] = {"reconnect_delay": (0.01, 0.05)}


def endpoint(world: World, name: str, connector: Connector | None = None) -> Endpoint:
    return Endpoint(connector=connector or world.connector(), namespace=world.ns, name=name, **FAST)


async def next_event(events: AsyncIterator[StatusEvent], *kinds: type) -> StatusEvent:
    """The next status event of one of ``kinds`` (others are skipped)."""
    with anyio.fail_after(TIMEOUT):
        async for event in events:
            if isinstance(event, kinds):
                return event
    raise AssertionError("status stream ended")


async def take(sub: Any, n: int) -> list[Any]:
    out = []
    with anyio.fail_after(TIMEOUT):
        async for msg in sub:
            out.append(msg)
            if len(out) == n:
                break
    return out


async def test_endpoint_pubsub_by_prefix(world: World) -> None:
    async with endpoint(world, "a") as a, endpoint(world, "b") as b, b.subscribe("/x") as sub:
        assert await a.await_peer(b.id, TIMEOUT)
        for topic in ("/x", "/xy", "/y/x", "/x/1/2", "/x"):
            await a.publish(topic, topic)
        got = await take(sub, 3)  # in order per topic (the guarantee); topics may interleave
        assert sorted((m.topic, m.data, m.sender) for m in got) == [
            ("/x", "/x", a.id), ("/x", "/x", a.id), ("/x/1/2", "/x/1/2", a.id)]


async def test_endpoint_own_messages_only_with_local(world: World) -> None:
    async with (
        endpoint(world, "a") as a,
        endpoint(world, "b") as b,
        a.subscribe("/o", local=True) as mine,
        a.subscribe("/o") as others_only,
    ):
        assert await b.await_peer(a.id, TIMEOUT)
        await a.publish("/o/1", "own")
        await b.publish("/o/2", "peer")
        assert sorted((m.data, m.sender) for m in await take(mine, 2)) == sorted([("own", a.id), ("peer", b.id)])
        assert [(m.data, m.sender) for m in await take(others_only, 1)] == [("peer", b.id)]
        await b.publish("/o/3", "marker")
        assert [m.data for m in await take(others_only, 1)] == ["marker"]  # never "own"


async def test_endpoint_peers_lost_on_a_cut_and_removed_on_close(world: World) -> None:
    b_connector = world.connector()
    async with endpoint(world, "a") as a, a.status() as events:
        async with endpoint(world, "b", b_connector) as b:
            added = await next_event(events, PeerAdded, PeerLost, PeerRemoved)
            assert isinstance(added, PeerAdded) and added.peer.id == b.id
            world.cut(b_connector)
            lost = await next_event(events, PeerAdded, PeerLost, PeerRemoved)
            assert isinstance(lost, PeerLost) and lost.peer.id == b.id  # the will
            again = await next_event(events, PeerAdded, PeerLost, PeerRemoved)
            assert isinstance(again, PeerAdded) and again.peer.id == b.id  # b reconnected
        removed = await next_event(events, PeerAdded, PeerLost, PeerRemoved)
        assert isinstance(removed, PeerRemoved) and removed.peer.id == b.id
        assert a.peers() == []


async def test_endpoint_reconnects_after_a_cut_and_keeps_its_subscription(world: World) -> None:
    b_connector = world.connector()
    async with (
        endpoint(world, "a") as a,
        endpoint(world, "b", b_connector) as b,
        b.subscribe("/r") as sub,
        b.status() as events,
    ):
        assert await a.await_peer(b.id, TIMEOUT)
        await a.publish("/r", 1)
        assert [m.data for m in await take(sub, 1)] == [1]
        world.cut(b_connector)
        await a.publish("/r", 2)  # while b is away or back: its session keeps it either way
        assert isinstance(await next_event(events, ConnectionLost, ConnectionRestored), ConnectionLost)
        assert isinstance(await next_event(events, ConnectionLost, ConnectionRestored), ConnectionRestored)
        assert b.connected and b.statistics().reconnects == 1
        await a.publish("/r", 3)
        got = [m.data for m in await take(sub, 2)]
        if got[0] == 1:  # its PUBACK was lost in the cut: sent again, first (at-least-once)
            got = got[1:] + [m.data for m in await take(sub, 1)]
        assert got == [2, 3]
        async with a.subscribe("/r") as a_sub:  # and b's publishes reach a
            await b.publish("/r/back", "after a subscribed")
            assert [m.data for m in await take(a_sub, 1)] == ["after a subscribed"]


async def test_endpoint_rides_out_a_broker_restart(restartable_world: World) -> None:
    world = restartable_world
    async with (
        endpoint(world, "a") as a,
        endpoint(world, "b") as b,
        b.subscribe("/s") as sub,
        a.status() as a_events,
        b.status() as b_events,
    ):
        assert await a.await_peer(b.id, TIMEOUT)
        await world.stop()
        for events in (a_events, b_events):
            assert isinstance(await next_event(events, ConnectionLost, ConnectionRestored), ConnectionLost)
        await a.publish("/s", "queued during the outage")
        await world.start()
        for events in (a_events, b_events):
            assert isinstance(await next_event(events, ConnectionLost, ConnectionRestored), ConnectionRestored)
        await a.publish("/s", "after")
        assert [m.data for m in await take(sub, 2)] == ["queued during the outage", "after"]


@pytest.mark.mosquitto
@pytest.mark.parametrize("operation", ["subscribe", "unsubscribe"])
async def test_a_subscribe_waiting_for_its_answer_ends_when_the_connection_drops(
        broker: EmbeddedBroker, operation: str) -> None:
    """aiomqtt waits for a SUBACK or UNSUBACK up to its timeout (10 s) even after the connection is
    gone; an endpoint reconnecting over a flaky link subscribes every filter first, so a cut then
    cost it 10 s without a connection. The transport raises ConnectionClosed once the cut is seen."""
    relay = CuttableRelay(broker.port)
    try:
        connector = MQTTConnector(BrokerURL.parse(f"mqtt://127.0.0.1:{relay.port}"))
        answer = 0x90 if operation == "subscribe" else 0xB0  # SUBACK, UNSUBACK
        async with connector.connect(ConnectOptions("c" + uuid.uuid4().hex[:10], clean_start=True),
                                     lambda i: None, lambda i, r: None) as conn:
            if operation == "unsubscribe":
                await conn.subscribe("x/#", sub_id=1, no_local=False)
            relay.drop = lambda packet: packet[0] == answer  # the broker's answer never comes
            ended: list[BaseException] = []

            async def wait_for_the_answer() -> None:
                try:
                    if operation == "subscribe":
                        await conn.subscribe("x/#", sub_id=1, no_local=False)
                    else:
                        await conn.unsubscribe("x/#")
                except ConnectionClosed as exc:
                    ended.append(exc)

            with anyio.move_on_after(8) as waiting:  # (aiomqtt alone: 10 s)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(wait_for_the_answer)
                    while not relay.dropped:
                        await anyio.sleep(0.01)
                    relay.cut()
    except ConnectionClosed:
        pass  # leaving the context after the cut may report it
    finally:
        relay.close()
    assert not waiting.cancelled_caught
    assert len(ended) == 1


@pytest.mark.parametrize("leave", ["close", "cut"])
async def test_what_was_received_stays_readable_after_leaving_connect(world: World, leave: str) -> None:
    """A transport may acknowledge a QoS 1 PUBLISH on receipt (paho does), so the broker never sends
    it again: what ``messages()`` holds must stay readable after the connection ended and after
    ``connect`` was left, normally or after a cut (base.py), then the stream ends."""
    t = world.topic
    sc = world.connector()
    got: list[Received] = []
    async with client(world, "p") as p:
        try:
            async with sc.connect(ConnectOptions(world.client_id("s"), clean_start=True),
                                  lambda i: None, lambda i, r: None) as s:
                await s.subscribe(t("x"), sub_id=7, no_local=False)
                messages = s.messages()
                for i in range(50):
                    p.conn.publish(t("x"), str(i).encode(), 1, False)
                await p.publish_confirmed(t("x"), b"end")
                with anyio.fail_after(TIMEOUT):
                    got.append(await messages.__anext__())
                    while _held(s) < 50:  # the transport holds the rest (received, acknowledged)
                        await anyio.sleep(0.01)
                if leave == "cut":
                    world.cut(sc)
        except ConnectionClosed:
            assert leave == "cut"  # leaving after a cut may report it
    with anyio.fail_after(TIMEOUT):
        with pytest.raises(ConnectionClosed):
            async for message in messages:
                got.append(message)
            raise ConnectionClosed("(the stream ended)")
    assert payloads(got) == [str(i).encode() for i in range(50)] + [b"end"]


def _held(connection: Any) -> int:
    """PUBLISHes the transport received and nobody took yet (private: each transport's buffer)."""
    inbox = getattr(connection, "_inbox", None)
    return len(inbox) if inbox is not None else int(connection._client._queue.qsize())


@pytest.mark.mosquitto
async def test_a_subscribe_cancelled_while_waiting_for_its_answer_leaves_nothing_behind(broker: EmbeddedBroker) -> None:
    """The caller gives up on a SUBSCRIBE whose SUBACK does not come: aiomqtt's wait for it is
    cancelled with it (no pending call left, no task), and the connection still works."""
    relay = CuttableRelay(broker.port)
    try:
        connector = MQTTConnector(BrokerURL.parse(f"mqtt://127.0.0.1:{relay.port}"))
        async with connector.connect(ConnectOptions("c" + uuid.uuid4().hex[:10], clean_start=True),
                                     lambda i: None, lambda i, r: None) as conn:
            relay.drop = lambda packet: packet[0] == 0x90 and relay.dropped == 0  # the first SUBACK only
            with anyio.move_on_after(0.5) as waiting:
                await conn.subscribe("x/#", sub_id=1, no_local=False)
            assert waiting.cancelled_caught and relay.dropped == 1
            pending = conn._client._pending_subscribes
            with anyio.fail_after(5):  # (left to itself, aiomqtt's wait ends after 10 s)
                while pending:  # the cancelled wait leaves on its next turn
                    await anyio.lowlevel.checkpoint()
            with anyio.fail_after(TIMEOUT):
                await conn.subscribe("y/#", sub_id=2, no_local=False)  # answered
    finally:
        relay.close()


@pytest.mark.mosquitto
async def test_the_stream_ends_after_connect_even_when_aiomqtt_could_not_disconnect(
        broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """aiomqtt's exit waits for its DISCONNECT to leave (10 s, when the socket is full) and then
    raises without marking the connection gone; what the transport received must still end, or the
    endpoint's receiver would wait on it for ever and never read the next connection's."""
    import aiomqtt

    async def stuck_exit(self: Any, *exc: Any) -> None:
        raise aiomqtt.MqttError("Operation timed out")

    connector = MQTTConnector(BrokerURL.parse(broker.url))
    monkeypatch.setattr(aiomqtt.Client, "__aexit__", stuck_exit)
    try:
        with pytest.raises(ConnectionClosed):
            async with connector.connect(ConnectOptions("c" + uuid.uuid4().hex[:10], clean_start=True),
                                         lambda i: None, lambda i, r: None) as conn:
                messages = conn.messages()
        with anyio.fail_after(TIMEOUT), pytest.raises(ConnectionClosed):
            await messages.__anext__()
    finally:
        conn._paho._sock_close()  # (what the stuck exit left open)


async def test_the_callers_own_errors_leave_connect_as_they_are(world: World) -> None:
    """A TimeoutError (an OSError) or any error raised in the caller's block is not the transport's:
    it leaves ``connect`` unchanged, not as ConnectionClosed (which hid a timed-out test once)."""
    connector = world.connector()
    for error in (TimeoutError("the caller's deadline"), OSError("the caller's file")):
        with pytest.raises(type(error)) as raised:
            async with connector.connect(ConnectOptions(world.client_id("e"), clean_start=True),
                                         lambda i: None, lambda i, r: None):
                raise error
        assert raised.value is error
