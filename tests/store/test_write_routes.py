"""Writes go to the master's endpoint only (``/$store/<name>/ew``), not to every replica.

Sans-io: the route of a write follows the master named by its epoch, for replica-less writers
(:class:`WriterCore`) and for replicas alike, and falls back to the broadcast topic ``e`` when the
write names no master's endpoint. Live (mosquitto): a replica that is not master receives none of a
writer's writes, the writes travel on the master's unicast MQTT topic, and a replica-less writer's
writes still all land, once, across a kill -9 of the master.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import aiomqtt
import anyio
import pytest
from _elected_sim import SimNet, record_sends
from elected_procs import ElectedProc, check_converged

from broker_mqtt import Endpoint
from broker_mqtt.store import attach_store
from broker_mqtt.store.commands import Put
from broker_mqtt.store.routes import answers_topic, master_topic, replication_topic, routes, writes_topic
from broker_mqtt.store.writer import StoreWriter
from broker_mqtt.store.writer_core import WriterCore
from broker_mqtt.transport.embedded import EmbeddedBroker
from broker_mqtt.wire import codec
from broker_mqtt.wire.message import decode_batch

A, B, C = (uuid.UUID(int=i + 1).hex for i in range(3))  # endpoint ids: node ids are "<hex>.<random>"


# -- routes ------------------------------------------------------------------------------------------

def test_a_write_goes_to_the_endpoint_of_the_master_its_epoch_names() -> None:
    write = ["write", "w", 1, C, ["put", "k", 1], [4, f"{A}.1f2e"]]
    assert routes("s", write) == [(writes_topic("s"), uuid.UUID(hex=A))]
    assert writes_topic("s") == "/$store/s/ew"
    assert writes_topic("s") not in (replication_topic("s"), master_topic("s"), answers_topic("s"))


@pytest.mark.parametrize("epoch", [None, [4, "a.0"], [4, "not-hex-at-all-not-hex-at-all-xx.1"], [4, A], "x", [4],
                                   [4, None]])
def test_a_write_that_names_no_masters_endpoint_is_broadcast(epoch: Any) -> None:
    assert routes("s", ["write", "w", 1, C, ["put", "k", 1], epoch]) == [(replication_topic("s"), None)]
    assert routes("s", ["write", "w", 1, C, ["put", "k", 1]]) == [(replication_topic("s"), None)]


def test_other_messages_keep_their_routes() -> None:
    epoch = [2, f"{A}.00"]
    assert routes("s", ["log", epoch, []]) == [(replication_topic("s"), None)]
    assert routes("s", ["ack", epoch, f"{B}.00", 3]) == [(writes_topic("s"), uuid.UUID(hex=A))]  # to its master
    assert routes("s", ["ack", [1, "m"], f"{B}.00", 3]) == [(replication_topic("s"), None)]
    assert routes("s", ["wack", epoch, f"{B}.00", 3, []]) == [(replication_topic("s"), None)]  # a replica's: on e
    assert routes("s", ["wack", epoch, "w", 3, [], C]) == [(answers_topic("s"), uuid.UUID(hex=C))]
    assert routes("s", ["active", epoch, [0, None], [], [], []]) == [(replication_topic("s"), None),
                                                                       (master_topic("s"), None)]


# -- the writer without a replica --------------------------------------------------------------------

def _numbers(sent: list[Any]) -> list[int]:
    """The write numbers in ``sent`` (``write`` and ``writes`` messages)."""
    return [n for m in sent for n in ([m[2]] if m[0] == "write" else [n for n, _ in m[3]])]


def test_a_write_sends_what_was_placed_not_what_its_caller_changed_since() -> None:
    """A write held for want of a master goes out as it was placed: its caller's lists changed
    afterwards (a settle's items, a publish's data) change nothing of it, and an int or str subclass
    in it goes as the int or str (as every replica decodes it)."""
    from broker_mqtt.queue.commands import Publish, Settle

    class MsgId(int):
        pass

    # (the command, where its wire form holds the items)
    for make, at in ((lambda items: Settle(f"{C}.owner", items), 2), (lambda items: Publish(items, None), 1)):
        core = WriterCore("w", C, 0.0)
        items: list[list[Any]] = [[MsgId(1), "accept", None, 1]]
        core.write(make(items), 0.0)
        items[0][1] = "reject"
        items.append([2, "accept", object(), 1])  # (placed, it would not encode)
        core.set_master((1, f"{A}.aa"), f"{A}.aa", 0.1)
        (sent,) = core.to_send()
        assert sent[0] == "write" and sent[4][at] == [[1, "accept", None, 1]]
        assert type(sent[4][at][0][0]) is int
        codec.encode(sent)


def test_a_replica_less_writer_sends_to_each_master_it_learns_and_holds_writes_without_one() -> None:
    core = WriterCore("job/p0", C, 0.0, retry_interval=1.0)
    core.write(Put("k", 1), 0.0)
    assert core.to_send() == []  # no master known: held, not broadcast
    core.set_master((1, f"{A}.aa"), f"{A}.aa", 0.1)
    core.write(Put("k", 2), 0.2)
    sent = core.to_send()
    assert [m[0] for m in sent] == ["writes"] and _numbers(sent) == [1, 2]  # queued together: one message
    assert all(routes("s", m) == [(writes_topic("s"), uuid.UUID(hex=A))] for m in sent)
    core.tick(1.5)  # unanswered for retry_interval: sent again, to the same master
    again = core.to_send()
    assert _numbers(again) == [1, 2] and all(routes("s", m)[0][1] == uuid.UUID(hex=A) for m in again)
    core.clear_master()  # between masters: nothing goes out
    core.tick(3.0)
    assert core.to_send() == []
    core.set_master((2, f"{B}.bb"), f"{B}.bb", 3.1)  # the next master gets every unanswered write
    moved = core.to_send()
    assert _numbers(moved) == [1, 2]
    assert all(m[4] == [2, f"{B}.bb"] and routes("s", m) == [(writes_topic("s"), uuid.UUID(hex=B))] for m in moved)
    core.write(Put("k", 3), 3.2)  # alone: the one-write form
    assert [m[0] for m in core.to_send()] == ["write"]


# -- replicas (sans-io, simulated network) ------------------------------------------------------------

def test_a_replicas_writes_go_to_its_master_and_follow_it_across_a_handover() -> None:
    net = SimNet([A, B, C], seed=5)
    net.tag(A)
    net.run(1.0)
    out = record_sends(net.nodes[B].replica)
    n1 = net.write(B, Put("x", 1))
    writes = [m for m in out if m[0] == "write"]
    assert writes and all(routes("s", m) == [(writes_topic("s"), uuid.UUID(hex=A))] for m in writes)
    net.run(1.0)
    assert net.nodes[B].done == {n1: None}

    net.kill(A)  # B's next write waits for the next master, then goes to it
    n2 = net.write(B, Put("x", 2))
    net.tag(C)
    net.run(3.0)
    assert net.nodes[B].done == {n1: None, n2: None}
    late = [m for m in out if m[0] == "write" and m[2] == n2]
    assert late and all(routes("s", m) == [(writes_topic("s"), uuid.UUID(hex=C))] for m in late)
    assert net.nodes[C].replica.state.get("x") == 2


def test_a_replicas_answer_stays_on_the_log_topic_after_the_records() -> None:
    net = SimNet([A, B], seed=6)
    net.tag(A)
    net.run(1.0)
    out = record_sends(net.nodes[A].replica)
    net.write(B, Put("y", 1))
    net.run(1.0)
    kinds = [m[0] for m in out if m[0] in ("log", "wack")]
    assert kinds.index("log") < kinds.index("wack")
    wack = next(m for m in out if m[0] == "wack")
    assert routes("s", wack) == [(replication_topic("s"), None)]


def test_a_write_that_reaches_a_replica_that_is_not_master_changes_nothing() -> None:
    net = SimNet([A, B, C], seed=7)
    net.tag(A)
    net.run(1.0)
    follower = net.nodes[B].replica
    before = (follower.state.last_seq, dict(follower.state.items()))
    follower.to_send()
    # meant for the master, and meant for this follower's own (never won) epoch: both ignored
    follower.handle(["write", "w", 1, C, ["put", "k", 1], list(net.nodes[A].replica.epoch)], net.now)
    follower.handle(["write", "w", 1, C, ["put", "k", 1], [99, f"{B}.0"]], net.now)
    assert [m for m in follower.to_send() if m[0] in ("log", "wack")] == []
    assert (follower.state.last_seq, dict(follower.state.items())) == before


# -- live ------------------------------------------------------------------------------------------

CYCLE, GAP = 1.0, 0.25


def _count_received(store: Any) -> dict[str, int]:
    """Count, by kind, the messages the store's subscription hands to its replica; ``write`` counts
    the writes of ``writes`` messages too."""
    counts: dict[str, int] = {}
    handle = store.replica.handle

    def counting(msg: Any, now: float, **kw: Any) -> None:
        if isinstance(msg, list) and msg and isinstance(msg[0], str):
            counts[msg[0]] = counts.get(msg[0], 0) + 1
            if msg[0] == "writes":
                counts["write"] = counts.get("write", 0) + len(msg[3])
        handle(msg, now, **kw)

    store.replica.handle = counting
    return counts


@pytest.mark.mosquitto
@pytest.mark.anyio
async def test_only_the_master_receives_writes_and_they_travel_on_its_unicast_topic(
        broker: EmbeddedBroker, namespace: str) -> None:
    election = {"cycle": CYCLE, "gap": GAP}
    seen: list[tuple[str, str, str]] = []  # (MQTT topic, node topic, message kind) of every store message

    async def observe(ready: anyio.Event) -> None:
        async with aiomqtt.Client(broker.host, broker.port, identifier=f"observer-{namespace}") as client:
            await client.subscribe(f"{namespace}/#")
            ready.set()
            async for m in client.messages:
                messages, _ = decode_batch(bytes(m.payload))  # type: ignore[arg-type]
                for nm in messages:
                    if nm[4].startswith("/$store/w/"):
                        value = codec.decode(nm[5])
                        kind = value[0] if isinstance(value, list) else "?"
                        for _ in value[3] if kind == "writes" else [None]:  # each write of a group
                            seen.append((str(m.topic), nm[4], "write" if kind == "writes" else kind))

    async with anyio.create_task_group() as tg:
        ready = anyio.Event()
        tg.start_soon(observe, ready)
        await ready.wait()
        async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b, \
                Endpoint(broker, namespace=namespace) as c, Endpoint(broker, namespace=namespace) as w:
            sa = await attach_store(a, "w", election=election)
            assert await sa.await_master(15) and sa.is_master
            sb = await attach_store(b, "w", election=election)  # a candidate standby
            sc = await attach_store(c, "w", election=election, candidate=False)
            assert await sb.await_master(15) and await sc.await_master(15)
            got = {s: _count_received(s) for s in (sa, sb, sc)}
            async with StoreWriter(w, "w", "job-1/part-0") as writer:
                assert await writer.await_master(10)
                for i in range(100):
                    await writer.put_nowait(("row", i), i)
                await writer.drain()
            await sc.put("from-c", 1)  # a replica's own write: to the master only, too
            await sb.put("from-b", 2)
            assert await sa.await_idle(10) and await sb.await_idle(10) and await sc.await_idle(10)
            for s in (sa, sb, sc):
                assert len(s) == 102 and await s.get(("row", 99)) == 99 and await s.get("from-c") == 1
            assert got[sa].get("write", 0) >= 102  # every write (a retry may add some)
            assert got[sa].get("writes", 0) >= 1  # the writer's writes placed together went together
            assert got[sb].get("write", 0) == 0 and got[sc].get("write", 0) == 0
            assert got[sb].get("log", 0) > 0 and got[sc].get("log", 0) > 0  # they do follow the log
            assert got[sa].get("ack", 0) > 0 and got[sb].get("ack", 0) == got[sc].get("ack", 0) == 0  # master's only
            with anyio.fail_after(30):  # the observer sees the writes a little after the master
                while len([x for x in seen if x[2] == "write"]) < 102:
                    await anyio.sleep(0.05)
            writes = [(t, nt) for t, nt, kind in seen if kind == "write"]
            # on the master's unicast topics, each naming its writer's endpoint (w, and replicas c and b)
            assert set(writes) == {(f"{namespace}/u/{a.id.hex}/{e.client_id}/$store/w/ew", writes_topic("w"))
                                   for e in (w, b, c)}
            assert not [x for x in seen if x[1] == replication_topic("w") and x[2] == "write"]
            for s in (sa, sb, sc):
                await s.close()
        tg.cancel_scope.cancel()


@pytest.mark.mosquitto
@pytest.mark.anyio
async def test_a_writer_beside_the_master_on_its_endpoint(broker: EmbeddedBroker, namespace: str) -> None:
    """A writer without a replica on the master's own endpoint: no broker echo brings it the
    master's announcements or answers, nor the master its writes; they are handed over in-process."""
    election = {"cycle": CYCLE, "gap": GAP}
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        sa = await attach_store(a, "beside", election=election)
        assert await sa.await_master(15) and sa.is_master
        sb = await attach_store(b, "beside", election=election, candidate=False)  # confirms (durability "one")
        assert await sb.await_master(15)
        async with StoreWriter(a, "beside", "job-3/part-0") as writer:
            assert await writer.await_master(10)
            assert writer.core.master == sa.node_id
            for i in range(20):
                await writer.put_nowait(("row", i), i)
            with anyio.fail_after(10):
                await writer.drain()  # every write answered
            await writer.put("last", "x")
        assert await sa.await_idle(10) and await sb.await_idle(10)
        for s in (sa, sb):
            assert len(s) == 21 and await s.get(("row", 19)) == 19 and await s.get("last") == "x"
        for s in (sa, sb):
            await s.close()


