"""Subscription streams without a broker: batch decoding of a PUBLISH's messages, malformed payloads,
overflow policies."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from broker_mqtt.endpoint.events import ErrorCode, ErrorEvent, Message
from broker_mqtt.endpoint.statistics import EndpointStatistics
from broker_mqtt.endpoint.subscription import RawMessage, RawSubscription, Subscription
from broker_mqtt.errors import UsageError
from broker_mqtt.wire import codec
from broker_mqtt.wire.message import Kind

pytestmark = pytest.mark.anyio

SENDER = uuid.uuid4().bytes


class FakeEndpoint:
    """What a Subscription uses of its endpoint: registration and error reports."""

    def __init__(self) -> None:
        self.reports: list[Any] = []
        self._stats = EndpointStatistics()

    def _report(self, event: Any) -> None:
        self.reports.append(event)


    async def _add_subscriber(self, sub: Any) -> None:
        pass

    async def _add_raw_subscriber(self, sub: Any) -> None:
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


def _batches(n: int, size: int = 2) -> list[list[Message]]:
    """``n`` PUBLISH batches of ``size`` messages each: 0, 1, ... in order."""
    return [[_msg(codec.encode(i * size + j)) for j in range(size)] for i in range(n)]


def _overflows(ep: FakeEndpoint) -> list[ErrorEvent]:
    return [e for e in ep.reports if isinstance(e, ErrorEvent) and e.code is ErrorCode.SUBSCRIBER_OVERFLOW]


class _Clock:
    """The subscription's clock, moved by the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr("broker_mqtt.endpoint.subscription.current_time", lambda: self.now)


@pytest.mark.parametrize(("overflow", "kept"), [("drop_newest", [0, 1, 2, 3]), ("drop_oldest", [6, 7, 8, 9])])
async def test_a_full_subscription_drops_per_its_policy_never_waits_and_reports(
        overflow: Any, kept: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    ep = FakeEndpoint()
    _Clock(monkeypatch)
    async with Subscription(ep, ("/t",), local=False, buffer=2, overflow=overflow) as sub:  # type: ignore[arg-type]
        for batch in _batches(5):
            assert sub._deliver_nowait(batch)  # never "full": the receiver does not wait for it
        # three batches of two messages dropped, not counted as delivered (the dispatcher counted them)
        assert (sub.dropped, ep._stats.subscriber_dropped, ep._stats.delivered) == (6, 6, -6)
        assert [m.data for m in await _take(sub, 4)] == kept
        reports = _overflows(ep)
        assert len(reports) == 1 and "2 messages dropped" in reports[0].message  # the first drop, at once
        assert overflow.replace("_", " ") in reports[0].message and "/t" in reports[0].message


async def test_overflow_reports_come_at_most_once_a_second_with_the_count_since_the_last(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ep, clock = FakeEndpoint(), _Clock(monkeypatch)
    async with Subscription(ep, ("/t",), local=False, buffer=1, overflow="drop_oldest") as sub:  # type: ignore[arg-type]
        batches = iter(_batches(100, size=1))
        for _ in range(10):  # a subscriber that reads one of every three: every read empties it
            for _ in range(3):
                sub._deliver_nowait(next(batches))
            await sub.get()
            clock.now += 0.25
        assert sub.dropped == 20  # two a round; 3 of them not reported yet
        assert [r.message.split(", ")[-1] for r in _overflows(ep)] == [
            "1 messages dropped since the last report",  # at 1000.0
            "8 messages dropped since the last report",  # at 1001.0: the 2 of each read since
            "8 messages dropped since the last report",  # at 1002.0
        ]


async def test_waiting_is_the_default_and_own_messages_follow_a_drop_policy() -> None:
    ep = FakeEndpoint()
    async with Subscription(ep, ("/t",), local=False, buffer=1) as waits, \
            Subscription(ep, ("/t",), local=True, buffer=1, overflow="drop_newest") as drops:  # type: ignore[arg-type]
        assert waits.overflow == "wait"
        first, second = _batches(2)
        assert waits._deliver_nowait(first) and not waits._deliver_nowait(second)  # full: the receiver waits
        assert waits.dropped == 0 and not _overflows(ep)
        drops._deliver_own(first)
        drops._deliver_own(second)  # not held beyond the buffer (that list is unbounded): dropped
        assert not drops._own and drops.dropped == 2
        assert [m.data for m in await _take(drops, 2)] == [0, 1]


async def test_raw_subscriptions_take_the_policies_too_and_bad_ones_are_refused() -> None:
    ep = FakeEndpoint()
    async with RawSubscription(ep, ("a/#",), buffer=1, overflow="drop_oldest") as raw:  # type: ignore[arg-type]
        for i in range(3):
            assert raw._deliver_nowait([RawMessage("a/x", bytes([i]), False)])
        assert raw.dropped == 2 and (await raw.__anext__()).payload == b"\x02"
    with pytest.raises(UsageError, match="overflow takes one of"):
        Subscription(ep, ("/t",), local=False, buffer=1, overflow="drop")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="at least one"):
        RawSubscription(ep, (), buffer=1)  # type: ignore[arg-type]
