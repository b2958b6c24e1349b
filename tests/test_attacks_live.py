"""Attack tests against a live deployment (issue 19 item 6; docs/security.md).

A deployment of the roles `broker-mqtt acl` knows, generated from the TOML below: members ``core1`` and
``core2`` (replicas and election candidates of elected store ``fleet`` and queue ``jobs``), clients
``gw7`` and ``gw8`` (a writer of ``fleet``, a consumer of ``jobs``, a publisher of ``/sensors/<name>``).
``gw7`` attacks (a stolen gateway), and so does ``core2`` pretending to be ``core1`` (a compromised
member with another's id). Each attack runs under three protections:

- ``acl``: the generated mosquitto ``acl_file`` (with ``use_username_as_clientid``): the broker refuses
  the attacker's PUBLISH, counted in the attacker's ``statistics().rejected``;
- ``binding``: a plain broker; the receivers drop what claims a sender (an endpoint, a node, an epoch's
  master) other than the one the topic it came on names (``forged`` counters). Without an ACL or
  signatures nothing stops a client from publishing on *another's* topic, so the attacks that do so
  are not tried here (docs/security.md: binding alone needs the broker's ACL);
- ``signed``: a plain broker, every endpoint seals with its own Ed25519 key and trusts the others'
  (a compromised device keeps its own key): what it publishes on another's topic fails verification
  (``bad_signatures``); what it publishes on its own topic in another's name is dropped as forged.

Every attack must change nothing: the store's values on every replica, its master and epoch, the
peers (no ``PeerLost`` for a live peer), a queue message held by its consumer (later accepted by it).
No attack is proven harmless by waiting: each waits for the counter its drop raises, then for a
legitimate write by ``gw8`` issued after it to be applied everywhere, and then compares the state.
"""

from __future__ import annotations

import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from secure_broker import SecureBroker

from broker_mqtt import EmbeddedBroker, Endpoint, PeerLost
from broker_mqtt.cli.acl_rules import grants, parse_spec, render_mosquitto
from broker_mqtt.endpoint.presence import presence_payload
from broker_mqtt.queue import MessageState, WorkQueue, attach_queue
from broker_mqtt.queue.commands import Settle
from broker_mqtt.store import ElectedStore, StoreError, StoreWriter, attach_store
from broker_mqtt.store.history import Record
from broker_mqtt.store.replica_messages import Active, Log, Write, WriteAck
from broker_mqtt.store.replica_messages import encode as replication_wire
from broker_mqtt.wire import codec
from broker_mqtt.wire.message import Kind, NodeEncoder
from broker_mqtt.wire.signing import TrustStore, generate_private_key

pytestmark = [pytest.mark.anyio, pytest.mark.mosquitto]

PROTECTIONS = ["acl", "binding", "signed"]
ELECTION = {"cycle": 0.5, "gap": 0.1}
SPEC = """\
namespace = "{ns}"
[[principal]]
name = "core1"
subscribe = ["/sensors"]
stores = {{ fleet = "member" }}
queues = {{ jobs = "member" }}

[[principal]]
name = "core2"
subscribe = ["/sensors"]
stores = {{ fleet = "member" }}
queues = {{ jobs = "member" }}

[[principal]]
name = "gw7"
publish = ["/sensors/gw7"]
stores = {{ fleet = "writer" }}
queues = {{ jobs = "consumer" }}

[[principal]]
name = "gw8"
publish = ["/sensors/gw8"]
stores = {{ fleet = "writer" }}
queues = {{ jobs = "consumer" }}

[[principal]]
name = "obs"
subscribe = ["/sensors"]
"""
NAMES = ("core1", "core2", "gw7", "gw8", "obs")
PASSWORDS = {n: f"{n}-pw" for n in NAMES}
# mosquitto 2.0.11 disconnects a client right after refusing one of its PUBLISHes when
# max_queued_messages is 0 (EmbeddedBroker's setting); a finite limit keeps it connected (the later
# line wins). use_username_as_clientid: every principal has one client id, its name.
SECURE_EXTRA = "max_queued_messages 1000000\nuse_username_as_clientid true\n"


# -- the deployment ------------------------------------------------------------------------------


