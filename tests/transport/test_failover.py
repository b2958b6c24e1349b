"""Several brokers for one endpoint (FailoverConnector): the next broker after each failure, with
real mosquittos for the endpoint's part."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import pytest

from broker_mqtt import ConnectionRestored, EmbeddedBroker, Endpoint
from broker_mqtt.errors import UsageError
from broker_mqtt.transport.base import Connection, ConnectionClosed, ConnectOptions
from broker_mqtt.transport.broker_url import parse_broker_urls
from broker_mqtt.transport.failover import FailoverConnector

pytestmark = pytest.mark.anyio

FAST = {"reconnect_delay": (0.02, 0.2)}


class _Down:
    """A connector whose broker never answers."""

    def __init__(self, name: str) -> None:
        self.name, self.attempts = name, 0

    def __str__(self) -> str:
        return self.name

    @asynccontextmanager
    async def connect(self, options: ConnectOptions, on_confirmed: Callable[[int], None],
                      on_rejected: Callable[[int, str], None]) -> AsyncIterator[Connection]:
        self.attempts += 1
        raise ConnectionClosed(f"{self.name} is down")
        yield  # pragma: no cover


async def test_each_failed_attempt_moves_to_the_next_broker() -> None:
    a, b, c = _Down("a"), _Down("b"), _Down("c")
    failover = FailoverConnector([a, b, c])
    for _ in range(4):
        with pytest.raises(ConnectionClosed):
            async with failover.connect(ConnectOptions("x"), lambda _: None, lambda *_: None):
                pass  # pragma: no cover
    assert (a.attempts, b.attempts, c.attempts) == (2, 1, 1)
    assert failover.failovers == 4 and failover.current == 1
    assert str(failover) == "b (of a, b, c)"


def test_broker_lists_parse_from_a_string_or_a_list() -> None:
    assert [u.port for u in parse_broker_urls("mqtt://h:1, mqtt://h:2,")] == [1, 2]
    assert [u.host for u in parse_broker_urls(["mqtt://a", "mqtts://b"])] == ["a", "b"]
    with pytest.raises(UsageError, match="no broker"):
        parse_broker_urls(" , ")
    with pytest.raises(UsageError, match="mqtt://"):
        parse_broker_urls("mqtt://a:1,http://b")
    with pytest.raises(UsageError):
        FailoverConnector([])


@pytest.mark.mosquitto
async def test_an_endpoint_starts_on_the_broker_that_answers() -> None:
    with EmbeddedBroker() as up:
        dead = EmbeddedBroker()  # never started: its port refuses
        async with Endpoint(f"{dead.url},{up.url}", **FAST) as ep, Endpoint(up) as other:
            async with other.subscribe("/f") as sub:
                with anyio.fail_after(20):
                    await ep.publish("/f", "hello")
                    msg = await sub.__anext__()
            assert msg.data == "hello"
            assert ep.statistics().reconnects == 0


@pytest.mark.mosquitto
async def test_an_endpoint_moves_to_the_next_broker_when_its_broker_dies() -> None:
    with EmbeddedBroker() as first, EmbeddedBroker() as second:
        async with Endpoint([first.url, second.url], **FAST) as ep, Endpoint(second) as watcher:
            async with ep.subscribe("/moved") as sub, ep.status() as events, watcher.subscribe("/out") as out:
                first.kill()
                with anyio.fail_after(30):
                    async for event in events:
                        if isinstance(event, ConnectionRestored):
                            break
                    # restored after the subscriptions were made again on the new broker
                    await watcher.publish("/moved", "via second")
                    msg = await sub.__anext__()
                    await ep.publish("/out", "from ep")
                    got = await out.__anext__()
            assert msg.data == "via second" and got.data == "from ep"
            assert ep.statistics().reconnects >= 1


def test_spark_options_take_a_broker_list_and_credentials_for_each() -> None:
    from broker_mqtt.spark.options import Connection

    conn = Connection.parse({"broker": "mqtt://a:1,mqtt://b:2", "username": "u@h", "password": "p w"},
                            default_name="x")
    assert [(u.host, u.port, u.username, u.password) for u in parse_broker_urls(conn.broker)] == [
        ("a", 1, "u@h", "p w"), ("b", 2, "u@h", "p w")]
    assert "p w" not in repr(conn)
    with pytest.raises(UsageError, match="TLS"):
        Connection.parse({"broker": "mqtts://a,mqtt://b"}, default_name="x")
