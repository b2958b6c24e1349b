"""The integration tests that matter, across a 2-node ejabberd cluster (tests/cluster/ejabberd.py), with the
endpoints spread over both broker nodes: pub/sub and peers, an elected store whose master process is killed,
a work queue whose consumer process is killed, and a broker node killed under endpoints that know both
nodes' URLs. Skipped when ejabberd is not installed (``make test-cluster`` installs it and runs them).

The assertions are about data (nothing acknowledged lost, nothing applied twice), never about speed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiomqtt
import anyio
import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "store"), str(HERE.parent / "queue")]

from ejabberd import EjabberdCluster, EjabberdError, ejabberd_missing  # noqa: E402
from elected_procs import ElectedProc, check_converged, wait_for  # noqa: E402
from queue_procs import QueueProc  # noqa: E402
from subscriber_helpers import nothing_more, take  # noqa: E402

from broker_mqtt import Endpoint, PeerLost  # noqa: E402

_missing = ejabberd_missing()
pytestmark = [pytest.mark.cluster, pytest.mark.skipif(_missing is not None, reason=str(_missing))]

CYCLE, GAP = 1.0, 0.25


@pytest.fixture(scope="module")
def cluster() -> Iterator[EjabberdCluster]:
    with EjabberdCluster() as c:
        yield c


@pytest.fixture
def ej(cluster: EjabberdCluster) -> Iterator[EjabberdCluster]:
    """The module's cluster, whole again after the test: a node a test killed is restarted, and one that
    stayed out of the cluster (after a hang, say) is killed and restarted."""
    yield cluster
    for n in cluster.nodes:
        cluster.cont(n.index)
        if not n.running:
            cluster.restart(n.index)
    try:
        cluster.wait_healthy(30)
    except EjabberdError:
        for n in cluster.nodes[1:]:
            cluster.kill(n.index)
            cluster.restart(n.index)


@pytest.fixture
def procs() -> Iterator[Any]:
    started: list[Any] = []

    def start(kind: type, *args: Any, **kwargs: Any) -> Any:
        p = kind(*args, **kwargs)
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()


def _master_of(nodes: list[ElectedProc]) -> str | None:
    seen = [n.current_master() for n in nodes if n.current_master()]
    return max(seen)[1] if seen else None  # type: ignore[type-var]


# -- the broker itself --------------------------------------------------------------------------------

@pytest.mark.anyio
async def test_cluster_runs_two_nodes_with_the_acl_of_the_topic_layout(ej: EjabberdCluster, namespace: str) -> None:
    assert ej.running_nodes(1) == ej.running_nodes(2) == sorted(n.name for n in ej.nodes)
    kw: dict[str, Any] = {"hostname": "127.0.0.1", "protocol": aiomqtt.ProtocolVersion.V5,
                          "username": "u1@localhost", "password": ej.password("u1")}
    async with aiomqtt.Client(port=ej.port(1), identifier=f"acl-{namespace}", **kw) as c:
        assert [r.value for r in await c.subscribe(f"{namespace}/d/+/x/#", qos=1)] == [1]
        assert [r.value for r in await c.subscribe(f"{namespace}/p/+", qos=1)] == [1]
        # outside the layout: refused (ejabberd answers 0x8F "topic filter invalid", not 0x87 "not authorized")
        assert [r.value for r in await c.subscribe("#", qos=1)] == [0x8F]
        assert [r.value for r in await c.subscribe(f"{namespace}/other/#", qos=1)] == [0x8F]
    with pytest.raises(aiomqtt.MqttError):
        async with aiomqtt.Client(port=ej.port(2), identifier=f"bad-{namespace}",
                                  **{**kw, "password": "wrong"}):
            pass


@pytest.mark.anyio
@pytest.mark.xfail(strict=True, reason="ejabberd 23.01: a retained message published on one cluster node is "
                   "not delivered to a later subscriber on another node (the table is replicated, the "
                   "delivery on subscribe is not); a late endpoint there does not see earlier peers")
async def test_retained_message_reaches_a_later_subscriber_on_the_other_node(ej: EjabberdCluster,
                                                                             namespace: str) -> None:
    kw: dict[str, Any] = {"hostname": "127.0.0.1", "protocol": aiomqtt.ProtocolVersion.V5,
                          "username": "u1@localhost", "password": ej.password("u1")}
    topic = f"{namespace}/d/c/retained"
    async with aiomqtt.Client(port=ej.port(1), identifier=f"r1-{namespace}", **kw) as c:
        await c.publish(topic, b"kept", qos=1, retain=True)
    got: dict[int, bytes | None] = {}
    for node in (1, 2):
        async with aiomqtt.Client(port=ej.port(node), identifier=f"r2-{namespace}-{node}", **kw) as c:
            await c.subscribe(topic, qos=1)
            got[node] = None
            with anyio.move_on_after(3):
                async for m in c.messages:
                    got[node] = bytes(m.payload)  # type: ignore[arg-type]
                    break
    assert got[1] == b"kept"  # on the node it was published at
    assert got[2] == b"kept"


# -- pub/sub and peers ---------------------------------------------------------------------------------

@pytest.mark.anyio
async def test_peers_and_messages_across_broker_nodes(ej: EjabberdCluster, namespace: str) -> None:
    async with Endpoint(ej.url(1, "u1"), namespace=namespace, name="one") as a, a.subscribe("/to-one") as sub_a:
        async with Endpoint(ej.url(2, "u2"), namespace=namespace, name="two") as b:
            async with b.subscribe("/to-two") as sub_b:
                # a (node 1) sees b (node 2) appear, with its subscription
                with anyio.fail_after(30):
                    while not any(p.id == b.id and p.topics == ("/to-two",) for p in a.peers()):
                        await anyio.sleep(0.02)
                # b learns of a from a's next announcement (ejabberd does not hand b a's retained one)
                async with a.subscribe("/more"):
                    with anyio.fail_after(30):
                        while not any(p.id == a.id and set(p.topics) == {"/to-one", "/more"} for p in b.peers()):
                            await anyio.sleep(0.02)
                    await b.publish("/to-one/x", "from node 2")
                    await a.publish("/to-two/y", {"from": "node 1"})
                    got_a = await take(sub_a, 1)
                    got_b = await take(sub_b, 1)
                    assert [(m.topic, m.sender, m.data) for m in got_a] == [("/to-one/x", b.id, "from node 2")]
                    assert [(m.topic, m.sender, m.data) for m in got_b] == [("/to-two/y", a.id, {"from": "node 1"})]
                    for i in range(200):  # order per publisher holds across the nodes
                        await b.publish("/to-one/seq", i)
                    assert [m.data for m in await take(sub_a, 200, timeout=30)] == list(range(200))
                    await nothing_more(sub_b)


@pytest.mark.anyio
async def test_peer_killed_on_one_node_is_lost_on_the_other(ej: EjabberdCluster, namespace: str,
                                                            node_process: type) -> None:
    async with Endpoint(ej.url(1, "u1"), namespace=namespace) as a, a.status() as events:
        node = node_process(ej.url(2, "u2"), namespace)
        assert await a.await_peer(node.id, timeout=30)
        node.kill()  # SIGKILL: node 2 publishes its last will, node 1 delivers it
        with anyio.fail_after(30):
            async for event in events:
                if isinstance(event, PeerLost):
                    assert event.peer.id == node.id
                    break
        assert node.id not in {p.id for p in a.peers()}


# -- an elected store -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_kill_9_master_with_replicas_on_both_broker_nodes(ej: EjabberdCluster, namespace: str, procs: Any) -> None:
    urls = [ej.url(1, "u1"), ej.url(2, "u2"), ej.url(1, "u3")]
    nodes = [procs(ElectedProc, url, namespace, "s", "sticky", CYCLE, GAP, writers=2) for url in urls]
    for n in nodes:
        n.wait_ready()
    assert wait_for(lambda: _master_of(nodes) is not None, 30)
    assert wait_for(lambda: all(len(n.acks) > 30 for n in nodes), 60)
    master = _master_of(nodes)
    victim = next(n for n in nodes if n.node_id == master)
    survivors = [n for n in nodes if n is not victim]
    term = max(n.current_master()[0] for n in nodes)  # type: ignore[index]
    victim.kill()
    assert wait_for(lambda: all(n.current_master() and n.current_master()[0] > term for n in survivors), 30)  # type: ignore[index]
    assert _master_of(survivors) not in (None, master)
    acks = [len(n.acks) for n in survivors]
    assert wait_for(lambda: all(len(n.acks) > a + 30 for n, a in zip(survivors, acks, strict=True)), 60)
    check_converged(survivors, nodes)


# -- a work queue ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_queue_consumer_killed_its_messages_go_to_another(ej: EjabberdCluster, namespace: str, procs: Any) -> None:
    n = 20
    pub = procs(QueueProc, ej.url(1, "u1"), namespace, "jobs", "--publish", str(n), "--concurrency", "4")
    procs(QueueProc, ej.url(2, "u2"), namespace, "jobs", "--no-candidate").wait_ready()  # the standby replica
    assert wait_for(lambda: len(pub.published) == n, 60)
    holder = procs(QueueProc, ej.url(2, "u3"), namespace, "jobs", "--no-replica", "--consume", "hold",
                   "--prefetch", "5")
    assert wait_for(lambda: len(holder.delivered) == 5, 30)
    taker = procs(QueueProc, ej.url(1, "u4"), namespace, "jobs", "--no-candidate", "--consume", "accept")
    assert wait_for(lambda: len(taker.accepted()) == n - 5, 60)
    assert not {d for _, _, d, _ in holder.delivered} & set(taker.accepted())  # held: not given out twice
    holder.kill()
    # back when the master sees the holder's endpoint gone (its last will), long before the lease runs out
    assert wait_for(lambda: len(taker.accepted()) == n, 30), f"accepted {len(taker.accepted())} of {n}"
    accepted = taker.accepted()
    assert sorted(accepted) == sorted(("p", i) for i in range(n))
    held = {msg_id for msg_id, _, _, _ in holder.delivered}
    assert {(msg_id, count) for msg_id, count, _, _ in taker.delivered if msg_id in held} == {(i, 2) for i in held}


# -- a broker node killed -------------------------------------------------------------------------------

@pytest.mark.anyio
async def test_endpoint_moves_to_the_other_broker_node_when_its_node_dies(ej: EjabberdCluster,
                                                                          namespace: str) -> None:
    both = [ej.url(2, "u1"), ej.url(1, "u1")]  # node 2 first: it is the one killed
    async with Endpoint(ej.url(1, "u2"), namespace=namespace) as watcher, watcher.subscribe("/moved") as sub:
        async with Endpoint(both, namespace=namespace) as mover:
            assert await watcher.await_peer(mover.id, timeout=30)
            await mover.publish("/moved", "before")
            assert [m.data for m in await take(sub, 1)] == ["before"]
            await anyio.to_thread.run_sync(ej.kill, 2)
            await mover.publish("/moved", "after")  # queued while it reconnects, sent on node 1
            assert [m.data for m in await take(sub, 1, timeout=30)] == ["after"]
            assert mover.connected


@pytest.mark.slow
def test_broker_node_killed_under_an_elected_store_loses_no_acknowledged_write(ej: EjabberdCluster, namespace: str,
                                                                               procs: Any) -> None:
    one_first = f"{ej.url(1, 'u1')},{ej.url(2, 'u1')}"
    two_first = f"{ej.url(2, 'u2')},{ej.url(1, 'u2')}"
    nodes = [procs(ElectedProc, url, namespace, "s", "sticky", CYCLE, GAP, writers=2)
             for url in (one_first, two_first, two_first)]
    for n in nodes:
        n.wait_ready()
    assert wait_for(lambda: _master_of(nodes) is not None, 30)
    assert wait_for(lambda: all(len(n.acks) > 30 for n in nodes), 60)
    ej.kill(2)  # two of the three replicas lose their broker: they go on through node 1
    acks = [len(n.acks) for n in nodes]
    assert wait_for(lambda: all(len(n.acks) > a + 30 for n, a in zip(nodes, acks, strict=True)), 90), \
        f"acks before {acks}, now {[len(n.acks) for n in nodes]}"
    check_converged(nodes, nodes)
    ej.restart(2)
    assert ej.running_nodes(2) == sorted(n.name for n in ej.nodes)



@pytest.mark.slow
def test_hung_broker_node_under_an_elected_store_loses_no_acknowledged_write(ej: EjabberdCluster, namespace: str,
                                                                            procs: Any) -> None:
    """SIGSTOP of broker node 2: its clients' connections stay open and go silent; they give up on it
    after their connect timeout or keepalive and carry on through node 1, once node 1 took node 2 for
    dead (ejabberd's net_ticktime, 10 s here: until then the takeover of their sessions waits for node 2).
    Then node 2 resumes."""
    one_first = f"{ej.url(1, 'u1')},{ej.url(2, 'u1')}"
    two_first = f"{ej.url(2, 'u2')},{ej.url(1, 'u2')}"
    nodes = [procs(ElectedProc, url, namespace, "s", "sticky", CYCLE, GAP, writers=2)
             for url in (one_first, two_first, two_first)]
    for n in nodes:
        n.wait_ready()
    assert wait_for(lambda: _master_of(nodes) is not None, 30)
    assert wait_for(lambda: all(len(n.acks) > 30 for n in nodes), 60)
    ej.stop(2)
    try:
        acks = [len(n.acks) for n in nodes]
        assert wait_for(lambda: all(len(n.acks) > a + 30 for n, a in zip(nodes, acks, strict=True)), 120), \
            f"acks before {acks}, now {[len(n.acks) for n in nodes]}"
    finally:
        ej.cont(2)
    check_converged(nodes, nodes)
    # each node took the other for dead (net_ticktime): mnesia does not merge them again by itself; node 2,
    # restarted, rejoins
    two = ej.nodes[1].name
    assert wait_for(lambda: ej.running_nodes(2) == [two], 30), ej.running_nodes(2)
    ej.kill(2)
    ej.restart(2)
    assert ej.healthy()