@asynccontextmanager
async def _brokers(protection: str, tmp_path: Path, ns: str,
                   plain: EmbeddedBroker) -> AsyncIterator[Callable[[str], Any]]:
    """A function of the principal's name giving what its Endpoint connects to."""
    if protection != "acl":
        yield lambda name: plain
        return
    spec = parse_spec(tomllib.loads(SPEC.format(ns=ns)))
    sb = SecureBroker(tmp_path / "broker", users=PASSWORDS, acl=render_mosquitto(spec, grants(spec)))
    sb.broker.extra_config += SECURE_EXTRA
    async with sb:
        yield sb.user_url


@dataclass
class Fleet:
    protection: str
    ns: str
    connect: Callable[[str], Any]
    keys: dict[str, Any]
    eps: dict[str, Endpoint] = field(default_factory=dict)
    stores: dict[str, ElectedStore] = field(default_factory=dict)  # core1, core2
    queues: dict[str, WorkQueue] = field(default_factory=dict)  # core1, core2 (replicas), gw7, gw8
    writers: dict[str, StoreWriter] = field(default_factory=dict)  # gw7, gw8
    events: dict[str, list[Any]] = field(default_factory=dict)
    barriers: int = 0

    def endpoint(self, name: str) -> Endpoint:
        kw: dict[str, Any] = {}
        if self.protection == "signed":
            kw = {"signing_key": self.keys[name],
                  "trust": TrustStore({n: k.public_key() for n, k in self.keys.items()})}
        return Endpoint(self.connect(name), namespace=self.ns, client_id=name, name=name, **kw)

    # counters --------------------------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, ep in self.eps.items():
            st = ep.statistics()
            out[f"{name}.rejected"] = st.rejected
            out[f"{name}.forged"] = st.forged
            out[f"{name}.bad_signatures"] = st.bad_signatures
        for name, s in self.stores.items():
            out[f"{name}.fleet.forged"] = s.forged
            out[f"{name}.fleet.actor.forged"] = _actor_forged(s)
        for name, q in self.queues.items():
            if q.store is not None:
                out[f"{name}.jobs.forged"] = q.store.forged
        for name, w in self.writers.items():
            out[f"{name}.writer.forged"] = w.forged
        return out

    # what must not change ------------------------------------------------------------------------
    def view(self) -> tuple[Any, ...]:
        s1, s2 = self.stores["core1"], self.stores["core2"]
        items = [sorted((k, v) for k, v in s.items_nowait() if k != "barrier") for s in (s1, s2)]
        return (items[0], items[1], s1.master, s2.master, s1.epoch, s2.epoch)

    async def barrier(self) -> None:
        """A legitimate write by gw8, issued after the attack, applied on both replicas."""
        self.barriers += 1
        n = self.barriers
        await self.writers["gw8"].put("barrier", n)
        with anyio.fail_after(20):
            for s in self.stores.values():
                while not (s.exists_nowait("barrier") and s.get_nowait("barrier") == n):
                    await s.wait_change()

    def lost(self) -> list[Any]:
        return [(who, e) for who, evs in self.events.items() for e in evs if isinstance(e, PeerLost)]


def _actor_forged(store: ElectedStore) -> int:
    actor = store._actor
    return 0 if actor is None else actor._transport.forged  # type: ignore[no-any-return]


