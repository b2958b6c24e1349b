"""Endpoint against a real mosquitto: pub/sub, prefixes, subscription ids, unicast, peers, bad input."""

from __future__ import annotations

import datetime as dt
import ipaddress
import uuid
from collections import Counter

import anyio
import cbor2
import pytest
from subscriber_helpers import nothing_more, take

from broker_mqtt import (
    EmbeddedBroker,
    Endpoint,
    ErrorCode,
    ErrorEvent,
    PayloadTooLarge,
    PeerAdded,
    PeerLost,
    PeerRemoved,
    TopicError,
    UsageError,
)
from broker_mqtt.wire.message import Kind, NodeEncoder

pytestmark = [pytest.mark.anyio, pytest.mark.mosquitto]


async def test_publish_subscribe_prefix_semantics(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        async with b.subscribe("/sensors") as sub:
            value = {"c": 21.5, "at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "ip": ipaddress.ip_address("::1")}
            await a.publish("/sensors/temp/1", value)
            await a.publish("/sensorsX", "not for /sensors")
            await a.publish("/sensors", "the prefix itself")
            got = await take(sub, 2)
            assert [(m.topic, m.sender) for m in got] == [("/sensors/temp/1", a.id), ("/sensors", a.id)]
            assert got[0].data == value
            await nothing_more(sub)


async def test_order_is_kept_per_publisher(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        async with b.subscribe("/seq") as sub:
            for i in range(5000):
                await a.publish("/seq", i)
            assert [m.data for m in await take(sub, 5000)] == list(range(5000))


async def test_own_messages_only_when_asked(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as a:
        async with a.subscribe("/x") as plain, a.subscribe("/x", local=True) as mine:
            await a.publish("/x/1", 1)
            assert [m.data for m in await take(mine, 1)] == [1]
            await nothing_more(plain)


async def test_overlapping_filters_never_deliver_twice(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        async with (
            b.subscribe("/a", "/a/b", "/a/b/c") as wide,
            b.subscribe("/a/b") as narrow,
            b.subscribe("/a/b") as narrow_twin,
        ):
            await a.publish("/a/b/c/d", "deep")
            await a.publish("/a/z", "side")
            assert [m.data for m in await take(wide, 2)] == ["deep", "side"]
            assert [m.data for m in await take(narrow, 1)] == ["deep"]
            assert [m.data for m in await take(narrow_twin, 1)] == ["deep"]
            for sub in (wide, narrow, narrow_twin):
                await nothing_more(sub, 0.2)


async def test_mosquitto_sends_a_copy_per_subscription_and_ids_tell_them_apart(
    broker: EmbeddedBroker, namespace: str
) -> None:
    """The raw layer sees both copies (one per subscription id); subscribers see one each."""
    async with Endpoint(broker, namespace=namespace) as a:
        async with a.subscribe_raw(f"{namespace}/d/#") as r1, a.subscribe_raw(f"{namespace}/d/+/k/#") as r2:
            await a.publish("/k/1", 1)
            with anyio.fail_after(30):
                m1, m2 = await r1.__anext__(), await r2.__anext__()
            assert m1.topic == m2.topic == f"{namespace}/d/{a.client_id}/k/1"  # the sender names itself


async def test_unicast_reaches_one_endpoint(broker: EmbeddedBroker, namespace: str) -> None:
    async with (
        Endpoint(broker, namespace=namespace) as a,
        Endpoint(broker, namespace=namespace) as b,
        Endpoint(broker, namespace=namespace) as c,
    ):
        async with b.subscribe("/direct") as sb, c.subscribe("/direct") as sc:
            await a.unicast(b.id, "/direct/hi", "only b")
            assert [m.data for m in await take(sb, 1)] == ["only b"]
            await nothing_more(sc)


async def test_peers_added_removed_and_await_peer(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace, name="watcher") as a:
        assert await a.await_peer(uuid.uuid4(), timeout=0.2) is False
        async with a.status() as events:
            async with Endpoint(broker, namespace=namespace, name="visitor") as b:
                async with b.subscribe("/v"):
                    assert await a.await_peer(b.id, timeout=5)
                    with anyio.fail_after(30):
                        while not any(p.id == b.id and p.topics == ("/v",) for p in a.peers()):
                            await anyio.sleep(0.01)
            with anyio.fail_after(30):
                seen = []
                async for event in events:
                    if isinstance(event, (PeerAdded, PeerRemoved)):
                        seen.append(type(event))
                    if PeerRemoved in seen:
                        break
            assert seen == [PeerAdded, PeerRemoved]
            assert b.id not in {p.id for p in a.peers()}


async def test_peer_killed_for_real_is_lost(broker: EmbeddedBroker, namespace: str, node_process: type) -> None:
    async with Endpoint(broker, namespace=namespace) as a, a.status() as events:
        node = node_process(broker.url, namespace)
        assert await a.await_peer(node.id, timeout=10)
        node.kill()  # SIGKILL: no goodbye, the broker fires the last will
        with anyio.fail_after(10):
            async for event in events:
                if isinstance(event, PeerLost):
                    assert event.peer.id == node.id
                    break
        assert node.id not in {p.id for p in a.peers()}


async def test_a_node_in_another_process_round_trips(broker: EmbeddedBroker, namespace: str, node_process: type) -> None:
    async with Endpoint(broker, namespace=namespace) as a:
        node = node_process(broker.url, namespace, "echo")
        assert await a.await_peer(node.id, timeout=10)
        async with a.subscribe("/echo/out") as sub:
            for i in range(100):
                await a.publish("/echo/in", {"i": i, "s": {1, 2}})
            got = await take(sub, 100, timeout=10)
        assert [m.data["i"] for m in got] == list(range(100))
        assert all(m.sender == node.id for m in got)
        node.terminate()


async def test_malformed_input_is_reported_and_never_stops_the_loop(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        async with b.status() as events, b.subscribe("/in") as sub:
            enc = NodeEncoder(a.id.bytes)  # a's own sender id, on a's own topic: only the content is bad
            hostile = [
                b"\xff\xfe not cbor",
                cbor2.dumps({"t": "ping"}),
                cbor2.dumps([99, 0, a.id.bytes, None, 16, "/in", b""]),  # wrong version
                enc.encode(Kind.DATA, "/in", b"\xff\xff"),  # payload that does not decode
                enc.encode(Kind.DATA, "/elsewhere", cbor2.dumps(1)),  # topic lies about itself
                NodeEncoder(uuid.uuid4().bytes).encode(Kind.DATA, "/in", cbor2.dumps(2)),  # sender lies: forged
            ]
            for payload in hostile:
                await a.publish_raw(f"{namespace}/d/{a.client_id}/in", payload)
            await a.publish_raw(f"{namespace}/p/not-an-endpoint", b"x")
            await a.publish("/in", "still alive")
            assert [m.data for m in await take(sub, 1)] == ["still alive"]
            codes: Counter[ErrorCode] = Counter()
            with anyio.fail_after(30):
                async for event in events:
                    if isinstance(event, ErrorEvent):
                        codes[event.code] += 1
                    if sum(codes.values()) == 7:
                        break
            assert codes == {ErrorCode.MALFORMED_MESSAGE: 5, ErrorCode.MALFORMED_PAYLOAD: 1,
                             ErrorCode.FORGED_MESSAGE: 1}
            assert b.statistics().malformed >= 4
            assert b.statistics().forged == 1


async def test_bad_topics_and_values_fail_at_the_caller(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as a:
        published = a.statistics().published
        for bad in ["/a/+", "/a/#", "a//b", ""]:
            with pytest.raises(TopicError):
                await a.publish(bad, 1)
        with pytest.raises(TopicError):
            a.subscribe("/a/#")
        with pytest.raises(UsageError):
            a.subscribe()
        with pytest.raises(TypeError):  # EncodeError is a TypeError
            await a.publish("/ok", object())
        assert a.statistics().published == published  # nothing was queued


async def test_payload_larger_than_the_broker_allows() -> None:
    with EmbeddedBroker(max_packet_size=64 * 1024) as small:
        async with Endpoint(small) as a, Endpoint(small) as b, b.subscribe("/big") as sub:
            with pytest.raises(PayloadTooLarge) as info:
                await a.publish("/big", b"x" * 100_000)
            assert info.value.limit == 64 * 1024
            for _ in range(20):  # many messages just under the limit still go, batched under it
                await a.publish("/big", b"y" * 30_000)
            assert len(await take(sub, 20)) == 20


async def test_closing_leaves_nothing_running(broker: EmbeddedBroker, namespace: str) -> None:
    import asyncio

    before = len(asyncio.all_tasks())
    async with Endpoint(broker, namespace=namespace) as a, a.subscribe("/x"), a.status():
        await a.publish("/x", 1)
        assert len(asyncio.all_tasks()) > before
    with anyio.fail_after(10):  # cancelled tasks end within a few loop turns (slower on a busy machine)
        while len(asyncio.all_tasks()) > before:
            await anyio.sleep(0.01)
    assert len(asyncio.all_tasks()) == before


async def test_endpoint_without_url_uses_a_shared_embedded_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BROKER_MQTT_URL", raising=False)
    async with Endpoint() as a, Endpoint() as b, b.subscribe("/hello") as sub:
        await a.publish("/hello", "embedded")
        assert [m.data for m in await take(sub, 1)] == ["embedded"]


async def test_command_messages_reach_command_subscribers_only(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        async with b.subscribe("/s") as data, b.subscribe("/s", kind=Kind.COMMAND) as commands:
            await a.send_node(Kind.COMMAND, "/s/cmd", {"op": "put"})
            await a.send_node(Kind.COMMAND, "/s/one", "unicast", receivers=(b.id,))
            await a.publish("/s/data", "plain")
            assert [m.data for m in await take(commands, 2)] == [{"op": "put"}, "unicast"]
            assert [m.data for m in await take(data, 1)] == ["plain"]
            await nothing_more(data)


async def test_a_burst_of_unicasts_arrives_in_order(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        async with b.subscribe("/u") as sub, b.subscribe("/u/odd") as odd:
            for i in range(2000):
                await a.unicast(b.id, "/u/odd" if i % 2 else "/u/even", i)
            got = await take(sub, 2000)
            # in order per topic (like publishes: each topic is its own MQTT topic), each exactly once
            assert [m.data for m in got if m.topic == "/u/even"] == list(range(0, 2000, 2))
            assert [m.data for m in got if m.topic == "/u/odd"] == list(range(1, 2000, 2))
            assert [m.data for m in await take(odd, 1000)] == list(range(1, 2000, 2))
            assert b.statistics().publishes_received < 2000  # coalesced, and still in order


async def test_publish_encoded_sends_what_publish_sends(broker: EmbeddedBroker, namespace: str) -> None:
    from broker_mqtt.wire import codec

    values = [{"i": i, "t": dt.datetime(2024, 1, 2, tzinfo=dt.UTC), "pad": "x" * (i * 40)} for i in range(12)]
    async with Endpoint(broker, namespace=namespace, max_pending_messages=5) as a, \
            Endpoint(broker, namespace=namespace) as b, b.subscribe("/enc") as sub:
        published = a.statistics().published
        await a.publish("/enc", "first")
        # A group larger than the bound goes out whole once the queue is idle; the next one waits for room.
        await a.publish_encoded("/enc", [codec.encode(v) for v in values])
        await a.publish_encoded("/enc/sub", [codec.encode(v) for v in values[:3]])
        await a.publish("/enc", "last")
        got = await take(sub, 1 + 12 + 3 + 1)
        assert [m.data for m in got] == ["first", *values, *values[:3], "last"]
        assert [m.topic for m in got[13:16]] == ["/enc/sub"] * 3
        assert all(m.sender == a.id for m in got)
        assert [m.payload for m in got[1:13]] == [codec.encode(v) for v in values]  # the same bytes
        assert a.statistics().published - published == 17


async def test_publish_encoded_refuses_bad_input_and_queues_nothing(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as a:
        published = a.statistics().published
        with pytest.raises(UsageError, match="sequence"):
            await a.publish_encoded("/ok", cbor2.dumps(1))  # one bytes object is not a sequence of them
        with pytest.raises(TopicError):
            await a.publish_encoded("/a/+", [cbor2.dumps(1)])
        await a.publish_encoded("/ok", [])
        assert a.statistics().published == published


async def test_a_stuck_subscription_that_drops_holds_up_no_other(broker: EmbeddedBroker, namespace: str) -> None:
    """Two subscriptions of one endpoint on one topic: one never read (drop_oldest, room for one
    PUBLISH), one read. The read one gets everything (a waiting policy would stall it behind the
    stuck one); the stuck one holds the newest PUBLISH, and counts and reports what it dropped."""
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        async with b.status() as events, b.subscribe("/flood", buffer=1, overflow="drop_oldest") as stuck, \
                b.subscribe("/flood") as reader:
            for round_ in range(3):  # three rounds, each flushed: at least three PUBLISHes
                for i in range(100):
                    await a.publish("/flood", round_ * 100 + i)
                assert await a.flush(30)
            assert [m.data for m in await take(reader, 300)] == list(range(300))
            held = [(await stuck.get()).data]
            while stuck.buffered:
                held.append((await stuck.get()).data)
            assert held[-1] == 299 and held == list(range(300 - len(held), 300))  # the newest PUBLISH
            assert stuck.dropped == 300 - len(held) > 0
            assert b.statistics().subscriber_dropped == stuck.dropped and reader.dropped == 0
            with anyio.fail_after(30):
                async for event in events:
                    if isinstance(event, ErrorEvent) and event.code is ErrorCode.SUBSCRIBER_OVERFLOW:
                        assert "/flood" in event.message and "drop oldest" in event.message
                        break
