"""The one bounded event stream: what it keeps, what it drops, how it reports a loss, how it ends."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from broker_mqtt import ConnectionLost, Endpoint
from broker_mqtt.endpoint.event_stream import EventStream
from broker_mqtt.store.events import EventsDropped

pytestmark = pytest.mark.anyio


async def _take(stream: EventStream[Any], n: int) -> list[Any]:
    return [await anext(stream) for _ in range(n)]


async def test_keeps_the_oldest_and_reports_the_gap_where_it_is() -> None:
    owner: list[EventStream[Any]] = []
    async with EventStream(owner, 3, dropped=EventsDropped) as s:
        assert owner == [s]
        assert [s._put(i) for i in range(5)] == [True, True, True, False, False]
        assert await _take(s, 2) == [0, 1]
        assert s._put(5)  # room again: the report goes before the next kept event
        assert await _take(s, 3) == [2, EventsDropped(2), 5]
    assert owner == []


async def test_a_gap_with_nothing_after_it_is_reported_once_the_consumer_reaches_it() -> None:
    async with EventStream([], 2, dropped=EventsDropped) as s:
        for i in range(4):
            s._put(i)
        assert await _take(s, 3) == [0, 1, EventsDropped(2)]
        with anyio.move_on_after(0.05) as scope:
            await anext(s)
        assert scope.cancelled_caught  # nothing more: it waits


async def test_without_a_report_factory_the_producer_counts_drops() -> None:
    async with EventStream([], 1) as s:
        assert s._put("a") and not s._put("b")
        s._close()
        assert [e async for e in s] == ["a"]


async def test_close_ends_the_stream_after_what_it_holds_and_ignores_later_events() -> None:
    async with EventStream([], 10, dropped=EventsDropped) as s:
        s._put(1)
        s._close()
        assert s._put(2)  # not a drop, but not kept
        assert [e async for e in s] == [1]


async def test_the_event_that_ends_a_stream_is_held_even_when_it_is_full() -> None:
    """A store that stopped says why last (StoreFailed), also to a consumer that fell behind: after
    the report of what was dropped."""
    async with EventStream([], 2, dropped=EventsDropped) as s:
        for i in range(4):
            s._put(i)
        s._close("stopped")
        s._close("again")  # (idempotent: one last event)
        assert [e async for e in s] == [0, 1, EventsDropped(2), "stopped"]


async def test_a_waiting_consumer_wakes_on_put_and_on_close() -> None:
    async with EventStream([], 10) as s:
        got: list[Any] = []

        async def consume() -> None:
            got.extend([e async for e in s])

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await anyio.sleep(0.01)
            s._put("x")
            await anyio.sleep(0.01)
            assert got == [] or got == ["x"]
            s._close()
        assert got == ["x"]


async def test_the_endpoints_status_stream_drops_the_newest_and_counts_them() -> None:
    ep = Endpoint("mqtt://127.0.0.1:1")  # never entered: status streams do not need the connection
    events = [ConnectionLost(str(i)) for i in range(3)]
    async with ep.status(buffer=2) as s:
        assert isinstance(s, EventStream)
        for event in events:
            ep._report(event)
        assert ep.statistics().status_dropped == 1  # the newest, counted at the endpoint
        assert await _take(s, 2) == events[:2]  # and not reported in-band
    ep._report(events[0])  # a closed stream is no longer registered
    assert ep.statistics().status_dropped == 1