@asynccontextmanager
async def deployment(protection: str, tmp_path: Path, ns: str, plain: EmbeddedBroker) -> AsyncIterator[Fleet]:
    keys = {n: generate_private_key() for n in NAMES} if protection == "signed" else {}
    async with _brokers(protection, tmp_path, ns, plain) as connect, AsyncExitStack() as stack:
        fleet = Fleet(protection, ns, connect, keys)
        tg = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tg.cancel_scope.cancel)
        for name in ("core1", "core2", "gw7", "gw8"):
            ep = fleet.eps[name] = await stack.enter_async_context(fleet.endpoint(name))
            events = await stack.enter_async_context(ep.status())
            fleet.events[name] = []
            tg.start_soon(_collect, events, fleet.events[name])
        for ep in fleet.eps.values():
            for other in fleet.eps.values():
                if other is not ep:
                    assert await ep.await_peer(other.id, timeout=20)
        core1, core2 = fleet.eps["core1"], fleet.eps["core2"]
        # core1 first, alone: it becomes master of both
        s1 = fleet.stores["core1"] = await stack.enter_async_context(
            await attach_store(core1, "fleet", election=ELECTION))
        q1 = fleet.queues["core1"] = await stack.enter_async_context(
            await attach_queue(core1, "jobs", election=ELECTION))
        assert await s1.await_master(20) and await q1.await_master(20)
        s2 = fleet.stores["core2"] = await stack.enter_async_context(
            await attach_store(core2, "fleet", election=ELECTION))
        q2 = fleet.queues["core2"] = await stack.enter_async_context(
            await attach_queue(core2, "jobs", election=ELECTION))
        assert await s2.await_master(20) and await q2.await_master(20)
        for name in ("gw7", "gw8"):
            w = fleet.writers[name] = await stack.enter_async_context(
                StoreWriter(fleet.eps[name], "fleet", f"{name}-w", write_timeout=20))
            assert await w.await_master(20)
            q = fleet.queues[name] = await stack.enter_async_context(
                await attach_queue(fleet.eps[name], "jobs", replica=False, write_timeout=20))
            assert await q.await_master(20)
        yield fleet


async def _collect(events: AsyncIterator[Any], out: list[Any]) -> None:
    async for e in events:
        out.append(e)


async def _rises(fleet: Fleet, before: dict[str, int], names: list[str]) -> None:
    """Wait until every counter in ``names`` is above its value in ``before``."""
    with anyio.fail_after(20):
        while True:
            now = fleet.counters()
            if all(now[n] > before[n] for n in names):
                return
            await anyio.sleep(0.02)


# -- the attacks -------------------------------------------------------------------------------------


@dataclass
class Attack:
    name: str
    run: Callable[[Fleet], Awaitable[None]]
    #: the counters it must raise, per protection; a protection absent: the attack is not tried there
    drops: dict[str, list[str]]


def _hb(victim: str) -> list[Any]:
    """The heartbeat of issue 19: ``victim`` master in epoch 10**9."""
    return ["hb", victim, [10**9, victim], "master", [0, None], victim]


async def _send_as(fleet: Fleet, attacker: str, victim: str, broker_topic: str, value: Any, *,
                   to: str | None = None) -> None:
    """``attacker`` publishes a node message on ``victim``'s MQTT topic, in ``victim``'s envelope."""
    ep, v = fleet.eps[attacker], fleet.eps[victim]
    batch = NodeEncoder(v.id.bytes).encode(Kind.COMMAND, broker_topic, codec.encode(value),
                                          None if to is None else (fleet.eps[to].id.bytes,))
    if to is None:
        topic = f"{fleet.ns}/d/{victim}{broker_topic}"
    else:
        topic = ep.layout.unicast(fleet.eps[to].id.hex, victim, broker_topic)
    await ep.publish_raw(topic, batch)


def _master(fleet: Fleet) -> ElectedStore:
    s1 = fleet.stores["core1"]
    return s1


def _forged_log(fleet: Fleet, attacker: str) -> list[Any]:
    s = _master(fleet)
    epoch = s.epoch
    assert epoch is not None
    rec = Record(s.replica.state.last_seq + 1, epoch, 2**62, fleet.eps[attacker].id.hex, "evil", 1,
                 ("put", "k", "forged", None))
    return replication_wire(Log(epoch, [rec]))


def _forged_active(fleet: Fleet) -> list[Any]:
    s = _master(fleet)
    st = s.replica.state
    return replication_wire(Active((10**9, s.node_id), st.position, list(st.lineage), [], []))


def _forged_wack(fleet: Fleet) -> list[Any]:
    epoch = _master(fleet).epoch
    assert epoch is not None
    upto = 10**6  # answers every write gw8's writer will ever make, were it believed
    return replication_wire(WriteAck(epoch, "gw8-w", upto, {upto: ["error", "StoreError", "forged"]},
                                     fleet.eps["gw8"].id.hex))


def _ping(node: str, *history: str) -> bytes:
    return codec.encode({"t": "ping", "node": node, "value": 0, "history": [node, *history]})


def _victim_node(fleet: Fleet) -> str:
    return fleet.stores["core1"].node_id


ALL_REPLICAS = ["core1.fleet.forged", "core2.fleet.forged"]

