"""The transport survives broker restarts and outages (each test runs its own mosquitto)."""

from __future__ import annotations

import anyio
import pytest

from broker_mqtt import ConnectionLost, ConnectionRestored, EmbeddedBroker, Endpoint, PublishQueueFull

pytestmark = [pytest.mark.anyio, pytest.mark.mosquitto]

FAST = {"reconnect_delay": (0.02, 0.3)}


async def test_broker_restart_loses_no_qos1_message() -> None:
    """Publisher and subscriber keep running while the broker restarts: every message arrives.

    QoS 1 is at-least-once: a batch whose PUBACK was lost in the restart is sent again, so a
    message may arrive twice; none may be missing.
    """
    n = 3000
    with EmbeddedBroker() as broker:
        async with Endpoint(broker, **FAST) as pub, Endpoint(broker, **FAST) as sub_ep:
            async with sub_ep.subscribe("/r") as sub, pub.status() as pub_events:
                received: set[int] = set()
                done = anyio.Event()

                async def consume() -> None:
                    async for msg in sub:
                        received.add(msg.data)
                        if len(received) == n:
                            done.set()
                            return

                async def produce() -> None:
                    for i in range(n):
                        await pub.publish("/r", i)
                        if i % 10 == 0:
                            await anyio.sleep(0.001)
                        if i == n // 2:
                            await broker.arestart()  # spawned from this thread: a worker thread's end would kill it

                with anyio.fail_after(60):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(consume)
                        tg.start_soon(produce)
                        await done.wait()
                assert received == set(range(n))
                kinds = []
                with anyio.fail_after(10):  # both were reported before the last message came
                    async for event in pub_events:
                        if isinstance(event, (ConnectionLost, ConnectionRestored)):
                            kinds.append(type(event))
                        if ConnectionRestored in kinds:
                            break
                assert kinds == [ConnectionLost, ConnectionRestored]
                assert pub.statistics().reconnects >= 1


async def test_publishes_during_an_outage_are_queued_then_sent() -> None:
    with EmbeddedBroker() as broker:
        async with Endpoint(broker, **FAST) as pub, Endpoint(broker, **FAST) as sub_ep:
            async with sub_ep.subscribe("/q") as sub:
                await anyio.to_thread.run_sync(broker.stop)
                with anyio.fail_after(30):
                    while pub.connected:
                        await anyio.sleep(0.01)
                for i in range(200):
                    await pub.publish("/q", i)
                assert pub.statistics().pending >= 200
                await broker.astart()
                got: list[int] = []
                with anyio.fail_after(20):
                    async for msg in sub:
                        got.append(msg.data)
                        if len(got) == 200:
                            break
                assert got == list(range(200))


async def test_queue_bound_during_an_outage_fails_loudly_and_keeps_what_it_took() -> None:
    with EmbeddedBroker() as broker:
        async with Endpoint(broker, max_pending_messages=50, **FAST) as pub, Endpoint(broker, **FAST) as sub_ep:
            async with sub_ep.subscribe("/b") as sub:
                await anyio.to_thread.run_sync(broker.stop)
                with anyio.fail_after(30):
                    while pub.connected:
                        await anyio.sleep(0.01)
                accepted = []
                with pytest.raises(PublishQueueFull):
                    for i in range(100):
                        await pub.publish("/b", i)
                        accepted.append(i)
                assert 0 < len(accepted) <= 50
                await broker.astart()
                got: list[int] = []
                with anyio.fail_after(20):
                    async for msg in sub:
                        got.append(msg.data)
                        if len(got) == len(accepted):
                            break
                assert got == accepted
