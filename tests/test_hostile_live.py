"""Hostile payloads on every topic family, against a real mosquitto (issue 19 item 7, the live part).

Three endpoints do normal work: an elected store "s" and a queue "jobs" with replicas on ``a`` and
``b``, a replica-less queue handle with a consumer on ``c``, data subscribers on all three, data
published and unicast. A raw spy on ``<ns>/#`` collects the MQTT topics that traffic uses (the
topics come from the system itself, not from a list in this test) and a few payloads of each. Then a
hostile client ("mallory", no ACL, no signing) throws hostile payloads at every one of those topics,
and at the same topics with its own client id in the sender's position (``<ns>/d/mallory/...``,
``<ns>/u/<victim hex>/mallory/...``, ``<ns>/p/mallory``, ``<ns>/actor/store/<name>/mallory``):
random bytes, deep CBOR nesting, huge declared lengths, wrong types, envelopes of a wrong version or
kind, envelopes whose claimed sender is not the one the topic names, and mutations of the captured
payloads (the generators of tests/fuzz_targets.py).

What mallory does *not* send on a topic naming a victim is a message that decodes as a well-formed
message of that victim (a captured payload with a flipped value, an empty retained presence, a
well-formed heartbeat): without an ACL or signatures such a message *is* the victim's as far as any
receiver can tell. Stopping that is the broker ACL's and the signatures' job (tests/test_acl.py,
tests/test_signing_live.py, the attack tests); here every payload on a victim's topic is checked
locally, before it is sent, to be rejected by the decoder that receives it.

Then: every endpoint is still connected and its receive loop alive (data sent after the barrage
arrives everywhere); no peer was lost; the stores still take writes and both replicas agree on every
key; the queue delivers every message published before, during and after the barrage exactly once;
nothing written before the barrage is lost; and the malformed/forged counters and error events of the
endpoints and stores went up.
"""

from __future__ import annotations

import collections
import logging
import random
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import cbor2
import pytest
from fuzz_targets import by_name, generate, hostile_leaf, mutate_bytes, mutate_value, random_bytes

from broker_mqtt import EmbeddedBroker, Endpoint, ErrorCode, ErrorEvent, Message, RawMessage
from broker_mqtt.endpoint.presence import PeerTable
from broker_mqtt.errors import DecodeError
from broker_mqtt.queue import attach_queue
from broker_mqtt.store import attach_store
from broker_mqtt.store import replica_messages as rm
from broker_mqtt.store.errors import StoreDecodeError
from broker_mqtt.wire import codec
from broker_mqtt.wire.message import DEFAULT_TTL, FORMAT_VERSION, Kind, NodeEncoder, decode_batch
from broker_mqtt.wire.topics import TopicLayout

pytestmark = [pytest.mark.anyio, pytest.mark.mosquitto]

ELECTION = {"cycle": 1.0, "gap": 0.25}
HOSTILE = "mallory"
PER_FAMILY = 300  #: hostile payloads per topic family, on victims' topics and as many on mallory's own
THIRD = uuid.UUID(int=0xBAD).bytes  #: a sender no topic names


# -- the topics ---------------------------------------------------------------------------------------

def split(ns: str, topic: str) -> tuple[str, str, str] | None:
    """``(family, sender client id, own variant)`` of a spied MQTT topic; own variant: the same topic
    with mallory in the sender's position. None: not one of the layout's topics."""
    levels = topic[len(ns) + 1:].split("/")
    match levels:
        case ["d", sender, *rest] if rest:
            return "d", sender, "/".join((ns, "d", HOSTILE, *rest))
        case ["u", target, sender, *rest] if rest:
            return "u", sender, "/".join((ns, "u", target, HOSTILE, *rest))
        case ["p", sender]:
            return "p", sender, f"{ns}/p/{HOSTILE}"
        case ["actor", "store", store, sender]:
            return "actor", sender, f"{ns}/actor/store/{store}/{HOSTILE}"
    return None


def broker_topic(ns: str, family: str, topic: str) -> str:
    levels = topic[len(ns) + 1:].split("/")
    return "/" + "/".join(levels[2:] if family == "d" else levels[3:])


def inner_kind(family: str, btopic: str) -> str:
    """Which decoder reads the payloads of a node message on broker topic ``btopic``."""
    if family == "p":
        return "presence"
    if family == "actor":
        return "actor"
    parts = btopic.split("/")
    if len(parts) == 4 and parts[1] == "$store" and parts[3] in ("e", "em", "ew", "ea"):
        return "replication"
    return "data"  # data and the queue's hints (any value wakes a consumer, nothing more)