ATTACKS = [
    # 1. the forged heartbeat of issue 19
    Attack("client: forged master heartbeat, own topic",
           lambda f: _repeat(lambda: f.eps["gw7"].send_node(Kind.COMMAND, "/$store/fleet/e", _hb(_victim_node(f)))),
           {"acl": ["gw7.rejected"], "binding": ALL_REPLICAS, "signed": ALL_REPLICAS}),
    Attack("client: forged master heartbeat, victim's topic",
           lambda f: _repeat(lambda: _send_as(f, "gw7", "core1", "/$store/fleet/e", _hb(_victim_node(f)))),
           {"acl": ["gw7.rejected"], "signed": ["core1.bad_signatures", "core2.bad_signatures"]}),
    Attack("member: heartbeat as another member, own topic",
           lambda f: _repeat(lambda: f.eps["core2"].send_node(Kind.COMMAND, "/$store/fleet/e", _hb(_victim_node(f)))),
           {"acl": ["core1.fleet.forged"], "binding": ["core1.fleet.forged"], "signed": ["core1.fleet.forged"]}),
    Attack("member: heartbeat as another member, its topic",
           lambda f: _repeat(lambda: _send_as(f, "core2", "core1", "/$store/fleet/e", _hb(_victim_node(f)))),
           {"acl": ["core2.rejected"], "signed": ["core1.bad_signatures"]}),
    Attack("member: its own heartbeat reporting the master's epoch at term 10**9",
           # fixed here (store/replica_follower.py _on_hb): only an epoch's master vouches for it. This
           # one raises no counter (core2 speaks in its own name): the barrier proves the heartbeats
           # arrived, since the barrier write is durable (durability "one") only once core1 got
           # core2's ack of it, which core2 publishes after them on the same topic.
           lambda f: _repeat(lambda: f.eps["core2"].send_node(Kind.COMMAND, "/$store/fleet/e", [
               "hb", f.stores["core2"].node_id, [10**9, _victim_node(f)], "follower", [0, None], _victim_node(f)])),
           {"acl": [], "binding": [], "signed": []}),
    # 2. clearing another's retained presence (what the broker lets through: tests below)
    Attack("client: clear another's presence",
           lambda f: f.eps["gw7"].publish_raw(f"{f.ns}/p/core1", b"", retain=True),
           {"acl": ["gw7.rejected"]}),
    Attack("member: clear another's presence",
           lambda f: f.eps["core2"].publish_raw(f"{f.ns}/p/core1", b"", retain=True),
           {"acl": ["core2.rejected"]}),
    # 3. forged election bids and tag claims
    Attack("client: bid as the master, its election topic",
           lambda f: _repeat(lambda: f.eps["gw7"].publish_raw(
               f"{f.ns}/actor/store/fleet/core2", _ping(f.stores["core2"].node_id, _victim_node(f)))),
           {"acl": ["gw7.rejected"], "signed": ["core2.bad_signatures", "core1.fleet.actor.forged"]}),
    Attack("client: tag claim in the master's name, own election topic",
           lambda f: _repeat(lambda: f.eps["gw7"].publish_raw(f"{f.ns}/actor/store/fleet/gw7", _ping(_victim_node(f)))),
           {"acl": ["gw7.rejected"], "binding": ["core1.fleet.actor.forged", "core2.fleet.actor.forged"],
            "signed": ["core1.fleet.actor.forged", "core2.fleet.actor.forged"]}),
    Attack("member: bid as another member, own election topic",
           lambda f: _repeat(lambda: f.eps["core2"].publish_raw(
               f"{f.ns}/actor/store/fleet/core2", _ping(_victim_node(f), f.stores["core2"].node_id))),
           {"acl": ["core1.fleet.actor.forged"], "binding": ["core1.fleet.actor.forged"],
            "signed": ["core1.fleet.actor.forged"]}),
    Attack("member: init and ping on another member's election topic",
           lambda f: _repeat(lambda: f.eps["core2"].publish_raw(
               f"{f.ns}/actor/store/fleet/core1", _ping(_victim_node(f)))),
           {"acl": ["core2.rejected"], "signed": ["core1.fleet.actor.forged"]}),
    # 4. forged store writes as the master
    Attack("client: log record as the master, own topic",
           lambda f: f.eps["gw7"].send_node(Kind.COMMAND, "/$store/fleet/e", _forged_log(f, "gw7")),
           {"acl": ["gw7.rejected"], "binding": ALL_REPLICAS, "signed": ALL_REPLICAS}),
    Attack("client: active in a higher epoch of the master, own topic",
           lambda f: f.eps["gw7"].send_node(Kind.COMMAND, "/$store/fleet/e", _forged_active(f)),
           {"acl": ["gw7.rejected"], "binding": ALL_REPLICAS, "signed": ALL_REPLICAS}),
    Attack("client: log record as the master, its topic",
           lambda f: _send_as(f, "gw7", "core1", "/$store/fleet/e", _forged_log(f, "gw7")),
           {"acl": ["gw7.rejected"], "signed": ["core2.bad_signatures"]}),
    Attack("member: log record and active as the master, own topic",
           lambda f: _both(f.eps["core2"].send_node(Kind.COMMAND, "/$store/fleet/e", _forged_log(f, "core2")),
                           f.eps["core2"].send_node(Kind.COMMAND, "/$store/fleet/e", _forged_active(f))),
           {"acl": ["core1.fleet.forged"], "binding": ["core1.fleet.forged"], "signed": ["core1.fleet.forged"]}),
    Attack("member: log record as the master, its topic",
           lambda f: _send_as(f, "core2", "core1", "/$store/fleet/e", _forged_log(f, "core2")),
           {"acl": ["core2.rejected"], "signed": ["core1.bad_signatures"]}),
    # 6. forged answers to another writer
    Attack("client: wack to another writer",
           lambda f: f.eps["gw7"].send_node(Kind.COMMAND, "/$store/fleet/ea", _forged_wack(f),
                                            receivers=(f.eps["gw8"].id,)),
           {"acl": ["gw7.rejected"], "binding": ["gw8.writer.forged"], "signed": ["gw8.writer.forged"]}),
    Attack("client: wack to another writer, as the master",
           lambda f: _send_as(f, "gw7", "core1", "/$store/fleet/ea", _forged_wack(f), to="gw8"),
           {"acl": ["gw7.rejected"], "signed": ["gw8.bad_signatures"]}),
    Attack("member (not master): wack to a writer",
           lambda f: f.eps["core2"].send_node(Kind.COMMAND, "/$store/fleet/ea", _forged_wack(f),
                                              receivers=(f.eps["gw8"].id,)),
           {"acl": ["gw8.writer.forged"], "binding": ["gw8.writer.forged"], "signed": ["gw8.writer.forged"]}),
    # 7. overwriting another's retained presence record with a hello (late joiners: tests below)
    Attack("client: hello over another's presence",
           lambda f: f.eps["gw7"].publish_raw(
               f"{f.ns}/p/core1", presence_payload(NodeEncoder(f.eps["gw7"].id.bytes), "hello", "evil", []),
               retain=True),
           {"acl": ["gw7.rejected"]}),
]