@pytest.mark.mosquitto
@pytest.mark.slow
@pytest.mark.anyio
async def test_replica_less_writes_survive_a_kill_9_of_the_master(broker: EmbeddedBroker, namespace: str) -> None:
    nodes = [ElectedProc(broker.url, namespace, "s", "sticky", CYCLE, GAP) for _ in range(3)]
    try:
        for n in nodes:
            await anyio.to_thread.run_sync(n.wait_ready)

        async def until(cond: Any, timeout: float) -> bool:
            with anyio.move_on_after(timeout):
                while not cond():
                    await anyio.sleep(0.05)
                return True
            return False

        def master() -> str | None:
            seen = [n.current_master() for n in nodes if n.current_master()]
            return max(seen)[1] if seen else None  # type: ignore[type-var]

        assert await until(lambda: master() is not None and all(n.current_master() for n in nodes), 20)
        acked: list[int] = []
        stop = anyio.Event()
        async with Endpoint(broker, namespace=namespace) as w, StoreWriter(w, "s", "job-2/part-1") as writer:
            assert await writer.await_master(10)

            async def write_all() -> None:
                i = 0
                while not stop.is_set():
                    await writer.put(f"w{i}", i)
                    acked.append(i)
                    i += 1

            async with anyio.create_task_group() as tg:
                tg.start_soon(write_all)
                assert await until(lambda: len(acked) > 50, 30)
                old = master()
                victim = next(n for n in nodes if n.node_id == old)
                survivors = [n for n in nodes if n is not victim]
                term = max(n.current_master()[0] for n in nodes)  # type: ignore[index]
                victim.kill()
                assert await until(lambda: all(n.current_master() and n.current_master()[0] > term  # type: ignore[index]
                                               for n in survivors), 30)
                assert master() != old
                count = len(acked)
                assert await until(lambda: len(acked) > count + 50, 30), "writes stopped after the kill"
                stop.set()
            assert writer.core.master is not None and writer.core.master.split(".")[0] != old.split(".")[0]  # type: ignore[union-attr]
        contents = await anyio.to_thread.run_sync(check_converged, survivors, survivors)
        for i in acked:
            assert contents[json.dumps(f"w{i}")] == i
    finally:
        for n in nodes:
            n.kill()
