"""Reconnect backoff (issue 23, item 3): capped, jittered, reset only after a connection that lived.

The sans-io :class:`Backoff` on its own, then the endpoint over the in-memory transport in simulated
time (trio's MockClock): a flapping link backs off to the cap, a connection that lived retries fast.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import trio.testing

from broker_mqtt import ConnectionRestored, Endpoint, UsageError
from broker_mqtt.endpoint.backoff import DEFAULT_RECONNECT_DELAY, Backoff
from broker_mqtt.transport import MemoryConnector
from broker_mqtt.transport.base import ConnectOptions


def test_waits_double_up_to_the_cap_with_jitter() -> None:
    b = Backoff(0.1, 1.0, rng=random.Random(1))
    waits = [b.next_delay(now=float(i)) for i in range(8)]
    bases = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    for wait, base in zip(waits, bases, strict=True):
        assert 0.5 * base <= wait < 1.5 * base


def test_a_connection_that_did_not_live_keeps_backing_off() -> None:
    b = Backoff(0.1, 1.0, rng=random.Random(2))
    now = 0.0
    for _ in range(6):
        b.connected(now)
        now += 0.5  # up for half a second: a flap
        b.next_delay(now)
    assert b.delay == 1.0
    b.connected(now)
    assert b.next_delay(now + 1.9) >= 0.5  # still under stable_after (2 s): no reset


def test_a_connection_that_lived_starts_over() -> None:
    b = Backoff(0.1, 1.0, rng=random.Random(3))
    for i in range(6):
        b.next_delay(float(i))
    b.connected(10.0)
    assert b.stable_after == 2.0
    assert b.next_delay(12.0) < 0.15
    assert b.delay == 0.2


def test_stable_after_follows_the_cap() -> None:
    assert Backoff(0.05, 5.0).stable_after == 10.0
    assert Backoff(0.05, 5.0, stable_after=1.0).stable_after == 1.0


@pytest.mark.parametrize("pair", [(0.0, 1.0), (2.0, 1.0), (-1.0, 1.0)])
def test_bad_pairs_are_refused(pair: tuple[float, float]) -> None:
    with pytest.raises(UsageError):
        Backoff(*pair)
    with pytest.raises(UsageError):
        Endpoint(connector=MemoryConnector(), reconnect_delay=pair)


def test_the_default_cap_allows_rejoining_within_two_seconds() -> None:
    low, high = DEFAULT_RECONNECT_DELAY
    assert 1.5 * high <= 1.5  # the longest jittered wait, leaving room for the connect itself


class _Recording:
    """A connector that notes when each attempt starts (anyio's clock) and passes it on."""

    def __init__(self, inner: MemoryConnector) -> None:
        self.inner = inner
        self.attempts: list[float] = []

    def __str__(self) -> str:
        return str(self.inner)

    @asynccontextmanager
    async def connect(self, options: ConnectOptions, on_confirmed: Any, on_rejected: Any) -> AsyncIterator[Any]:
        self.attempts.append(anyio.current_time())
        async with self.inner.connect(options, on_confirmed, on_rejected) as conn:
            yield conn


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})])
async def test_endpoint_backs_off_on_a_flapping_link_and_retries_fast_after_a_lived_one() -> None:
    net = MemoryConnector()
    rec = _Recording(net)
    cid = "flappy"
    async with Endpoint(connector=rec, client_id=cid, reconnect_delay=(0.1, 1.6)) as ep:  # type: ignore[arg-type]
        async with ep.status() as events:
            # a link that drops 0.2 s after every (re)connect: each one too short-lived to reset
            await anyio.sleep(0.2)
            net.cut(cid)
            restored = 0
            with anyio.fail_after(120):
                async for event in events:
                    if isinstance(event, ConnectionRestored):
                        restored += 1
                        if restored == 7:
                            break
                        await anyio.sleep(0.2)
                        net.cut(cid)
            gaps = [b - a for a, b in zip(rec.attempts, rec.attempts[1:], strict=False)]
            assert len(gaps) == 7
            # 0.1, 0.2, 0.4, 0.8, 1.6, 1.6, 1.6 (x0.5-1.5) after each 0.2 s connection
            assert all(g >= 0.2 + 0.5 * 1.6 for g in gaps[-3:]), gaps
            # now the connection lives past stable_after (3.2 s) before it drops: back to 0.1
            await anyio.sleep(3.5)
            before, cut_at = len(rec.attempts), anyio.current_time()
            net.cut(cid)
            with anyio.fail_after(10):
                async for event in events:
                    if isinstance(event, ConnectionRestored):
                        break
            assert len(rec.attempts) == before + 1
            assert rec.attempts[-1] - cut_at < 1.5 * 0.1 + 0.01, rec.attempts