async def _repeat(send: Callable[[], Awaitable[None]], times: int = 5) -> None:
    for _ in range(times):
        await send()


async def _both(a: Awaitable[None], b: Awaitable[None]) -> None:
    await a
    await b


@pytest.mark.parametrize("protection", PROTECTIONS)
async def test_attacks_change_nothing(protection: str, tmp_path: Path, namespace: str,
                                      broker: EmbeddedBroker) -> None:
    async with deployment(protection, tmp_path, namespace, broker) as fleet:
        await fleet.writers["gw7"].put("k", "v0")
        await fleet.writers["gw8"].put("j", "w0")
        await fleet.barrier()
        s1 = fleet.stores["core1"]
        assert s1.is_master
        expected = fleet.view()
        assert expected[0] == expected[1] == [("j", "w0"), ("k", "v0")]
        tried = 0
        for attack in ATTACKS:
            drops = attack.drops.get(protection)
            if drops is None:
                continue
            tried += 1
            before = fleet.counters()
            await attack.run(fleet)
            await _rises(fleet, before, drops)
            await fleet.barrier()
            assert fleet.view() == expected, attack.name
            assert fleet.lost() == [], attack.name
        assert tried >= 9
        # the state still moves: the attacked writers' writes land
        await fleet.writers["gw7"].put("k", "v1")
        await fleet.barrier()
        assert [s.get_nowait("k") for s in fleet.stores.values()] == ["v1", "v1"]
        if protection == "acl":
            assert all(fleet.eps[n].statistics().rejected == 0 for n in ("core1", "gw8"))


