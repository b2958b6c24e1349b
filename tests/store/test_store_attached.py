"""The store I/O layer in one process over the real mosquitto: API contracts, errors, events, status."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _sqlite_tracking import is_closed, track_connections

from broker_mqtt import EmbeddedBroker, Endpoint
from broker_mqtt import channel as ch
from broker_mqtt.errors import UsageError
from broker_mqtt.queue import attach_queue
from broker_mqtt.store import (
    BackendError,
    MasterExists,
    MemoryBackend,
    NoSuchKey,
    Stale,
    StoreError,
    Timeout,
    TypeClash,
    WriteBufferFull,
    attach_clone,
)
from broker_mqtt.store.clone_handle import CloneStore
from broker_mqtt.store.elected_attach import attach_store
from broker_mqtt.store.events import (
    Erased,
    Expired,
    Inserted,
    MasterChanged,
    StaleChanged,
    Updated,
    WriteRejected,
)
from broker_mqtt.store.master_handle import MasterStore, attach_master

pytestmark = [pytest.mark.anyio, pytest.mark.mosquitto]

FAST = ch.ChannelConfig(heartbeat_interval=0.1, ack_interval=0.05, connection_timeout=5)


async def _until(stream: Any, kind: type) -> AsyncIterator[Any]:
    """Yield events of ``stream`` up to and including the first of type ``kind``."""
    async for event in stream:
        yield event
        if isinstance(event, kind):
            return


async def test_master_and_clone_operations(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as e1, Endpoint(broker, namespace=namespace) as e2:
        m = await attach_master(e1, "config", channel=FAST, discovery_timeout=0.05)
        c = await attach_clone(e2, "config", channel=FAST, wait=5)
        assert isinstance(m, MasterStore) and isinstance(c, CloneStore) and not c.stale
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
            assert sorted(await store.keys(), key=str) == sorted(["fan", "n", "s", "set", "table", "vec"], key=str)
        await m.clear()
        assert await m.await_idle(5)
        assert await c.keys() == []


async def test_errors_reach_the_caller(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as e1, Endpoint(broker, namespace=namespace) as e2:
        m = await attach_master(e1, "s", channel=FAST, discovery_timeout=0.05)
        c = await attach_clone(e2, "s", channel=FAST, wait=5)
        with pytest.raises(NoSuchKey):
            await c.get("missing")
        with pytest.raises(NoSuchKey):
            await m.get("missing")
        await m.put("text", "abc")
        assert await m.await_idle(5)
        with pytest.raises(TypeClash):
            await m.increment("text", 1)
        with pytest.raises(TypeClash):
            await c.increment("text", 1)  # judged on the clone's copy, nothing sent
        with pytest.raises(NoSuchKey):
            await c.pop("missing")
        async with c.status() as status:
            await c.put("text2", "abc")
            await c.increment("text2", 1)  # in flight behind the put: only the master can judge it
            with anyio.fail_after(30):
                rejected = [e async for e in _until(status, WriteRejected)]
            assert isinstance(rejected[-1].error, TypeClash)
        assert await c.await_idle(5) and await m.await_idle(5) and await c.get("text2") == "abc"
        with pytest.raises(MasterExists):
            await attach_master(e2, "s", channel=FAST, discovery_timeout=10)  # returns when the master answers
        assert await c.put_unique("u", 1) is True and await c.put_unique("u", 2) is False
        assert await m.put_unique("u", 3) is False and await m.get("u") == 1
        with pytest.raises(BackendError):
            await m.put("bad", object())


async def test_clone_stale_while_master_gone_then_resyncs_and_flushes(broker: EmbeddedBroker, namespace: str,
                                                                     tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    async with Endpoint(broker, namespace=namespace) as e1, Endpoint(broker, namespace=namespace) as e2:
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
                await c.put(f"b{i}", i)  # buffered: the bound is 3 ...
            with pytest.raises(WriteBufferFull):
                await c.put("b3", 3)  # ... so the fourth fails for its caller, nothing queued
            m2 = await attach_master(e1, "s", backend="sqlite", path=db, channel=FAST, discovery_timeout=0.05)
            seen = []
            with anyio.fail_after(30):
                async for event in status:
                    seen.append(event)
                    if isinstance(event, StaleChanged) and not event.stale:
                        break
            assert any(isinstance(e, MasterChanged) and e.master == m2.id for e in seen)
        assert await c.await_idle(5) and await m2.await_idle(5)
        assert sorted(await m2.keys()) == ["a", "b0", "b1", "b2"]
        assert sorted(await c.keys()) == ["a", "b0", "b1", "b2"]


async def test_event_stream_reports_changes_with_old_values_and_publisher(broker: EmbeddedBroker,
                                                                         namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as e1, Endpoint(broker, namespace=namespace) as e2:
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
        # the broadcast names the writing clone (the master's own writes: the master's endpoint)
        assert sorted(got_c, key=repr) == sorted(expected, key=repr)


async def test_clone_events_name_another_clone_as_publisher(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as e1, Endpoint(broker, namespace=namespace) as e2, \
            Endpoint(broker, namespace=namespace) as e3:
        await attach_master(e1, "s", channel=FAST, discovery_timeout=0.05)
        writer = await attach_clone(e2, "s", channel=FAST, wait=5)
        reader = await attach_clone(e3, "s", channel=FAST, wait=5)
        async with reader.events() as ev:
            await writer.put("k", 1)
            await writer.clear()
            with anyio.fail_after(30):
                got = [await ev.__anext__() for _ in range(2)]
        assert got == [Inserted("s", "k", 1, e2.id), Erased("s", "k", 1, e2.id)]


async def test_put_unique_times_out_without_a_master(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as ep:
        c = await attach_clone(ep, "nobody", channel=FAST, request_timeout=0.3)
        assert c.stale and c.master is None
        with pytest.raises(Timeout):
            await c.put_unique("k", 1)
        assert await c.await_idle(0.2) is False
        await c.close()
        with pytest.raises(StoreError):
            await c.put("k", 1)


async def test_an_oversized_write_fails_in_the_caller_and_the_store_goes_on(namespace: str) -> None:
    from broker_mqtt.errors import PayloadTooLarge

    with EmbeddedBroker(max_packet_size=64 * 1024) as small:
        async with Endpoint(small, namespace=namespace) as e1, Endpoint(small, namespace=namespace) as e2:
            m = await attach_master(e1, "config", channel=FAST, discovery_timeout=0.05)
            c = await attach_clone(e2, "config", channel=FAST, wait=5)
            for store in (c, m):
                with pytest.raises(PayloadTooLarge):
                    await store.put("big", "x" * 100_000)
                with pytest.raises(PayloadTooLarge):
                    await store.push("vec", ["y" * 100_000])
            await c.put("small", 1)
            await m.put("other", 2)
            assert await c.await_idle(5) and await m.await_idle(5)
            assert await c.get("small") == 1 and await c.get("other") == 2 and not await c.exists("big")


async def test_a_value_no_clone_decodes_is_refused_and_the_clones_go_on(broker: EmbeddedBroker, namespace: str) -> None:
    """cbor2 encodes a date, a UUID or a Decimal; every decoder refuses them. Before, the master
    applied and broadcast such a put, and every clone's stream stalled there for good: no later
    write reached a clone. Now the write raises BackendError at the master and at a clone, and
    nothing changes."""
    import datetime
    import decimal
    import uuid

    from broker_mqtt.store import BackendError

    async with Endpoint(broker, namespace=namespace) as e1, Endpoint(broker, namespace=namespace) as e2:
        m = await attach_master(e1, "config", channel=FAST, discovery_timeout=0.05)
        c = await attach_clone(e2, "config", channel=FAST, wait=5)
        for store in (m, c):
            for bad in (datetime.date(2024, 1, 2), uuid.UUID(int=1), decimal.Decimal("1.5"), "\ud800"):
                with pytest.raises(BackendError, match="cannot encode"):
                    await store.put("k", bad)
                with pytest.raises(BackendError, match="cannot encode"):
                    await store.put(bad, 1)
            with pytest.raises(BackendError, match="cannot encode"):
                await store.push("vec", [datetime.date(2024, 1, 2)])
            with pytest.raises(BackendError, match="cannot encode"):
                await store.put_unique("k", uuid.UUID(int=2))
        await m.put("after", 1)
        await c.put("from-clone", 2)
        assert await c.await_idle(5) and await m.await_idle(5)
        assert await c.get("after") == 1 and await m.get("from-clone") == 2 and not await m.exists("k")


class _CountingBackend(MemoryBackend):
    """A backend handed to attach_master, counting its ``close()`` calls."""

    def __init__(self) -> None:
        super().__init__()
        self.closes = 0

    def close(self) -> None:
        self.closes += 1


async def test_a_failed_attach_closes_the_backend_once(broker: EmbeddedBroker, namespace: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    opened = track_connections(monkeypatch)
    closed_ep = Endpoint(broker, namespace=namespace)  # never opened: the service cannot even start
    given = _CountingBackend()
    with pytest.raises(UsageError):
        await attach_master(closed_ep, "s", backend=given)
    assert given.closes == 1
    with pytest.raises(UsageError):
        await attach_master(closed_ep, "s", backend="sqlite", path=tmp_path / "m.db")
    with pytest.raises(UsageError):
        await attach_store(closed_ep, "e", backend="sqlite", path=tmp_path / "e.db")
    assert len(opened) == 2 and all(is_closed(db) for db in opened)
    async with Endpoint(broker, namespace=namespace) as e1, Endpoint(broker, namespace=namespace) as e2:
        m = await attach_master(e1, "s", channel=FAST, discovery_timeout=0.05)
        given = _CountingBackend()
        with pytest.raises(MasterExists):  # the service ran (and closed the backend), then failed
            await attach_master(e2, "s", backend=given, channel=FAST, discovery_timeout=10)
        assert given.closes == 1
        await m.close()


async def test_a_queue_whose_service_fails_to_start_closes_its_replica(
        broker: EmbeddedBroker, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from broker_mqtt.queue import WorkQueue

    async def broken(self: WorkQueue, *, task_status: Any) -> None:
        raise RuntimeError("the queue's service failed")

    opened = track_connections(monkeypatch)
    async with Endpoint(broker, namespace=namespace) as ep:
        with monkeypatch.context() as patch:
            patch.setattr(WorkQueue, "_service", broken)
            with pytest.raises(RuntimeError, match="service failed"):
                await attach_queue(ep, "jobs", backend="sqlite", path=tmp_path / "q.db",
                                      election={"cycle": 1.0, "gap": 0.25})
        assert len(opened) == 1 and is_closed(opened[0])  # the replica's file is closed ...
        q = await attach_queue(ep, "jobs", election={"cycle": 1.0, "gap": 0.25})  # ... and the name is free
        await q.close()


async def test_a_store_file_opens_off_the_event_loop(broker: EmbeddedBroker, namespace: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a large state file takes long (60 s for 10,000,000 keys): the event loop runs meanwhile
    (keepalives, heartbeats). The open here waits until a task on the loop has run: on the loop
    itself it would wait in vain."""
    from broker_mqtt.store import elected_attach as elected

    loop_ran = threading.Event()
    real = elected.open_state

    def slow_open(path: Any) -> Any:
        assert loop_ran.wait(30), "the event loop did not run while the state file opened"
        return real(path)

    monkeypatch.setattr(elected, "open_state", slow_open)

    async def mark() -> None:
        loop_ran.set()

    async with Endpoint(broker, namespace=namespace) as ep, anyio.create_task_group() as tg:
        tg.start_soon(mark)
        store = await attach_store(ep, "e", backend="sqlite", path=tmp_path / "e.db")
        await store.close()


async def test_an_attach_cancelled_while_its_file_opens_closes_it(broker: EmbeddedBroker, namespace: str,
                                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from broker_mqtt.store import elected_attach as elected

    opened = track_connections(monkeypatch)
    entered, go = threading.Event(), threading.Event()
    real = elected.open_state

    def held_open(path: Any) -> Any:
        entered.set()
        assert go.wait(30)
        return real(path)

    monkeypatch.setattr(elected, "open_state", held_open)
    async with Endpoint(broker, namespace=namespace) as ep:

        async def attach() -> None:
            await attach_store(ep, "e", backend="sqlite", path=tmp_path / "e.db")
            raise AssertionError("the attach was not cancelled")

        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(attach)
                await anyio.to_thread.run_sync(entered.wait)
                scope.cancel()
                go.set()
        assert scope.cancelled_caught
        assert len(opened) == 1 and is_closed(opened[0])  # opened after the cancel, and closed
        monkeypatch.setattr(elected, "open_state", real)
        store = await attach_store(ep, "e", backend="sqlite", path=tmp_path / "e.db")  # the name is free
        await store.close()
