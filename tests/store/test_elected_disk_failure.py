"""An elected replica whose SQLite file fails, over a real mosquitto.

The fault is SQLite's own: ``PRAGMA max_page_count`` caps the file at the pages it has, so the next
commit that needs a page fails with "database or disk is full", as on a full disk. Before, that
BackendError escaped the store's loops and tore down the endpoint's task group: every store and
channel of the endpoint died with it.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _elected_sim import FailingFile, SimNet, elect

from broker_mqtt import Endpoint
from broker_mqtt.store import BackendError, StoreFailed, Timeout, attach_store
from broker_mqtt.store.commands import Put, PutUnique
from broker_mqtt.store.elected import ElectedStore
from broker_mqtt.transport.embedded import EmbeddedBroker

ELECTION = {"cycle": 1.0, "gap": 0.25}


def fill_up(store: ElectedStore) -> None:
    """The replica's file may grow no more: its next commit (on disk: write) that needs a page fails."""
    state: Any = store.replica.state
    db = state._db if state.on_disk else state._file._db  # (the SQLite connection)
    (pages,) = db.execute("PRAGMA page_count").fetchone()
    db.execute(f"PRAGMA max_page_count = {pages}")


def test_a_stopped_replica_sends_its_resignation_and_nothing_it_did_not_commit() -> None:
    """Replica.stop (sans-io): a master whose commit failed holds a record applied and not logged, a
    writer's answer maybe: only its resignation goes out. A follower sends nothing."""
    with SimNet(["a", "b", "c"], seed=4) as net:
        net.run(0.5)
        net.tag("a")
        net.run(1.0)
        assert net.masters() == ["a"]
        a, b = net.nodes["a"].replica, net.nodes["b"].replica
        a.write(Put("k", 1, None), net.now)
        a.tick(net.now, 1_000_000 + net.now)  # applied at the master (as at to_send): a record to log, not yet sent
        assert a.state.exists("k")
        out = a.stop(net.now)
        assert [msg[0] for msg in out] == ["resign"]
        assert not a.is_master and a.events() == []
        assert b.stop(net.now) == []


def test_a_disk_master_whose_file_fails_while_computing_a_write_stops_and_answers_nothing() -> None:
    """A state on disk reads its file to compute a write (a put_unique looks the key up): a read that
    fails must stop the replica (the BackendError out of its step, as a failed commit), not be taken
    for the command's own error and answered (a noop record) while the replica goes on."""
    with SimNet(["a", "b"], seed=4, resident="disk") as net:
        a = elect(net, "a")
        assert a.state.on_disk
        net.write("a", Put("k", 1, None))
        net.run(0.5)
        seq = a.state.last_seq

        a.state._conn = FailingFile  # type: ignore[attr-defined]  # (every read of the file fails)
        with pytest.raises(BackendError, match="disk I/O error"):
            net.write("a", PutUnique("k", 2, None, "a", 1))
        assert a.state.failed is not None and a.state.last_seq == seq  # no noop record applied


@pytest.mark.mosquitto
@pytest.mark.anyio
@pytest.mark.parametrize("resident", ["memory", "disk"])
async def test_a_master_whose_file_fills_up_stops_alone_and_a_new_master_takes_the_write(
        broker: EmbeddedBroker, namespace: str, tmp_path: Path, resident: str) -> None:
    path = tmp_path / "a.db"
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b, \
            Endpoint(broker, namespace=namespace) as c:
        sa = await attach_store(a, "cfg", backend="sqlite", path=path, election=ELECTION, resident=resident)
        assert await sa.await_master(15) and sa.is_master  # the only replica yet: sticky from now on
        sb = await attach_store(b, "cfg", election=ELECTION)
        sc = await attach_store(c, "cfg", election=ELECTION)
        other = await attach_store(a, "other", election=ELECTION, durability="master")  # same endpoint
        assert await other.await_master(15)
        for i in range(20):
            await sb.put(("k", i), i)
        assert await sa.await_idle(10) and await sb.await_idle(10) and await sc.await_idle(10)
        assert sa.is_master

        async with sa.events(data=False) as events:
            fill_up(sa)
            with anyio.fail_after(20):
                await sb.put("big", "x" * 200_000)  # needs pages the file may not take
            seen = []
            with anyio.fail_after(10):
                async for event in events:  # the stream ends after the failure
                    seen.append(event)

        # the replica stopped, with the file's error, and said so last on its stream
        assert isinstance(sa.failure, BackendError) and "database or disk is full" in str(sa.failure)
        assert not await sa.await_master() and not await sa.await_idle()  # (no timeout: closed)
        assert sa.closed and not sa.is_master
        assert isinstance(seen[-1], StoreFailed) and seen[-1].error is sa.failure
        with pytest.raises(BackendError, match="database or disk is full"):
            await sa.put("after", 1)
        async with sa.events() as late:  # opened after the stop: ends at once, with why
            assert [e async for e in late] == [StoreFailed("cfg", sa.failure)]
        # the write was taken by the new master, and both others hold it
        assert sb.master is not None and sb.master != sa.node_id
        assert await sb.await_idle(10) and await sc.await_idle(10)
        assert await sb.get("big") == await sc.get("big") == "x" * 200_000
        # the endpoint and its other store go on
        await other.put("still", "here")
        assert await other.get("still") == "here"

        # attached again, the replica loads what its file committed and catches up
        again = await attach_store(a, "cfg", backend="sqlite", path=path, election=ELECTION, resident=resident)
        assert await again.await_master(15)
        await sc.put("later", 2)
        for s in (again, sb, sc):  # each holds the last write (durable at two of them when answered)
            with anyio.fail_after(15):
                while not s.exists_nowait("later"):
                    await s.wait_change()
        assert dict(await again.items()) == dict(await sb.items()) == dict(await sc.items())
        assert await again.get("big") == "x" * 200_000
        assert again.failure is None
        for s in (again, sb, sc, other):
            await s.close()