@pytest.mark.parametrize("protection", PROTECTIONS)
async def test_forged_queue_accept_changes_nothing(protection: str, tmp_path: Path, namespace: str,
                                                   broker: EmbeddedBroker) -> None:
    """gw7 accepts gw8's message: through its own writer (a Settle with gw8's consumer's owner id;
    the master refuses it: the owner is not gw7's endpoint's) and as a write claiming gw8's endpoint
    as its origin (dropped as forged). The message stays gw8's, and gw8 accepts it afterwards."""
    async with deployment(protection, tmp_path, namespace, broker) as fleet:
        q1, q2, q7, q8 = (fleet.queues[n] for n in ("core1", "core2", "gw7", "gw8"))
        msg_id = await q1.publish("job-1")
        async with q8.consume(prefetch=1) as deliveries:
            with anyio.fail_after(20):
                d = await deliveries.__anext__()
            assert (d.id, d.data) == (msg_id, "job-1")
            owner = deliveries.owner
            held = [(i, r.state, r.owner) for i, r in q1._records()]
            assert [(i, o) for i, _s, o in held] == [(msg_id, owner)]
            # through gw7's own store writer: refused by the master
            with anyio.fail_after(20), pytest.raises(StoreError, match="may not act for"):
                await q7.write(Settle(owner, [[msg_id, "accept", None]]))
            # a write claiming gw8's endpoint as origin, unicast to the master from gw7
            master_ep = q1.store.master_endpoint if q1.store is not None else None
            assert master_ep == fleet.eps["core1"].id
            epoch = q1.store.epoch if q1.store is not None else None
            forged = replication_wire(Write("gw7-evil", 1, fleet.eps["gw8"].id.hex,
                                            Settle(owner, [[msg_id, "accept", None]]).to_wire(), epoch))
            before = fleet.counters()
            if protection == "signed":  # and on gw8's own topic: a seal that is not gw8's
                await _send_as(fleet, "gw7", "gw8", "/$store/queue-jobs/ew", forged, to="core1")
            await fleet.eps["gw7"].send_node(Kind.COMMAND, "/$store/queue-jobs/ew", forged, receivers=(master_ep,))
            await _rises(fleet, before, ["core1.jobs.forged"] + (["core1.bad_signatures"] if protection == "signed"
                                                                  else []))
            # a later legitimate write of the queue is applied: the forged one came before it
            await q7.publish("job-2")
            with anyio.fail_after(20):
                for q in (q1, q2):
                    while len(q._records()) < 2:
                        await q.store.wait_change()  # type: ignore[union-attr]
            for q in (q1, q2):
                recs = dict(q._records())
                assert recs[msg_id].owner == owner, "the forged accept took gw8's message"
            await d.accept()
        with anyio.fail_after(20):
            for q in (q1, q2):
                while msg_id in dict(q._records()):
                    await q.store.wait_change()  # type: ignore[union-attr]
        assert fleet.lost() == []
        if protection == "acl":
            assert all(ep.statistics().rejected == 0 for ep in fleet.eps.values())


# -- retained presence: cleared, or overwritten ------------------------------------------------------

# Without a broker ACL nothing stops a client from writing another's retained presence topic: a clear
# is taken unsigned (a last will cannot carry a fresh signature, docs/security.md), and a hello that
# fails the receivers' checks still replaces the retained record, so endpoints that join later never
# learn of the victim. The fix is the victim's (endpoint/, not this test's to make): see the report.
def _presence_params() -> list[Any]:
    return list(PROTECTIONS)


async def _own_hello_retained(fleet: Fleet, name: str) -> None:
    """Wait until the retained record on ``name``'s presence topic is its own hello again (an endpoint
    restores it when another client clears or overwrites it): what a late joiner will read."""
    watcher = next(ep for n, ep in fleet.eps.items() if n != name)
    with anyio.fail_after(20):
        while True:
            async with watcher.subscribe_raw(f"{fleet.ns}/p/{name}") as sub:
                retained = await sub.__anext__()
            if retained.payload and b"evil" not in retained.payload:
                return
            await anyio.sleep(0.05)