# -- the payloads -------------------------------------------------------------------------------------

def deep(rng: random.Random) -> bytes:
    n = rng.choice((200, 1000, 10_000, 100_000))
    head = rng.choice((b"\x81", b"\x9f", b"\xa1\x00", b"\xd8\x1e"))  # arrays, indefinite, maps, tags
    tail = b"\xff" * n if head == b"\x9f" else b""
    return head * n + b"\x00" + tail


def huge(rng: random.Random, envelope_head: bytes) -> bytes:
    heads = (b"\x5b", b"\x7b", b"\x9b", b"\xbb", b"\x5a", b"\x9a", b"\xda")
    length = rng.choice((b"\xff" * 8, b"\x7f" + b"\xff" * 7, b"\x00\x00\x00\x01\x00\x00\x00\x00"))
    h = rng.choice(heads)
    body = h + (length[:4] if h in (b"\x5a", b"\x9a", b"\xda") else length) + rng.randbytes(rng.randint(0, 16))
    return envelope_head + body if rng.random() < 0.5 else body


def wrong_typed_envelope(rng: random.Random, sender: bytes, topic: str, payload: bytes) -> bytes:
    """A 7-item array with one field of a wrong type (or a wrong version or kind)."""
    fields: list[Any] = [FORMAT_VERSION, int(Kind.COMMAND), sender, None, DEFAULT_TTL, topic, payload]
    i = rng.randrange(7)
    bad: dict[int, tuple[Any, ...]] = {
        0: (0, 2, 255, -1, "1", None, [1], 2**64),
        1: (3, -1, 255, 2**64, "0", None, 1.5, [0]),
        2: (sender[:15], sender + b"\x00", sender.hex(), None, 7),
        3: (b"", [b"x"], [sender, 5], "all", 0),
        4: (-1, "16", None, 1.5, -(2**64)),
        5: (None, b"/a", 7, ["/a"]),
        6: (None, "text", 5, [payload]),
    }
    fields[i] = rng.choice(bad[i])
    return cbor2.dumps(fields)


