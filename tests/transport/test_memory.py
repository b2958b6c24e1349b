"""The in-memory transport's own API (what the conformance suite cannot ask of mosquitto): cutting
one client, a stopped broker refusing connects, takeover, session expiry on anyio's clock, and
the endpoint in simulated time (trio's MockClock)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import trio.testing

from broker_mqtt import ConnectionLost, ConnectionRestored, Endpoint
from broker_mqtt.transport import MemoryBroker, MemoryConnector
from broker_mqtt.transport.base import ConnectionClosed, ConnectOptions, Received, Will
from broker_mqtt.transport.memory import MemoryConnection

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}


@asynccontextmanager
async def connected(
    connector: MemoryConnector, client_id: str, *, confirmed: Callable[[int], None] = lambda i: None, **kw: Any
) -> AsyncIterator[MemoryConnection]:
    async with connector.connect(ConnectOptions(client_id, **kw), confirmed, lambda i, r: None) as conn:
        yield conn


async def collect(conn: MemoryConnection) -> tuple[list[Received], BaseException | None]:
    """Everything buffered for ``conn`` once its connection ended, and how messages() ended."""
    out: list[Received] = []
    try:
        async for message in conn.messages():
            out.append(message)
    except ConnectionClosed as exc:
        return out, exc
    return out, None


async def test_publish_confirms_before_returning() -> None:
    confirmed: list[int] = []
    async with connected(MemoryConnector(), "a", confirmed=confirmed.append) as a:
        ids = [a.publish("t", b"x", qos, False) for qos in (0, 1, 1)]
        assert ids == confirmed == [1, 2, 3]


async def test_cut_one_client_buffered_messages_come_first_then_connection_closed() -> None:
    broker = MemoryBroker()
    net = MemoryConnector(broker, name="net")
    async with connected(net, "a") as a, connected(net, "b", will=Will("w", b"b gone")) as b:
        await a.subscribe("#", sub_id=1, no_local=True)
        await b.subscribe("x", sub_id=1, no_local=False)
        a.publish("x", b"buffered", 1, False)
        assert net.cut("b") == 1 and net.cut("nobody") == 0
        got, how = await collect(b)
        assert [m.payload for m in got] == [b"buffered"] and isinstance(how, ConnectionClosed)
        assert "memory://net: the network connection was cut" in str(how)
        with pytest.raises(ConnectionClosed):
            b.publish("x", b"", 0, False)
        with pytest.raises(ConnectionClosed):
            await b.unsubscribe("x")
        with anyio.fail_after(1):
            message = await a.messages().__anext__()
        assert (message.topic, message.payload) == ("w", b"b gone")  # the will
        assert not a.connack.max_packet < broker.max_packet_size


async def test_a_stopped_broker_refuses_connects_and_every_connector_sees_it() -> None:
    broker = MemoryBroker()
    one, two = MemoryConnector(broker), MemoryConnector(broker)
    async with connected(one, "a") as a:
        two.stop()
        assert not one.running
        _, how = await collect(a)
        assert "the broker stopped" in str(how)
        with pytest.raises(ConnectionClosed, match="connection refused"):
            async with connected(one, "b"):
                pass
    one.start()
    async with connected(two, "b") as b:
        assert b.connack.subscription_ids_available


async def test_takeover_closes_the_older_connection() -> None:
    net = MemoryConnector()
    async with connected(net, "a", session_expiry=60) as old:
        async with connected(net, "a", session_expiry=60):
            _, how = await collect(old)
            assert "taken over" in str(how)


async def test_a_subscription_id_the_broker_does_not_offer_is_a_protocol_error() -> None:
    net = MemoryConnector(MemoryBroker(subscription_identifiers=False))
    async with connected(net, "a") as a:
        assert not a.connack.subscription_ids_available
        with pytest.raises(ConnectionClosed, match="protocol error"):
            await a.subscribe("x", sub_id=3, no_local=False)


async def test_sessions_expire_on_anyios_clock() -> None:
    broker = MemoryBroker()
    net = MemoryConnector(broker)
    async with connected(net, "a", session_expiry=60) as a:
        await a.subscribe("x", sub_id=1, no_local=False)
    await anyio.sleep(59)
    async with connected(net, "b"):  # any call through the broker moves its clock
        pass
    assert broker.has_session("a")
    await anyio.sleep(2)
    async with connected(net, "b"):
        pass
    assert not broker.has_session("a")


async def next_of(events: AsyncIterator[object], kind: type) -> object:
    async for event in events:
        if isinstance(event, kind):
            return event
    raise AssertionError("status stream ended")


async def test_endpoints_in_simulated_time() -> None:
    """An hour of outage and reconnect backoff runs in no time on trio's MockClock."""
    broker = MemoryBroker()
    a_net, b_net = MemoryConnector(broker), MemoryConnector(broker)
    async with (
        Endpoint(connector=a_net, name="a") as a,
        Endpoint(connector=b_net, name="b", session_expiry=7200) as b,
        b.subscribe("/t") as sub,
        b.status() as b_events,
    ):
        assert await a.await_peer(b.id, 1)
        start = anyio.current_time()
        b_net.stop()
        await next_of(b_events, ConnectionLost)
        await a.publish("/t", "while b was away")
        await anyio.sleep(3600)
        b_net.start()
        await next_of(b_events, ConnectionRestored)
        with anyio.fail_after(60):
            assert (await sub.get()).data == "while b was away"
        assert await a.await_peer(b.id, 60) and await b.await_peer(a.id, 60)
        assert b.statistics().reconnects == 1 and anyio.current_time() - start >= 3600