@asynccontextmanager
async def _endpoints(protection: str, tmp_path: Path, ns: str, plain: EmbeddedBroker,
                     *names: str) -> AsyncIterator[Fleet]:
    keys = {n: generate_private_key() for n in NAMES} if protection == "signed" else {}
    async with _brokers(protection, tmp_path, ns, plain) as connect, AsyncExitStack() as stack:
        fleet = Fleet(protection, ns, connect, keys)
        tg = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tg.cancel_scope.cancel)
        for name in names:
            ep = fleet.eps[name] = await stack.enter_async_context(fleet.endpoint(name))
            fleet.events[name] = []
            tg.start_soon(_collect, await stack.enter_async_context(ep.status()), fleet.events[name])
        for ep in fleet.eps.values():
            for other in fleet.eps.values():
                assert other is ep or await ep.await_peer(other.id, timeout=20)
        yield fleet


async def _marker(fleet: Fleet, watchers: list[str], n: int) -> None:
    """gw7 publishes marker ``n`` on /sensors/gw7 after what it sent; each watcher receives it (so what
    gw7 sent before it, on any topic, reached the watcher first: one connection, QoS 1, in order)."""
    subs = [fleet.eps[w].subscribe("/sensors") for w in watchers]
    async with AsyncExitStack() as stack:
        streams = [await stack.enter_async_context(s) for s in subs]
        for w in watchers:
            assert await fleet.eps["gw7"].await_peer(fleet.eps[w].id, timeout=20)
        with anyio.fail_after(20):  # the watchers' new subscriptions are announced: gw7 may publish
            while not all(any(t == "/sensors" for t in p.topics) for p in fleet.eps["gw7"].peers()
                          if p.id in {fleet.eps[w].id for w in watchers}):
                await anyio.sleep(0.02)
        await fleet.eps["gw7"].publish("/sensors/gw7/marker", n)
        with anyio.fail_after(20):
            for stream in streams:
                async for m in stream:
                    if m.data == n:
                        break


@pytest.mark.parametrize("protection", _presence_params())
async def test_clearing_another_presence_changes_nothing(protection: str, tmp_path: Path, namespace: str,
                                                         broker: EmbeddedBroker) -> None:
    async with _endpoints(protection, tmp_path, namespace, broker, "core1", "core2", "gw7") as fleet:
        before = fleet.counters()
        await fleet.eps["gw7"].publish_raw(f"{namespace}/p/core1", b"", retain=True)
        await fleet.eps["gw7"].publish_raw(f"{namespace}/p/core2", b"", retain=True)
        await _marker(fleet, ["core1", "core2"], 1)
        if protection == "acl":
            await _rises(fleet, before, ["gw7.rejected"])
            assert fleet.lost() == []
        else:
            # A clear carries no signature (a last will cannot), so without the ACL the peers see the
            # victims lost for a moment; each victim sees its record cleared and announces itself again.
            for name in ("core1", "core2"):
                await _own_hello_retained(fleet, name)
        with anyio.fail_after(20):
            while {p.id for p in fleet.eps["core2"].peers()} != {fleet.eps["core1"].id, fleet.eps["gw7"].id}:
                await anyio.sleep(0.02)
        async with fleet.endpoint("obs") as obs:  # a late joiner learns of both from their retained hellos
            assert await obs.await_peer(fleet.eps["core1"].id, timeout=20)
            assert await obs.await_peer(fleet.eps["core2"].id, timeout=20)