class Payloads:
    """Hostile payloads for one endpoint's topics; victims' topics get only what their decoders
    reject (see the module docstring)."""

    def __init__(self, rng: random.Random, layout: TopicLayout, victims: dict[str, uuid.UUID],
                 node_ids: list[str], hostile_id: uuid.UUID) -> None:
        self.rng = rng
        self.layout = layout
        self.victims = victims  # client id -> endpoint id
        self.node_ids = node_ids
        self.hostile = NodeEncoder(hostile_id.bytes)
        self.targets = {k: by_name(n) for k, n in (("replication", "replication"), ("data", "codec.decode"),
                                                   ("actor", "actor (asyncactor decode + core)"),
                                                   ("presence", "presence"))}
        self.encodings = {k: t.encodings() for k, t in self.targets.items()}

    def inner(self, kind: str, captured: list[Any]) -> bytes:
        """A hostile inner payload (codec bytes): a fuzz input, or a mutation of a captured value."""
        rng = self.rng
        if captured and rng.random() < 0.5:
            return codec.encode(mutate_value(rng.choice(captured), rng))
        if kind == "presence":
            return codec.encode(mutate_value(rng.choice(self.targets["presence"].seeds), rng))
        return generate(self.targets[kind], rng, self.encodings[kind])

    def rejected(self, kind: str, mqtt_topic: str, payload: bytes, victim: uuid.UUID) -> bool:
        """Whether the decoder behind ``mqtt_topic`` rejects ``payload`` as ``victim``'s (or as from
        anyone: forged or malformed); what it would accept must not be sent in a victim's name."""
        if kind == "actor":
            try:
                value = codec.decode(payload)
            except DecodeError:
                return True
            if not isinstance(value, dict):
                return True
            node = value.get("node")
            if node is None:
                return value.get("t") != "hist"  # a side's history: believed from anyone (see the report)
            return not isinstance(node, str) or node.partition(".")[0] != victim.hex
        messages, error = decode_batch(payload)
        if kind == "presence":
            update = PeerTable(self.layout, uuid.uuid4()).receive(mqtt_topic, payload)
            return bool(payload) and (update.malformed or update.forged)
        ok = [m for m in messages if m.sender == victim.bytes]
        if not ok:
            return True
        if kind == "data":
            return False  # any value is data: only malformed envelopes are safe in a victim's name
        for m in ok:
            try:
                value = codec.decode(m.payload)
            except DecodeError:
                continue
            for me in self.node_ids:
                try:
                    rm.decode(value, me=me)
                    return False
                except StoreDecodeError:
                    pass
        return True

    def one(self, kind: str, mqtt_topic: str, btopic: str, captured: list[bytes], values: list[Any],
            victim: uuid.UUID | None) -> bytes:
        """One payload for ``mqtt_topic``; ``victim``: the endpoint the topic names (None: mallory)."""
        rng = self.rng
        claimed = victim.bytes if victim is not None else self.hostile.sender
        for _ in range(50):
            r = rng.randrange(11)
            if r == 0:
                p = random_bytes(rng)
            elif r == 1:
                p = deep(rng)
            elif r == 2:
                p = huge(rng, b"" if kind == "actor" else NodeEncoder(claimed).encode(Kind.COMMAND, btopic, b"")[:-1])
            elif r == 3:
                p = codec.encode(hostile_leaf(rng))
            elif r == 4 and kind != "actor":
                p = wrong_typed_envelope(rng, claimed, btopic, self.inner(kind, values))
            elif r == 5 and kind != "actor":  # a valid envelope in another's name: forged
                other = rng.choice((THIRD, *(v.bytes for v in self.victims.values() if v.bytes != claimed)))
                p = NodeEncoder(other).encode(rng.choice(tuple(Kind)), btopic, self.inner(kind, values))
            elif r in (6, 7) and captured:  # a captured payload mutated: bytes, or a value re-packed
                if kind == "actor":
                    p = codec.encode(mutate_value(codec.decode(rng.choice(captured)), rng)) if r == 6 else \
                        mutate_bytes(rng.choice(captured), rng, rng.choice(captured))
                elif r == 6:
                    p = mutate_bytes(rng.choice(captured), rng, rng.choice(captured))
                else:
                    msg = decode_batch(rng.choice(captured))[0][0]
                    p = NodeEncoder(claimed).encode(msg.kind, msg.topic, codec.encode(mutate_value(
                        codec.decode(msg.payload), rng)))
            elif r == 8 and values:  # a captured message unchanged, in the claimed sender's envelope
                value = rng.choice(values)
                if kind == "actor":
                    p = codec.encode(value)
                else:
                    k = Kind.CONTROL if kind == "presence" else Kind.COMMAND if btopic.startswith("/$") else Kind.DATA
                    p = NodeEncoder(claimed).encode(k, btopic, codec.encode(value))
            elif kind == "actor":
                p = generate(self.targets["actor"], rng, self.encodings["actor"])
            else:  # a valid envelope in the claimed sender's name, its payload hostile
                p = NodeEncoder(claimed).encode(rng.choice((Kind.COMMAND, Kind.DATA)), btopic, self.inner(kind, values))
            if victim is None or self.rejected(kind, mqtt_topic, p, victim):
                return p
        return deep(rng)


# -- the test -----------------------------------------------------------------------------------------

async def drain_status(ep: Endpoint, codes: collections.Counter[ErrorCode]) -> None:
    async with ep.status() as events:
        async for e in events:
            if isinstance(e, ErrorEvent):
                codes[e.code] += 1


async def read_data(sub: Any, seen: set[Any]) -> None:
    async for msg in sub:
        assert isinstance(msg, Message)
        if isinstance(msg.data, str) and msg.data.startswith("marker"):
            seen.add((msg.sender, msg.data))


async def until(cond: Callable[[], bool], timeout: float = 30) -> None:
    """Wait (polling) until ``cond()``; fails the test after ``timeout`` s."""
    with anyio.fail_after(timeout):
        while not cond():
            await anyio.sleep(0.05)


