"""Master/clone stores over the in-memory broker in simulated time: the protocol scenarios of
tests/store/test_store_attached.py (operations, errors, events, a clone stale while its master is
gone then resynced), and resync after a dropped connection."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from broker_mqtt import channel as ch
from broker_mqtt.store import (
    MasterExists,
    NoSuchKey,
    Stale,
    StoreError,
    Timeout,
    TypeClash,
    WriteBufferFull,
    attach_clone,
)
from broker_mqtt.store.events import (
    Erased,
    Expired,
    Inserted,
    MasterChanged,
    StaleChanged,
    Updated,
    WriteRejected,
)
from broker_mqtt.store.master_handle import attach_master

pytestmark = pytest.mark.anyio

FAST = ch.ChannelConfig(heartbeat_interval=0.1, ack_interval=0.05, connection_timeout=5)


async def _until(stream: Any, kind: type) -> AsyncIterator[Any]:
    async for event in stream:
        yield event
        if isinstance(event, kind):
            return


async def test_master_and_clone_operations(sim: Any) -> None:
    e1, e2 = await sim.open(), await sim.open()
    m = await attach_master(e1, "config", channel=FAST, discovery_timeout=0.05)
    c = await attach_clone(e2, "config", channel=FAST, wait=5)
    assert not c.stale
    await c.put("fan", 3, expiry=60)
    await c.increment("n", 2)
    await c.decrement("n", 1)
    await c.append("s", "ab")
    await c.append("s", "cd")
    await c.insert_into("set", 1)
    await c.insert_into("table", "k", "v")
    await c.remove_from("table", "k")
    await c.push("vec", 1)
    await c.push("vec", 2)
    await c.pop("vec")
    await c.put("gone", 1)
    await c.erase("gone")
    assert await c.await_idle(5) and await m.await_idle(5)
    for store in (m, c):
        assert await store.get("fan") == 3 and await store.get("n") == 1 and await store.get("s") == "abcd"
        assert await store.get("set") == {1} and await store.get("table") == {} and await store.get("vec") == [1]
        assert not await store.exists("gone") and await store.exists("fan")
    await anyio.sleep(61)  # simulated: "fan" expires on the master, the clone hears of it
    assert await c.await_idle(5)
    assert not await m.exists("fan") and not await c.exists("fan")
    await m.clear()
    assert await m.await_idle(5)
    assert await c.keys() == []


async def test_errors_reach_the_caller(sim: Any) -> None:
    e1, e2 = await sim.open(), await sim.open()
    m = await attach_master(e1, "s", channel=FAST, discovery_timeout=0.05)
    c = await attach_clone(e2, "s", channel=FAST, wait=5)
    with pytest.raises(NoSuchKey):
        await c.get("missing")
    await m.put("text", "abc")
    assert await m.await_idle(5)
    with pytest.raises(TypeClash):
        await m.increment("text", 1)
    with pytest.raises(TypeClash):
        await c.increment("text", 1)
    async with c.status() as status:
        await c.put("text2", "abc")
        await c.increment("text2", 1)  # in flight behind the put: only the master can judge it
        with anyio.fail_after(30):
            rejected = [e async for e in _until(status, WriteRejected)]
        assert isinstance(rejected[-1].error, TypeClash)
    assert await c.await_idle(5) and await m.await_idle(5) and await c.get("text2") == "abc"
    with pytest.raises(MasterExists):
        await attach_master(e2, "s", channel=FAST, discovery_timeout=10)
    assert await c.put_unique("u", 1) is True and await c.put_unique("u", 2) is False
    assert await m.put_unique("u", 3) is False and await m.get("u") == 1


async def test_clone_stale_while_master_gone_then_resyncs_and_flushes(sim: Any, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    e1, e2 = await sim.open(), await sim.open()
    m = await attach_master(e1, "s", backend="sqlite", path=db, channel=FAST, discovery_timeout=0.05)
    c = await attach_clone(e2, "s", channel=FAST, write_buffer=3, wait=5)
    await m.put("a", 1)
    assert await m.await_idle(5)
    async with c.status() as status:
        await m.close()
        with anyio.fail_after(30):
            async for event in status:
                if isinstance(event, StaleChanged) and event.stale:
                    break
        assert c.stale
        with pytest.raises(Stale):
            await c.get("a")
        assert await c.get("a", allow_stale=True) == 1
        for i in range(3):
            await c.put(f"b{i}", i)
        with pytest.raises(WriteBufferFull):
            await c.put("b3", 3)
        m2 = await attach_master(e1, "s", backend="sqlite", path=db, channel=FAST, discovery_timeout=0.05)
        seen = []
        with anyio.fail_after(30):
            async for event in status:
                seen.append(event)
                if isinstance(event, StaleChanged) and not event.stale:
                    break
        assert any(isinstance(e, MasterChanged) and e.master == m2.id for e in seen)
    assert await c.await_idle(5) and await m2.await_idle(5)
    assert sorted(await m2.keys()) == ["a", "b0", "b1", "b2"] == sorted(await c.keys())


async def _contents(store: Any) -> dict[Any, Any]:
    return {k: await store.get(k) for k in await store.keys()}


@pytest.mark.parametrize("who", ["clone", "master"])
async def test_a_dropped_connection_is_resynced(sim: Any, who: str) -> None:
    """One side's connection is cut while the master keeps writing: the clone catches up (resync),
    its own writes made meanwhile arrive once, and both hold the same."""
    e1, e2 = await sim.open(), await sim.open()
    m = await attach_master(e1, "s", channel=FAST, discovery_timeout=0.05)
    c = await attach_clone(e2, "s", channel=FAST, wait=5)
    for i in range(20):
        await m.put(f"m{i}", i)
    await c.increment("n", 1)
    assert await c.await_idle(5) and await m.await_idle(5)
    for round_ in range(3):
        assert sim.cut(e2 if who == "clone" else e1) == 1
        for i in range(20):
            await m.put(f"m{i}", i + 100 * (round_ + 1))
        await m.erase(f"m{round_}")
        await c.increment("n", 1)
        await anyio.sleep(1)
        with anyio.fail_after(60):
            while c.stale:
                await anyio.sleep(0.05)
        assert await c.await_idle(30) and await m.await_idle(30)
        assert await _contents(c) == await _contents(m)
    assert await m.get("n") == 4 and await m.get("m19") == 319 and not await m.exists("m2")


async def test_event_stream_reports_changes_with_old_values_and_publisher(sim: Any) -> None:
    e1, e2 = await sim.open(), await sim.open()
    m = await attach_master(e1, "s", channel=FAST, discovery_timeout=0.05)
    c = await attach_clone(e2, "s", channel=FAST, wait=5)
    async with m.events() as mev, c.events() as cev:
        await c.put("k", 1)
        await c.put("k", 2)
        await c.erase("k")
        await m.put("t", 1, expiry=0.2)
        expected = [Inserted("s", "k", 1, e2.id), Updated("s", "k", 1, 2, e2.id), Erased("s", "k", 2, e2.id),
                    Inserted("s", "t", 1, e1.id), Expired("s", "t", 1)]
        with anyio.fail_after(30):
            got_m = [await mev.__anext__() for _ in expected]
            got_c = [await cev.__anext__() for _ in expected]
    assert sorted(got_m, key=repr) == sorted(expected, key=repr)
    assert sorted(got_c, key=repr) == sorted(expected, key=repr)


async def test_clone_events_name_another_clone_as_publisher(sim: Any) -> None:
    e1, e2, e3 = await sim.open(), await sim.open(), await sim.open()
    await attach_master(e1, "s", channel=FAST, discovery_timeout=0.05)
    writer = await attach_clone(e2, "s", channel=FAST, wait=5)
    reader = await attach_clone(e3, "s", channel=FAST, wait=5)
    async with reader.events() as ev:
        await writer.put("k", 1)
        await writer.clear()
        with anyio.fail_after(30):
            got = [await ev.__anext__() for _ in range(2)]
    assert got == [Inserted("s", "k", 1, e2.id), Erased("s", "k", 1, e2.id)]


async def test_put_unique_times_out_without_a_master(sim: Any) -> None:
    ep = await sim.open()
    c = await attach_clone(ep, "nobody", channel=FAST, request_timeout=0.3)
    assert c.stale and c.master is None
    with pytest.raises(Timeout):
        await c.put_unique("k", 1)
    assert await c.await_idle(0.2) is False
    await c.close()
    with pytest.raises(StoreError):
        await c.put("k", 1)