@pytest.mark.parametrize("protection", _presence_params())
async def test_overwriting_another_presence_changes_nothing(protection: str, tmp_path: Path, namespace: str,
                                                            broker: EmbeddedBroker) -> None:
    async with _endpoints(protection, tmp_path, namespace, broker, "core1", "core2", "gw7") as fleet:
        gw7, core1 = fleet.eps["gw7"], fleet.eps["core1"]
        before = fleet.counters()
        # a hello in gw7's own envelope, and (on a plain broker) one in core1's
        await gw7.publish_raw(f"{namespace}/p/core1",
                              presence_payload(NodeEncoder(gw7.id.bytes), "hello", "evil", ["/x"]), retain=True)
        expected = {"acl": ["gw7.rejected"], "binding": ["core2.forged"], "signed": ["core2.bad_signatures"]}
        await _rises(fleet, before, expected[protection])
        await _marker(fleet, ["core2"], 1)
        assert fleet.lost() == []
        peer = next(p for p in fleet.eps["core2"].peers() if p.id == core1.id)
        assert peer.name == "core1"
        await _own_hello_retained(fleet, "core1")  # the ACL refused it; without one, core1 restored its own
        # the late joiner: it reads the retained records only, and must still learn of core1
        async with fleet.endpoint("obs") as obs, obs.subscribe("/sensors") as sensors:
            assert await obs.await_peer(fleet.eps["core2"].id, timeout=20)
            with anyio.fail_after(20):  # gw7 sees obs's subscription: its marker goes to obs
                while not any(p.id == obs.id and "/sensors" in p.topics for p in gw7.peers()):
                    await anyio.sleep(0.02)
            await gw7.publish("/sensors/gw7/marker", 2)
            with anyio.fail_after(20):
                async for m in sensors:
                    if m.data == 2:
                        break
            # every retained presence came on obs's presence subscription before the marker
            assert core1.id in {p.id for p in obs.peers()}, "core1's retained hello was replaced"


# -- the generated ACL lets a normal workload through -------------------------------------------------


async def test_a_full_deployment_works_under_the_generated_acl(tmp_path: Path, namespace: str,
                                                               broker: EmbeddedBroker) -> None:
    """Members and clients of the TOML above, under its generated acl_file: store writes from both
    clients, queue publishing and consuming, data publishing; the broker refuses nothing."""
    async with deployment("acl", tmp_path, namespace, broker) as fleet:
        core1, gw7 = fleet.eps["core1"], fleet.eps["gw7"]
        async with core1.subscribe("/sensors") as sensors, fleet.eps["core2"].subscribe("/sensors") as sensors2:
            with anyio.fail_after(20):
                while not all(any(t == "/sensors" for t in p.topics) for p in gw7.peers()
                              if p.id in (core1.id, fleet.eps["core2"].id)):
                    await anyio.sleep(0.02)
            for i in range(50):
                await gw7.publish("/sensors/gw7/t", i)
                await fleet.eps["gw8"].publish("/sensors/gw8/t", -i)
            for stream in (sensors, sensors2):
                got = []
                with anyio.fail_after(20):
                    async for m in stream:
                        got.append(m.data)
                        if len(got) == 100:
                            break
                assert sorted(got) == sorted([*range(50), *(-i for i in range(50))])
        for i in range(20):
            await fleet.writers["gw7"].put(f"gw7-{i}", i)
            await fleet.writers["gw8"].put(f"gw8-{i}", i)
        await fleet.barrier()
        for s in fleet.stores.values():
            assert all(s.get_nowait(f"{w}-{i}") == i for w in ("gw7", "gw8") for i in range(20))
        ids = [await fleet.queues[n].publish(f"job-{n}-{i}") for n in ("core1", "gw7") for i in range(10)]
        got: dict[str, list[Any]] = {"gw7": [], "gw8": []}

        async def consume(name: str, tg: anyio.abc.TaskGroup) -> None:
            async with fleet.queues[name].consume(prefetch=2) as deliveries:
                async for d in deliveries:
                    got[name].append(d.data)
                    await d.accept()
                    if sum(map(len, got.values())) == len(ids):
                        tg.cancel_scope.cancel()

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(consume, "gw7", tg)
                tg.start_soon(consume, "gw8", tg)
        assert sorted(got["gw7"] + got["gw8"]) == sorted(f"job-{n}-{i}" for n in ("core1", "gw7") for i in range(10))
        with anyio.fail_after(20):
            for q in (fleet.queues["core1"], fleet.queues["core2"]):
                while any(r.state is not MessageState.DONE for _i, r in q._records()):
                    await q.store.wait_change()  # type: ignore[union-attr]
        assert {n: ep.statistics().rejected for n, ep in fleet.eps.items()} == dict.fromkeys(fleet.eps, 0)
        assert all(ep.statistics().forged == ep.statistics().bad_signatures == 0 for ep in fleet.eps.values())
