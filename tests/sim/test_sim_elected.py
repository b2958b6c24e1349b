"""Elected stores over the in-memory broker in simulated time: the protocol scenarios of
tests/store/test_elected_live.py (election, handover, master loss through its last will, writes
acknowledged across failover with nothing lost or applied twice), with a node's death played by
cutting its connection and refusing its reconnects (tests/sim/conftest.py)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from _simnodes import ElectedNode, check_converged, master_of, wait_for

from broker_mqtt import UsageError
from broker_mqtt.store import MasterChanged, attach_store
from broker_mqtt.store.errors import NoSuchKey

pytestmark = pytest.mark.anyio

CYCLE, GAP = 1.0, 0.25


async def _nodes(sim: Any, n: int, mode: str, cycle: float, gap: float, **options: Any) -> list[ElectedNode]:
    """``n`` nodes, each on its own endpoint (opened before the test's task group: trio nests strictly)."""
    return [await ElectedNode.attach(await sim.open(), "s", mode, cycle, gap, **options) for _ in range(n)]


def _run(tg: Any, nodes: list[ElectedNode], writers: int = 0, pace: float = 0.05) -> None:
    for node in nodes:
        tg.start_soon(node.watch)
        for _ in range(writers):
            tg.start_soon(node.writer, pace)


async def test_in_process_store_api(sim: Any) -> None:
    election = {"cycle": CYCLE, "gap": GAP}
    a, b = await sim.open(), await sim.open()
    sa = await attach_store(a, "cfg", election=election)
    sb = await attach_store(b, "cfg", election=election)
    async with sb.events() as events, sb.events(data=False) as quiet:
        assert await sb.await_master(15)
        await sb.put("fan", 3)
        await sa.increment("n", 2)
        assert await sa.put_unique("u", 1) is True
        assert await sb.put_unique("u", 2) is False
        assert await sa.await_idle(10) and await sb.await_idle(10)
        assert dict(await sa.items()) == dict(await sb.items()) == {"fan": 3, "n": 2, "u": 1}
        assert sa.master == sb.master and sa.epoch == sb.epoch and sa.is_master != sb.is_master
        with pytest.raises(NoSuchKey):
            await sb.get("missing")
        seen = []
        with anyio.fail_after(5):
            async for e in events:
                seen.append(e)
                if len([x for x in seen if not isinstance(x, MasterChanged)]) >= 3 and \
                        any(getattr(x, "key", None) == "u" for x in seen):
                    break
        assert any(isinstance(e, MasterChanged) and e.master == sb.master for e in seen)
        inserted = {e.key: e.value for e in seen if type(e).__name__ == "Inserted"}
        assert inserted["fan"] == 3
        assert next(e.publisher for e in seen if getattr(e, "key", None) == "fan") == b.id
        no_data = []
        with anyio.move_on_after(0.5):
            async for e in quiet:
                no_data.append(e)
        assert any(isinstance(e, MasterChanged) for e in no_data)
        assert all(type(e).__name__ not in ("Inserted", "Updated", "Erased", "Expired") for e in no_data)
    await sa.close()
    await sb.close()


async def test_one_replica_of_a_store_per_endpoint(sim: Any) -> None:
    election = {"cycle": CYCLE, "gap": GAP}
    a = await sim.open()
    sa = await attach_store(a, "one", election=election, durability="master")
    with pytest.raises(UsageError, match="already holds a replica"):
        await attach_store(a, "one", election=election)
    other = await attach_store(a, "two", election=election, durability="master")
    await sa.close()
    again = await attach_store(a, "one", election=election, durability="master")
    assert await again.await_master(15)
    await again.close()
    await other.close()


async def test_a_lost_master_under_load_loses_no_acknowledged_write(sim: Any) -> None:
    nodes = await _nodes(sim, 3, "sticky", CYCLE, GAP)
    async with anyio.create_task_group() as tg:
        _run(tg, nodes, writers=4)
        assert await wait_for(lambda: master_of(nodes) is not None, 20)
        assert await wait_for(lambda: all(len(n.acks) > 50 for n in nodes), 30)
        master = master_of(nodes)
        victim = next(n for n in nodes if n.node_id == master)
        survivors = [n for n in nodes if n is not victim]
        term = max(n.current_master()[0] for n in nodes)  # type: ignore[index]
        sim.take_down(victim.ep)
        assert await wait_for(lambda: all((m := n.current_master()) and m[0] > term for n in survivors), 30)
        assert master_of(survivors) != master
        acks = [len(n.acks) for n in survivors]
        assert await wait_for(lambda: all(len(n.acks) > a + 50 for n, a in zip(survivors, acks, strict=True)), 30)
        await check_converged(survivors, nodes)
        tg.cancel_scope.cancel()


async def test_a_lost_masters_last_will_starts_the_next_election_at_once(sim: Any) -> None:
    # cycle 20 s, gap 1 s: from the election's timers alone the successor would come ~17 s or more
    # after the loss; the last will (PeerLost -> Actor.holder_gone) makes the survivors bid within
    # gap / 2. Simulated time measures it exactly: well under 10 s.
    nodes = await _nodes(sim, 3, "sticky", 20.0, 1.0)
    async with anyio.create_task_group() as tg:
        _run(tg, nodes)
        assert await wait_for(lambda: all(n.current_master() for n in nodes), 90)
        master = master_of(nodes)
        victim = next(n for n in nodes if n.node_id == master)
        survivors = [n for n in nodes if n is not victim]
        term = max(n.current_master()[0] for n in nodes)  # type: ignore[index]
        lost = sim.now()
        sim.take_down(victim.ep)
        assert await wait_for(lambda: all((m := n.current_master()) and m[0] > term for n in survivors), 10), \
            "no new master within 10 s of the loss: the last will did not start the election"
        assert sim.now() - lost < 3.0
        assert master_of(survivors) != master
        tg.cancel_scope.cancel()


async def test_100_migrations_in_rotate_mode_lose_and_duplicate_nothing(sim: Any) -> None:
    nodes = await _nodes(sim, 3, "rotate", 0.4, 0.1, n_hosts=3)
    async with anyio.create_task_group() as tg:
        _run(tg, nodes, writers=2)
        assert await wait_for(lambda: len({m[0] for m in nodes[0].masters}) >= 101, 300, step=0.2)
        assert len({m[1] for m in nodes[0].masters}) == 3  # every node was master
        reference = await check_converged(nodes, nodes)
        assert sum(len(v) for k, v in reference.items() if k.startswith('"log-')) > 300
        tg.cancel_scope.cancel()


async def test_a_cut_off_deposed_master_changes_nothing_when_it_returns(sim: Any) -> None:
    nodes = await _nodes(sim, 3, "sticky", CYCLE, GAP)
    async with anyio.create_task_group() as tg:
        _run(tg, nodes, writers=2)
        assert await wait_for(lambda: master_of(nodes) is not None and all(len(n.acks) > 20 for n in nodes), 30)
        master = master_of(nodes)
        gone = next(n for n in nodes if n.node_id == master)
        others = [n for n in nodes if n is not gone]
        term = max(n.current_master()[0] for n in nodes)  # type: ignore[index]
        sim.take_down(gone.ep)  # it still believes it is master
        assert await wait_for(lambda: all((m := n.current_master()) and m[0] > term for n in others), 30)
        acks = [len(n.acks) for n in others]
        assert await wait_for(lambda: all(len(n.acks) > a + 20 for n, a in zip(others, acks, strict=True)), 30)
        sim.bring_back(gone.ep)
        before = len(gone.acks)
        assert await wait_for(lambda: len(gone.acks) > before and (m := gone.current_master()) is not None
                              and m[0] > term, 60)
        await check_converged(nodes, nodes)
        tg.cancel_scope.cancel()


async def test_sqlite_replicas_restarted_keep_acknowledged_writes(sim: Any, tmp_path: Any) -> None:
    paths = [tmp_path / f"n{i}.db" for i in range(2)]
    nodes = [await ElectedNode.attach(await sim.open(), "s", "sticky", CYCLE, GAP, backend="sqlite", path=p)
             for p in paths]
    async with anyio.create_task_group() as tg:
        _run(tg, nodes, writers=2)
        assert await wait_for(lambda: all(len(n.acks) > 30 for n in nodes), 30)
        for n in nodes:  # both go: only the files remain
            n.quiet()
            sim.take_down(n.ep)
        tg.cancel_scope.cancel()
    for n in nodes:
        await n.store.close()
    acked = {n.node_id: set(n.acks) for n in nodes}
    again = [await ElectedNode.attach(await sim.open(), "s", "sticky", CYCLE, GAP, backend="sqlite", path=p)
             for p in paths]
    async with anyio.create_task_group() as tg:
        _run(tg, again)
        assert await wait_for(lambda: master_of(again) is not None, 30)
        contents = await check_converged(again, again)
        for node_id, acks in acked.items():
            got = contents[json.dumps(f"log-{node_id}")]
            assert acks <= set(got) and len(got) == len(set(got))
        tg.cancel_scope.cancel()


async def test_store_writer_repeats_are_answered_not_applied(sim: Any) -> None:
    from broker_mqtt.store.commands import Increment
    from broker_mqtt.store.writer import StoreWriter

    election = {"cycle": CYCLE, "gap": GAP}
    a, b, w = await sim.open(), await sim.open(), await sim.open()
    sa = await attach_store(a, "sink", election=election)
    sb = await attach_store(b, "sink", election=election)
    assert await sa.await_master(15)
    for attempt in range(2):  # a task that ran twice: the same writer id, the same writes
        async with StoreWriter(w, "sink", "job-1/batch-0/part-3") as writer:
            assert await writer.await_master(10)
            for i in range(50):
                await writer.put_nowait(("row", i), {"attempt": attempt, "i": i})
            await writer.write(Increment("rows", 50))
            await writer.drain()
    assert await sa.await_idle(10) and await sb.await_idle(10)
    for s in (sa, sb):
        assert await s.get("rows") == 50
        assert await s.get(("row", 7)) == {"attempt": 0, "i": 7}
        assert len(s) == 51
    await sa.close()
    await sb.close()
