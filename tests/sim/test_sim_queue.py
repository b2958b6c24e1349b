"""Work queues over the in-memory broker in simulated time: the protocol scenarios of
tests/queue/test_queue_live.py (publish, acquire, settle, tombstones, wake-ups; a lease running
out), with processes played by endpoints in one process (tests/sim/conftest.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from broker_mqtt.queue import AlreadySettled, MessageState, NotHeld, attach_queue
from broker_mqtt.queue.commands import Acquire, ReleaseOwner, Settle
from broker_mqtt.store.errors import StoreProtocolError

pytestmark = pytest.mark.anyio

ELECTION = {"cycle": 1.0, "gap": 0.25}


async def test_in_process_api(sim: Any, tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    a, b = await sim.open(), await sim.open()
    qa = await attach_queue(a, "jobs", backend="sqlite", path=db, election=ELECTION, max_deliveries=2)
    qb = await attach_queue(b, "jobs", election=ELECTION, candidate=False)
    with anyio.fail_after(30):
        assert await qa.await_master() and await qb.await_master()
        assert await qb.publish({"job": 0}) == 1
        assert await qa.publish_many([{"job": 1}, {"job": 2}, {"job": 3}]) == [2, 3, 4]
        seen = []
        async with qb.consume(prefetch=10) as deliveries:
            async for d in deliveries:
                seen.append((d.id, d.delivery_count))
                if d.id == 1 or d.delivery_count == 2:
                    await d.accept()
                    with pytest.raises(AlreadySettled):
                        await d.release()
                elif d.id == 2:
                    await d.reject("bad job")
                elif d.id == 3:
                    await d.release()
                elif d.id == 4:
                    await d.accept()
                if len(seen) == 5:
                    break
        assert seen[:4] == [(1, 1), (2, 1), (3, 1), (4, 1)] and seen[4] == (3, 2)
        with pytest.raises(StoreProtocolError, match="a settlement is"):
            await qb.store.write(Settle("someone", [["x", "eat", None]]))
        assert await qa.publish({"job": 5}) == 5
        assert await qa.store.await_idle(10) and await qb.store.await_idle(10)
        for q in (qa, qb):
            assert [(x.id, x.data, x.reason) for x in q.dead_letters()] == [(2, {"job": 1}, "bad job")]
            assert (q.statistics().ready, q.statistics().acquired, q.statistics().dead) == (1, 0, 1)
    await qb.close()
    await qa.close()
    qa = await attach_queue(a, "jobs", backend="sqlite", path=db, election=ELECTION)
    assert [x.id for x in qa.dead_letters()] == [2] and qa.statistics().ready == 1
    await qa.close()


async def test_accepted_messages_leave_no_tombstones_behind(sim: Any) -> None:
    a, b = await sim.open(), await sim.open()
    qa = await attach_queue(a, "jobs", election=ELECTION, tombstone_ttl=0)
    qb = await attach_queue(b, "jobs", election=ELECTION, candidate=False, tombstone_ttl=0)
    with anyio.fail_after(30):
        assert await qa.await_master() and await qb.await_master()
        ids = await qa.publish_many([{"job": i} for i in range(50)])
        async with qb.consume(prefetch=20) as deliveries:
            async for d in deliveries:
                await d.accept()
                if d.id == ids[-1]:
                    break
        assert await qa.publish({"job": "left"}) == ids[-1] + 1
        while qa.store.replica.state.tombstones or qb.store.replica.state.tombstones:
            await anyio.sleep(0.1)
        assert await qa.store.await_idle(10) and await qb.store.await_idle(10)
        for q in (qa, qb):
            assert [k for k, _ in await q.store.items() if isinstance(k, int)] == [ids[-1] + 1]
            assert len(q.store.replica.state.versions()) == len(await q.store.keys())
    await qb.close()
    await qa.close()


@contextlib.asynccontextmanager
async def _master_standby_writer(sim: Any, *, beside_master: bool, writer_options: dict[str, Any] | None = None,
                                 **master_options: Any) -> AsyncIterator[tuple[Any, Any, Any]]:
    a, b = await sim.open(), await sim.open()
    qa = await attach_queue(a, "jobs", election=ELECTION, **master_options)
    qs = await attach_queue(b, "jobs", election=ELECTION, candidate=False)
    qw = await attach_queue(a if beside_master else b, "jobs", election=ELECTION, replica=False,
                            **(writer_options or {}))
    try:
        with anyio.fail_after(30):
            assert await qa.await_master() and await qs.await_master() and await qw.await_master()
        yield qa, qs, qw
    finally:
        for q in (qw, qs, qa):
            await q.close()


async def test_a_consumer_without_a_replica_on_the_masters_endpoint(sim: Any) -> None:
    async with _master_standby_writer(sim, beside_master=True, writer_options={"poll_interval": 3600.0}) as (
            qa, qs, qc):
        with anyio.fail_after(30):
            assert qa.store.is_master
            got: list[int] = []
            async with qc.consume(prefetch=5) as deliveries:
                for batch in range(4):
                    await qa.publish_many(list(range(3 * batch, 3 * batch + 3)))
                    async for d in deliveries:
                        got.append(d.data)
                        await d.accept()
                        if len(got) == 3 * batch + 3:
                            break
            assert got == list(range(12))
            assert await qc.publish("from beside") == 13
            assert await qa.store.await_idle(10) and await qs.store.await_idle(10)
            assert qa.statistics().ready == qs.statistics().ready == 1


async def test_settling_without_waiting(sim: Any) -> None:
    async with _master_standby_writer(sim, beside_master=False, max_deliveries=5) as (qa, _, qb):
        with anyio.fail_after(30):
            await qa.publish_many(list(range(20)))
            async with qb.consume(prefetch=20) as deliveries:
                async for d in deliveries:
                    if d.id == 3:
                        d.reject_nowait("bad job")
                    elif d.id == 4:
                        d.release_nowait()
                    elif d.id == 5:
                        assert await deliveries.drain() == []
                        assert await qa.write(ReleaseOwner(deliveries.owner, "test", False)) == 16
                        assert len(await qa.write(Acquire("other", 100, 30.0))) == 17
                        d.accept_nowait()
                        with pytest.raises(AlreadySettled):
                            d.accept_nowait()
                        assert [(x.id, type(e)) for x, e in await deliveries.drain()] == [(5, NotHeld)]
                    else:
                        d.accept_nowait()
                    if d.id == 20:
                        break
                failed = [(x.id, type(e)) for x, e in await deliveries.drain()]
                assert failed == [(i, NotHeld) for i in range(6, 21)]
            assert await qa.write(ReleaseOwner("other", "test", False)) == 17
            assert await qa.store.await_idle(10)
            assert [(x.id, x.reason) for x in qa.dead_letters()] == [(3, "bad job")]
            assert {i: r.count for i, r in qa._records() if r.state is MessageState.READY} == {
                i: 2 for i in range(4, 21)}


async def test_a_consumer_on_the_master_hears_of_arrivals(sim: Any) -> None:
    a, b = await sim.open(), await sim.open()
    qa = await attach_queue(a, "jobs", election=ELECTION, poll_interval=3600.0)
    qb = await attach_queue(b, "jobs", election=ELECTION, candidate=False)
    with anyio.fail_after(30):
        assert await qa.await_master() and await qb.await_master() and qa.is_master
        async with qa.consume(prefetch=5) as deliveries:
            for i in range(4):
                assert await qb.publish(f"job {i}") == i + 1
                async for d in deliveries:
                    assert d.data == f"job {i}"
                    await d.accept()
                    break
    await qb.close()
    await qa.close()


async def test_a_lease_that_runs_out_gives_the_message_to_another(sim: Any) -> None:
    """An owner that never renews (a hung consumer: no will, it just goes quiet) holds a message
    for its lease (6 s), then the master takes it back; another consumer gets it, delivered twice."""
    async with _master_standby_writer(sim, beside_master=False) as (qa, _, qb):
        assert await qa.publish("job") == 1
        took = sim.now()
        assert [x[0] for x in await qa.write(Acquire("hung", 1, 6.0))] == [1]
        async with qb.consume(prefetch=1) as deliveries:
            with anyio.fail_after(30):
                d = await deliveries.__anext__()
            assert 6.0 <= sim.now() - took <= 6.0 + 1.5  # the master looks every min(1 s, lease / 4)
            assert (d.id, d.delivery_count) == (1, 2)
            await d.accept()