@pytest.mark.mosquitto
@pytest.mark.anyio
async def test_a_followers_pending_write_fails_as_outcome_unknown_when_its_file_fills_up(
        broker: EmbeddedBroker, namespace: str, tmp_path: Path) -> None:
    """The follower's write reached the master, which applied it; the follower's file then refused
    the record. Its write fails with Timeout (outcome unknown), not the BackendError, which says that
    nothing changed: a caller that retried an increment would apply it twice."""
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b, \
            Endpoint(broker, namespace=namespace) as c:
        sb = await attach_store(b, "cfg", election=ELECTION)
        assert await sb.await_master(15) and sb.is_master
        sa = await attach_store(a, "cfg", backend="sqlite", path=tmp_path / "a.db", election=ELECTION,
                                candidate=False)
        sc = await attach_store(c, "cfg", election=ELECTION, candidate=False)
        assert await sa.await_master(15) and await sc.await_master(15)
        await sa.put("small", 1)
        fill_up(sa)
        with anyio.fail_after(20), pytest.raises(Timeout, match="outcome unknown") as caught:
            await sa.put("big", "x" * 200_000)
        assert caught.value.__cause__ is sa.failure and isinstance(sa.failure, BackendError)
        with anyio.fail_after(15):
            while not sc.exists_nowait("big"):  # it was applied: the master and the other follower hold it
                await sc.wait_change()
        assert sb.master == sb.node_id and await sb.get("big") == "x" * 200_000
        await sa.close()  # (returns at once: stopped)
        for s in (sb, sc):
            await s.close()


@pytest.mark.mosquitto
@pytest.mark.anyio
async def test_a_node_whose_store_file_cannot_grow_exits_1_and_says_why(
        broker: EmbeddedBroker, namespace: str, tmp_path: Path) -> None:
    """``broker-mqtt node`` with a SQLite store, in its own process, whose files may not grow past
    512 KiB (``ulimit -f``: the kernel refuses the write, as a full disk does): it leaves and exits 1
    so that a supervisor restarts it, where before its endpoint died with a traceback."""
    config = tmp_path / "node.toml"
    db = tmp_path / "n.db"
    config.write_text(f'[[store]]\nname = "cfg"\nbackend = "sqlite"\npath = "{db}"\n'
                      'election = { cycle = 1.0, gap = 0.25 }\n')
    node = [sys.executable, "-m", "broker_mqtt", "node", "--broker", broker.url, "--namespace", namespace,
            "--config", str(config)]
    with (tmp_path / "err").open("w") as err:
        proc = subprocess.Popen(["bash", "-c", f"ulimit -f 512 && exec {shlex.join(node)}"], stderr=err,
                                stdout=subprocess.DEVNULL)
    try:
        async with Endpoint(broker, namespace=namespace) as b, Endpoint(broker, namespace=namespace) as c:
            sb = await attach_store(b, "cfg", election=ELECTION)
            sc = await attach_store(c, "cfg", election=ELECTION)
            assert await sb.await_master(30)
            with anyio.fail_after(60):
                for i in range(40):  # 8 MB in all: the node's file cannot take it
                    if proc.poll() is not None:
                        break
                    await sb.put(("big", i), str(i) * 200_000)  # (answered by the next master, if it was)
                await anyio.to_thread.run_sync(proc.wait, abandon_on_cancel=True)
            assert await sb.await_master(30)
            await sb.put("after", 1)  # the two others go on
            assert await sc.await_idle(10) and await sc.get("after") == 1
            await sb.close()
            await sc.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    text = (tmp_path / "err").read_text()
    assert proc.returncode == 1, text
    assert "store cfg stopped: " in text and ("disk I/O error" in text or "disk is full" in text), text
    assert "Traceback" not in text


@pytest.mark.mosquitto
@pytest.mark.anyio
async def test_a_queue_whose_store_stops_ends_its_consumers_and_refuses_one_bad_publish_alone(
        broker: EmbeddedBroker, namespace: str, tmp_path: Path) -> None:
    from broker_mqtt.queue import attach_queue

    async with Endpoint(broker, namespace=namespace) as a:
        q = await attach_queue(a, "jobs", backend="sqlite", path=tmp_path / "q.db", durability="master",
                               election=ELECTION)
        assert q.store is not None and await q.store.await_master(15)
        # one publish outside the data model, among good ones sharing its write: it alone fails
        results: dict[int, Any] = {}

        async def publish(i: int, data: Any) -> None:
            try:
                results[i] = await q.publish(data)
            except BackendError as exc:
                results[i] = exc

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(publish, i, object() if i == 3 else ["job", i])
        assert isinstance(results.pop(3), BackendError)
        assert all(isinstance(v, int) for v in results.values()) and len(results) == 7
        # a shared write holding it (the group commit's batch): refused when placed, the rest go out
        first, bad, last = await q._publisher._publish_batch([["job", "a"], object(), ["job", "b"]])
        assert isinstance(first, int) and last == first + 1 and isinstance(bad, BackendError)

        async with q.consume(prefetch=4) as deliveries:
            seen = 0
            with anyio.fail_after(20):
                async for _d in deliveries:  # ends once the store stopped
                    seen += 1
                    if seen == 2:
                        fill_up(q.store)
                        with pytest.raises(Timeout, match="outcome unknown"):  # (pending when it stopped)
                            await q.publish_many(["x" * 200_000])
        assert seen >= 2 and isinstance(q.store.failure, BackendError) and q.stopped
        await q.close()
