"""Subscription streams without a broker: batch decoding of a PUBLISH's messages, malformed payloads."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from broker_mqtt.endpoint.events import ErrorCode, ErrorEvent, Message
from broker_mqtt.endpoint.subscription import Subscription
from broker_mqtt.wire import codec
from broker_mqtt.wire.message import Kind

pytestmark = pytest.mark.anyio

SENDER = uuid.uuid4().bytes


class FakeEndpoint:
    """What a Subscription uses of its endpoint: registration and error reports."""

    def __init__(self) -> None:
        self.reports: list[Any] = []

    def _report(self, event: Any) -> None:
        self.reports.append(event)

    async def _add_subscriber(self, sub: Any) -> None:
        pass

    async def _remove_subscriber(self, sub: Any) -> None:
        pass


def _msg(payload: bytes) -> Message:
    return Message("/t", SENDER, payload)


async def _take(sub: Subscription, n: int) -> list[Message]:
    out = []
    with anyio.fail_after(30):
        async for msg in sub:
            out.append(msg)
            if len(out) == n:
                break
    return out


async def test_a_batch_is_decoded_in_order_and_bad_payloads_are_reported() -> None:
    ep = FakeEndpoint()
    rows = [{"i": i, "ts": datetime.fromtimestamp(1_700_000_000 + i, UTC), "x": [0xF7 * i]} for i in range(50)]
    payloads = [codec.encode(r) for r in rows]
    batch = [_msg(p) for p in payloads]
    batch.insert(10, _msg(b"\x82\x01"))  # truncated
    batch.insert(20, _msg(b""))  # empty
    async with Subscription(ep, ("/t",), local=False, buffer=4, kind=Kind.DATA) as sub:  # type: ignore[arg-type]
        assert sub._deliver_nowait(batch)
        got = await _take(sub, len(rows))
        assert sub.buffered == 0
    assert [m.data for m in got] == rows
    assert [m.payload for m in got] == payloads
    assert len(ep.reports) == 2
    assert all(isinstance(e, ErrorEvent) and e.code is ErrorCode.MALFORMED_PAYLOAD for e in ep.reports)
    assert "truncated" in ep.reports[0].message and "empty" in ep.reports[1].message
    assert ep.reports[0].sender == uuid.UUID(bytes=SENDER)


async def test_buffered_counts_the_rest_of_the_publish() -> None:
    ep = FakeEndpoint()
    async with Subscription(ep, ("/t",), local=False, buffer=4, kind=Kind.DATA) as sub:  # type: ignore[arg-type]
        sub._deliver_nowait([_msg(codec.encode(i)) for i in range(3)])
        sub._deliver_nowait([_msg(codec.encode(9))])
        first = await sub.get()
        assert first.data == 0 and sub.buffered == 2
        assert [m.data for m in await _take(sub, 3)] == [1, 2, 9]


async def test_a_message_shared_by_two_subscriptions_is_decoded_once() -> None:
    ep = FakeEndpoint()
    shared = [_msg(codec.encode({"k": i})) for i in range(5)]
    async with Subscription(ep, ("/t",), local=False, buffer=4, kind=Kind.DATA) as a, \
            Subscription(ep, ("/t",), local=False, buffer=4, kind=Kind.DATA) as b:  # type: ignore[arg-type]
        a._deliver_nowait(list(shared))
        b._deliver_nowait(list(shared))
        from_a = await _take(a, 5)
        from_b = await _take(b, 5)
    assert [m.data for m in from_a] == [{"k": i} for i in range(5)]
    assert all(x is y and x.data is y.data for x, y in zip(from_a, from_b, strict=True))


async def test_closed_subscription_ends_iteration() -> None:
    ep = FakeEndpoint()
    sub = Subscription(ep, ("/t",), local=False, buffer=4, kind=Kind.DATA)  # type: ignore[arg-type]
    async with sub:
        sub._deliver_nowait([_msg(codec.encode(1))])
        assert (await sub.get()).data == 1
        sub._send.close()
        with pytest.raises(StopAsyncIteration):
            await sub.get()


async def test_chunks_across_publishes_keep_order_and_errors() -> None:
    ep = FakeEndpoint()
    bad = {63, 64, 130}
    payloads = [b"\xff" if i in bad else codec.encode(i) for i in range(200)]
    async with Subscription(ep, ("/t",), local=False, buffer=8, kind=Kind.DATA) as sub:  # type: ignore[arg-type]
        for start, end in ((0, 70), (70, 150), (150, 200)):  # three PUBLISHes
            assert sub._deliver_nowait([_msg(p) for p in payloads[start:end]])
        got = await _take(sub, 200 - len(bad))
    assert [m.data for m in got] == [i for i in range(200) if i not in bad]
    assert len(ep.reports) == len(bad)
