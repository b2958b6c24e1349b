"""What a connection received before it failed reaches the subscribers: at-least-once across a cut.

A transport acknowledges a QoS 1 PUBLISH to the broker when it receives it (paho sends PUBACK on
receipt), so the broker never sends it again. When a slow subscriber held the endpoint's receiver up
and the connection failed under a publish, the endpoint used to drop every PUBLISH the connection
had received and not yet dispatched: thousands of messages lost, reported nowhere. Now they are
dispatched after the reconnect, before the new connection's, and the reconnect does not wait for
the slow subscriber (its application may be waiting for a send that needs the connection), also
when the endpoint has nothing to send (the loss would otherwise be seen only once the subscriber
read everything: past the session's expiry, the session and what it held would be gone).
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import trio.testing

from broker_mqtt import ConnectionRestored, EmbeddedBroker, Endpoint
from broker_mqtt.endpoint.receive import DRAIN_BURST
from broker_mqtt.transport.base import ConnectOptions
from broker_mqtt.transport.memory import MemoryConnection, MemoryConnector
from tests.transport.cuttable import CuttableRelay

N = 300  # PUBLISHes (one message each) held for a subscriber that does not read


async def _publish_each(pub: Endpoint, values: range) -> None:
    for i in values:  # one PUBLISH each: flushed one by one
        await pub.publish("/s", i)
        assert await pub.flush(10)


async def _restored(events: Any) -> None:
    async for event in events:
        if isinstance(event, ConnectionRestored):
            return


async def _read(sub: Any, n: int) -> list[Any]:
    return [(await sub.__anext__()).data for _ in range(n)]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})])
async def test_publishes_received_before_a_cut_reach_a_slow_subscriber_and_sends_go_on() -> None:
    net = MemoryConnector()
    async with Endpoint(connector=MemoryConnector(net.broker), client_id="slow", name="slow") as sub_ep, \
            Endpoint(connector=net, name="pub") as pub:
        async with sub_ep.subscribe("/s", buffer=2) as sub, sub_ep.status() as events, \
                pub.subscribe("/back") as back:
            await _publish_each(pub, range(N))  # the memory broker hands each to the connection at once
            assert sub_ep.statistics().publishes_received < N  # the receiver waits for the subscriber
            connector = sub_ep._connector
            assert isinstance(connector, MemoryConnector)
            connector.cut("slow")
            with anyio.fail_after(30):
                # the next publish finds the connection gone; the endpoint reconnects and sends it
                # although the subscriber still holds the receiver up
                await sub_ep.publish("/back", "after the cut")
                await _restored(events)
                assert (await back.__anext__()).data == "after the cut"
                assert sub_ep.statistics().delivered < N  # (the subscriber was not read yet)
                await _publish_each(pub, range(N, N + 10))  # through the new connection
                got = await _read(sub, N + 10)
            assert got == list(range(N + 10))  # every one, once, in order: the new after the old
            assert sub_ep.statistics().missed == 0


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})])
async def test_an_idle_endpoint_reconnects_at_once_while_a_subscriber_is_stuck() -> None:
    net = MemoryConnector()
    async with Endpoint(connector=MemoryConnector(net.broker), client_id="stuck", name="stuck") as sub_ep, \
            Endpoint(connector=net, name="pub") as pub:
        async with sub_ep.subscribe("/s", buffer=2) as sub, sub_ep.status() as events:
            await _publish_each(pub, range(N))
            lost = weakref.ref(sub_ep._sender.conn)  # type: ignore[arg-type]
            connector = sub_ep._connector
            assert isinstance(connector, MemoryConnector)
            connector.cut("stuck")
            with anyio.fail_after(30):  # (simulated time) nothing is sent, nobody reads
                await _restored(events)
            assert sub_ep.statistics().delivered < N  # the subscriber was not read yet
            gc.collect()
            assert lost() is None  # the lost connection is not held for what it received
            with anyio.fail_after(30):  # the next connection, lost too while the subscriber is stuck
                await _publish_each(pub, range(N, N + 10))
                connector.cut("stuck")
                await _restored(events)
                assert sub_ep.statistics().reconnects == 2
                await _publish_each(pub, range(N + 10, N + 20))  # through the third connection
                got = await _read(sub, N + 20)
            assert got == list(range(N + 20))  # every one, once, in order: the new after the old
            assert sub_ep.statistics().missed == 0


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})])
async def test_a_stream_read_apart_while_a_subscriber_was_full_is_read_in_line_again() -> None:
    """While a subscriber is full, the connection's stream is read by a task of its own; once
    nothing waits, the receiver reads it again itself (a hop less per PUBLISH), losing nothing."""
    net = MemoryConnector()
    async with Endpoint(connector=MemoryConnector(net.broker), client_id="sub", name="sub") as sub_ep, \
            Endpoint(connector=net, name="pub") as pub:
        async with sub_ep.subscribe("/s", buffer=2) as sub:
            await _publish_each(pub, range(20))
            head = sub_ep._receiver._incoming[0]
            assert head.reader  # the subscriber is full: read apart
            with anyio.fail_after(30):
                got = await _read(sub, 20)
                await _publish_each(pub, range(20, 30))  # (the subscriber is full again after two)
                got += await _read(sub, 10)
                await _publish_each(pub, range(30, 31))  # comes while nothing waits: handed back
                got += await _read(sub, 1)
                await _publish_each(pub, range(31, 33))  # read in line
                got += await _read(sub, 2)
            assert got == list(range(33))
            assert sub_ep._receiver._incoming[0] is head and not head.reader  # read in line again
            assert sub_ep.statistics().missed == 0


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})])
async def test_a_backlog_held_in_memory_is_dispatched_in_bursts_that_let_other_tasks_run() -> None:
    """What waited in memory for a stuck subscriber is dispatched when it leaves (to nobody: no
    subscriber waits, so nothing else yields), in bursts, as the transport reads: the sender, the
    keepalive and a close get their turns."""
    net = MemoryConnector()
    async with Endpoint(connector=MemoryConnector(net.broker), client_id="stuck", name="stuck") as sub_ep, \
            Endpoint(connector=net, name="pub") as pub:
        leaving = sub_ep.subscribe("/s", buffer=2)
        await leaving.__aenter__()
        await _publish_each(pub, range(N))
        stats, bursts, done = sub_ep.statistics, [], False

        async def watch() -> None:
            last = stats().publishes_received
            while not done:
                await anyio.lowlevel.checkpoint()
                bursts.append(stats().publishes_received - last)
                last = stats().publishes_received

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await leaving.__aexit__(None, None, None)  # the stuck subscriber leaves
            with anyio.fail_after(30):
                while stats().publishes_received < N:
                    await anyio.lowlevel.checkpoint()
            done = True
        # (trio runs each runnable task once per batch, in random order: the dispatcher can have
        # two turns between two of the watcher's)
        assert sum(bursts) >= N - 2 * DRAIN_BURST and max(bursts) <= 2 * DRAIN_BURST + 2


class _DropsWhileSubscribing(MemoryConnector):
    """Its second connection drops at its first SUBSCRIBE: after CONNACK, with the session's backlog
    already received (and acknowledged), before the endpoint has subscribed anything."""

    connects = 0
    held = dropped = 0

    @asynccontextmanager
    async def connect(self, options: ConnectOptions, on_confirmed: Any, on_rejected: Any,
                      ) -> AsyncIterator[MemoryConnection]:
        self.connects += 1
        async with super().connect(options, on_confirmed, on_rejected) as connection:
            if self.connects == 2:
                self.held = len(connection._inbox)
                connection.subscribe = self._dropping(connection)  # type: ignore[method-assign]
            yield connection

    def _dropping(self, connection: MemoryConnection) -> Any:
        async def subscribe(*args: Any, **kwargs: Any) -> None:
            self.dropped += 1
            connection._drop("cut while subscribing")
            await MemoryConnection.subscribe(connection, *args, **kwargs)
        return subscribe


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})])
async def test_the_backlog_a_resumed_session_delivered_is_kept_when_the_link_drops_while_subscribing() -> None:
    net = MemoryConnector()
    link = _DropsWhileSubscribing(net.broker)
    async with Endpoint(connector=link, client_id="sub", name="sub") as sub_ep, \
            Endpoint(connector=net, name="pub") as pub:
        async with sub_ep.subscribe("/s") as sub:
            link.cut("sub")  # the session keeps what comes meanwhile; the reconnect gets it at once
            await _publish_each(pub, range(20))
            with anyio.fail_after(30):
                got = await _read(sub, 20)
            assert link.dropped == 1 and link.held == 20  # (the second connection held all 20)
            assert got == list(range(20))
            assert sub_ep.statistics().missed == 0


@pytest.mark.anyio
@pytest.mark.mosquitto
@pytest.mark.parametrize("sending", [True, False], ids=["a-publish-finds-the-link-gone", "idle-and-stuck"])
async def test_publishes_a_real_connection_received_before_a_cut_are_not_lost(sending: bool) -> None:
    """Sending, the endpoint sees the cut when a publish fails; idle, with its subscriber stuck, when
    the transport ends the connection's stream."""
    with EmbeddedBroker() as broker:
        relay = CuttableRelay(broker.port)
        try:
            fast = {"reconnect_delay": (0.02, 0.2)}
            async with Endpoint(f"mqtt://127.0.0.1:{relay.port}", name="slow", **fast) as sub_ep, \
                    Endpoint(broker, name="pub", **fast) as pub:
                async with sub_ep.subscribe("/s", buffer=2) as sub, sub_ep.status() as events:
                    with anyio.fail_after(60):
                        await _publish_each(pub, range(N))
                        # wait until the endpoint holds (received, acknowledged) most of them
                        while _held(sub_ep) < N // 2:
                            await anyio.sleep(0.01)
                        held = _held(sub_ep)
                        relay.cut()
                        while sending and sub_ep.statistics().reconnects == 0:  # a publish finds the link gone
                            await sub_ep.publish("/other", 0)
                            await anyio.sleep(0.01)
                        await _restored(events)  # (idle: nothing is sent, nobody reads)
                        assert sub_ep.statistics().delivered < N
                        await _publish_each(pub, range(N, N + 10))
                        got = await _read(sub, N + 10)
            assert held >= N // 2
            assert got == list(range(N + 10))
            assert sub_ep.statistics().missed == 0
        finally:
            relay.close()


def _held(ep: Endpoint) -> int:
    """PUBLISHes the endpoint received and has not dispatched (private): read from the transport,
    and still in aiomqtt's queue."""
    conn = ep._sender.conn
    in_transport = 0 if conn is None else int(conn._client._queue.qsize())  # type: ignore[attr-defined]
    return in_transport + sum(len(incoming.received) for incoming in ep._receiver._incoming)
