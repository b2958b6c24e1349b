"""A hung broker (SIGSTOP: its sockets stay open, nothing answers) is noticed through the keepalive:
PINGREQ unanswered, the connection is dropped and the endpoint reconnects (here: to a second broker)."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from broker_mqtt import ConnectionLost, EmbeddedBroker, Endpoint

pytestmark = [pytest.mark.anyio, pytest.mark.mosquitto]


async def test_a_hung_broker_is_left_after_the_keepalive(namespace: str) -> None:
    with EmbeddedBroker() as hung, EmbeddedBroker() as spare:
        async with Endpoint([hung.url, spare.url], namespace=namespace, keepalive=2) as ep, ep.status() as status:
            assert ep.connected
            os.kill(hung.pid, signal.SIGSTOP)  # type: ignore[arg-type]
            try:
                # the event, not ep.connected: the endpoint is on the spare broker a few ms after the drop,
                # so a poll of ep.connected could miss the moment it was down (it did, once, in CI)
                with anyio.fail_after(20):  # keepalive 2 s: PINGREQ after ~2 s, given up ~2 s later
                    async for event in status:
                        if isinstance(event, ConnectionLost):
                            break
                async with Endpoint(spare.url, namespace=namespace) as other, other.subscribe("/x") as sub:
                    assert await ep.await_peer(other.id, timeout=20)  # ep is back, on the spare broker
                    await ep.publish("/x", 1)
                    with anyio.fail_after(10):
                        assert (await sub.get()).data == 1
            finally:
                os.kill(hung.pid, signal.SIGCONT)  # type: ignore[arg-type]