async def test_hostile_payloads_on_every_topic_family(broker: EmbeddedBroker, namespace: str) -> None:
    ns = namespace
    codes: dict[str, collections.Counter[ErrorCode]] = {n: collections.Counter() for n in "abc"}
    seen: dict[str, set[Any]] = {n: set() for n in "abc"}
    accepted: list[Any] = []
    spied: dict[str, list[bytes]] = {}
    async with Endpoint(broker, namespace=ns, name="a") as a, Endpoint(broker, namespace=ns, name="b") as b, \
            Endpoint(broker, namespace=ns, name="c") as c, Endpoint(broker, namespace=ns, client_id=HOSTILE) as h, \
            anyio.create_task_group() as tg:
        eps = {"a": a, "b": b, "c": c}
        for n, ep in eps.items():
            tg.start_soon(drain_status, ep, codes[n])

        # -- normal work, watched by the spy ----------------------------------------------------------
        async with Endpoint(broker, namespace=ns, name="spy") as spy, spy.subscribe_raw(f"{ns}/#") as raw:

            async def collect() -> None:
                async for m in raw:
                    assert isinstance(m, RawMessage)
                    got = spied.setdefault(m.topic, [])
                    if len(got) < 8 and m.payload:
                        got.append(m.payload)

            tg.start_soon(collect)
            for n, ep in eps.items():
                await tg.start(_subscribed, ep, seen[n])
            sa = await attach_store(a, "s", election=ELECTION)
            sb = await attach_store(b, "s", election=ELECTION)
            qa = await attach_queue(a, "jobs", election=ELECTION)
            qb = await attach_queue(b, "jobs", election=ELECTION)
            qc = await attach_queue(c, "jobs", election=ELECTION, replica=False)
            with anyio.fail_after(40):
                for x in (sa, sb, qa, qb, qc):
                    assert await x.await_master()
            before = {f"k{i}": {"v": i, "by": "ab"[i % 2]} for i in range(40)}
            for i, (k, v) in enumerate(before.items()):
                await (sa if i % 2 else sb).put(k, v)
            tg.start_soon(_consume, qc, accepted)
            for i in range(20):
                await qc.publish(f"job-{i}")
            await qa.publish("job-a")
            await until(lambda: len(accepted) == 21)
            for n, ep in eps.items():
                await ep.publish(f"/data/{n}", f"warm-{n}")
                for other in eps.values():
                    if other is not ep:
                        await ep.unicast(other.id, f"/data/{n}/u", f"warm-{n}")
            # every family seen: data, unicast, presence of a, b and c, and both elections
            clients = {ep.client_id: ep.id for ep in eps.values()}

            def families() -> set[str]:
                return {f for t in list(spied) if (s := split(ns, t)) and s[1] in clients for f in [s[0]]}

            await until(lambda: families() == {"d", "u", "p", "actor"})
            await until(lambda: sum(t.endswith("/data/" + n) for t in list(spied) for n in eps) == 3)
            await until(lambda: sum(t.endswith(f"/data/{n}/u") for t in list(spied) for n in eps) == 6)
            await until(lambda: {t for t in list(spied) if t.startswith(f"{ns}/actor/")} >=
                        {f"{ns}/actor/store/{s}/{ep.client_id}" for s in ("s", "queue-jobs") for ep in (a, b)})
        topics = {t: p for t, p in spied.items() if (s := split(ns, t)) is not None and s[1] in clients}

        # -- the barrage ------------------------------------------------------------------------------
        stats0 = {n: ep.statistics() for n, ep in eps.items()}
        stores = {"sa": sa, "sb": sb, "qa": qa.store, "qb": qb.store}
        store0 = {n: (x.malformed, x.forged) for n, x in stores.items()}
        rng = random.Random(19)
        gen = Payloads(rng, a.layout, clients, [sa.node_id, sb.node_id, qa.store.node_id, qb.store.node_id], h.id)
        by_family = collections.defaultdict(list)
        for t in sorted(topics):
            by_family[split(ns, t)[0]].append(t)  # type: ignore[index]
        during = 0
        sent = collections.Counter[str]()
        for family, fam_topics in sorted(by_family.items()):
            per_topic = max(10, PER_FAMILY // len(fam_topics))
            for t in fam_topics:
                _f, sender, own = split(ns, t)  # type: ignore[misc]
                btopic = broker_topic(ns, family, t) if family in ("d", "u") else "presence"
                kind = inner_kind(family, btopic)
                captured = topics[t]
                values = _values(kind, captured)
                for i in range(per_topic):
                    await h.publish_raw(t, gen.one(kind, t, btopic, captured, values, clients[sender]))
                    await h.publish_raw(own, gen.one(kind, own, btopic, captured, values, None))
                    sent[family] += 2
                    if i % 50 == 0:  # the queue keeps working during the barrage
                        await qc.publish(f"during-{during}")
                        during += 1
        assert await h.flush(60)

        # -- every node is up, nothing accepted is lost -------------------------------------------------
        for n, ep in eps.items():
            assert ep.connected, n
            await ep.publish(f"/data/{n}", f"marker-{n}")
        for n, ep in eps.items():
            want = {(other.id, f"marker-{m}") for m, other in eps.items() if other is not ep}
            await until(lambda want=want, n=n: want <= seen[n])  # type: ignore[misc]
        for ep in eps.values():
            assert {p.id for p in ep.peers()} >= {x.id for x in eps.values() if x is not ep}
        with anyio.fail_after(40):
            for x in (sa, sb, qa, qb, qc):
                assert await x.await_master()
        after = {f"after{i}": [i, "x" * i] for i in range(20)}
        for i, (k, v) in enumerate(after.items()):
            await (sa if i % 2 else sb).put(k, v)
        for i in range(20):
            await qc.publish(f"after-{i}")
        await until(lambda: len(accepted) >= 21 + during + 20, 60)
        want_jobs = [f"job-{i}" for i in range(20)] + ["job-a"] + [f"during-{i}" for i in range(during)] + \
            [f"after-{i}" for i in range(20)]
        assert collections.Counter(accepted) == collections.Counter(want_jobs)  # each exactly once
        with anyio.fail_after(40):
            for x in (sa, sb, qa.store, qb.store):
                assert await x.await_idle()
        items = dict(await sa.items())
        assert items == dict(await sb.items())
        assert items == {**before, **after}
        assert dict(await qa.store.items()) == dict(await qb.store.items())
        assert qa.statistics().ready == qa.statistics().acquired == qa.statistics().dead == 0

        # -- and what was dropped was counted -----------------------------------------------------------
        for n, ep in eps.items():
            st = ep.statistics()
            assert st.malformed > stats0[n].malformed and st.forged > stats0[n].forged, (n, st)
            assert codes[n][ErrorCode.MALFORMED_MESSAGE] > 0 and codes[n][ErrorCode.FORGED_MESSAGE] > 0, codes[n]
        assert sum(x.malformed for x in stores.values()) > sum(m for m, _ in store0.values())
        assert sum(x.forged for x in stores.values()) > sum(f for _, f in store0.values())
        for n in ("sa", "sb"):  # the elected store's replicas both saw both
            assert stores[n].malformed > store0[n][0] and stores[n].forged > store0[n][1], {k: (x.malformed, x.forged) for k, x in stores.items()}
        assert set(sent) == {"d", "u", "p", "actor"}

        for x in (qc, qb, qa, sb, sa):
            await x.close()
        tg.cancel_scope.cancel()


def _values(kind: str, captured: list[bytes]) -> list[Any]:
    """The inner values of captured payloads (what mutations start from)."""
    out: list[Any] = []
    for p in captured:
        if kind == "actor":
            out.append(codec.decode(p))
            continue
        for m in decode_batch(p)[0]:
            try:
                out.append(codec.decode(m.payload))
            except DecodeError:
                pass
    return out


async def _subscribed(ep: Endpoint, seen: set[Any], *, task_status: Any) -> None:
    async with ep.subscribe("/data") as sub:
        task_status.started()
        await read_data(sub, seen)


async def _consume(q: Any, accepted: list[Any]) -> None:
    async with q.consume(prefetch=10) as deliveries:
        async for d in deliveries:
            await d.accept()
            accepted.append(d.data)


class _Formatting(logging.Handler):
    """Formats every record, as any handler that writes it somewhere does; keeps what failed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.failures: list[Exception] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.format(record)
        except Exception as exc:  # noqa: BLE001 - what a handler's handleError would get
            self.failures.append(exc)


async def test_an_election_payload_holding_a_huge_int_is_logged(broker: EmbeddedBroker, namespace: str) -> None:
    from asyncactor import messages as actor_messages
    from broker_mqtt.election import MQTTTransport

    handler = _Formatting()
    logger = logging.getLogger("broker_mqtt.election.transport")
    logger.addHandler(handler)
    try:
        async with Endpoint(broker, namespace=namespace) as ep, \
                Endpoint(broker, namespace=namespace, client_id=HOSTILE) as h:
            transport = MQTTTransport(ep, f"{namespace}/actor/store/x", bound=True)
            async with transport.monitor() as messages:
                topic = f"{namespace}/actor/store/x/{HOSTILE}"
                await h.publish_raw(topic, codec.encode(10**5000))  # not a map: skipped, and logged
                hist = actor_messages.encode(actor_messages.Hist(None, ("n2", "n1")))
                await h.publish_raw(topic, codec.encode(hist))
                with anyio.fail_after(20):
                    assert await messages.__anext__() == hist  # the loop lives on
        assert transport.malformed == 1
        assert not handler.failures, handler.failures
    finally:
        logger.removeHandler(handler)
