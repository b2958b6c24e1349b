"""Own messages: No Local on every data filter, in-process delivery to ``local=True`` subscribers.

The broker no longer sends an endpoint what it published itself; ``local=True`` subscribers get
those messages from the endpoint when they are sent, exactly once and in send order, and any own
message that still comes back from a broker is dropped.
"""

from __future__ import annotations

import uuid

import anyio
import cbor2
import pytest
from subscriber_helpers import nothing_more, take

from broker_mqtt import EmbeddedBroker, Endpoint, UsageError
from broker_mqtt.endpoint.subscription import local_prefixes as _local_prefixes
from broker_mqtt.transport.base import Received
from broker_mqtt.wire import codec
from broker_mqtt.wire.identity import default_client_id
from broker_mqtt.wire.message import Kind, NodeEncoder

pytestmark = pytest.mark.anyio
mosquitto = pytest.mark.mosquitto


async def settled_peers(a: Endpoint, b: Endpoint, b_topics: tuple[str, ...]) -> None:
    """Wait until ``a`` saw ``b``'s latest presence (so no more presence PUBLISHes are on the way)."""
    with anyio.fail_after(10):
        while not any(p.id == b.id and set(p.topics) == set(b_topics) for p in a.peers()):
            await anyio.sleep(0.01)


@mosquitto
async def test_the_broker_sends_no_echo_of_own_publications(broker: EmbeddedBroker, namespace: str) -> None:
    """An endpoint that publishes on a prefix it subscribes (without local) receives no PUBLISH back."""
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        async with a.subscribe("/x") as plain, a.subscribe("/done") as done, b.subscribe("/x") as other:
            await settled_peers(b, a, ("/x", "/done"))
            await settled_peers(a, b, ("/x",))
            before = a.statistics()
            n = 300
            for i in range(n):
                await a.publish("/x/seq", i)
                if i % 50 == 0:
                    assert await a.flush(10)  # several PUBLISHes, not one coalesced batch
            assert await a.flush(10)
            assert [m.data for m in await take(other, n)] == list(range(n))
            # A barrier: the broker wrote any echo of a's PUBLISHes to a's connection before it
            # forwarded them to b, hence before b's unicast below.
            await b.unicast(a.id, "/done", "barrier")
            assert [m.data for m in await take(done, 1)] == ["barrier"]
            after = a.statistics()
            assert after.publishes_received - before.publishes_received == 1  # the barrier only
            assert after.received - before.received == 1
            assert after.publishes_sent - before.publishes_sent >= 2
            await nothing_more(plain)


@mosquitto
async def test_local_subscriber_gets_own_messages_once_in_order_between_a_peers(
    broker: EmbeddedBroker, namespace: str
) -> None:
    """a and b take turns on one topic, each answering the other's message: a's local subscriber
    sees the strict alternation, every message once, and a receives only b's messages."""
    rounds = 100
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        async with a.subscribe("/chat", local=True) as mine, a.subscribe("/chat") as plain, \
                b.subscribe("/chat") as theirs:
            await settled_peers(a, b, ("/chat",))
            before = a.statistics()
            got: list[tuple[str, int]] = []
            for i in range(rounds):
                await a.publish("/chat/a", i)
                msg = (await take(mine, 1))[0]  # a's own message, handed over when sent
                got.append(("a" if msg.sender == a.id else "b", msg.data))
                # b answers a's message; a waits for the answer before its next message.
                assert (await take(theirs, 1))[0].data == i
                await b.publish("/chat/b", i)
                msg = (await take(mine, 1))[0]
                got.append(("a" if msg.sender == a.id else "b", msg.data))
                assert (await take(plain, 1))[0].data == i
            assert got == [(who, i) for i in range(rounds) for who in ("a", "b")]
            await nothing_more(mine)
            await nothing_more(plain, 0.05)
            await nothing_more(theirs, 0.05)  # b got a's messages only, not its own
            assert a.statistics().received - before.received == rounds  # b's, none of its own


@mosquitto
async def test_a_burst_of_own_messages_never_blocks_the_publisher_and_keeps_order(
    broker: EmbeddedBroker, namespace: str
) -> None:
    """The publishing task is also the consumer: publishing far beyond the local subscriber's
    buffer must not wait for it; afterwards everything arrives once, own messages in send order,
    then the peer's message that arrived after them."""
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        async with a.subscribe("/burst", local=True, buffer=2) as mine, b.subscribe("/burst") as theirs:
            await settled_peers(a, b, ("/burst",))
            n = 500
            with anyio.fail_after(10):
                for i in range(n):
                    await a.publish("/burst", i)
                await a.publish_encoded("/burst/enc", [codec.encode(-i) for i in range(1, 6)])
            assert len(await take(theirs, n + 5)) == n + 5
            await b.publish("/burst/peer", "after")  # arrives while a's own messages wait
            got = await take(mine, n + 5 + 1)
            assert [m.data for m in got] == [*range(n), *(-i for i in range(1, 6)), "after"]
            assert [m.sender for m in got] == [a.id] * (n + 5) + [b.id]
            assert got[n].payload == codec.encode(-1)  # publish_encoded: the same packed bytes
            await nothing_more(mine)


@mosquitto
async def test_unicast_to_itself_reaches_local_subscribers_without_the_broker(
    broker: EmbeddedBroker, namespace: str
) -> None:
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        async with a.subscribe("/u", local=True) as mine, a.subscribe("/u") as plain, b.subscribe("/u") as theirs:
            await a.flush(5)
            sent = a.statistics().publishes_sent
            for i in range(5):
                await a.unicast(a.id, "/u/self", i)
            got = await take(mine, 5)
            assert [(m.data, m.sender, m.topic) for m in got] == [(i, a.id, "/u/self") for i in range(5)]
            assert a.statistics().publishes_sent == sent  # never went through the broker
            await nothing_more(mine)
            await nothing_more(plain, 0.05)
            await nothing_more(theirs, 0.05)


@mosquitto
async def test_several_receivers_including_itself(broker: EmbeddedBroker, namespace: str) -> None:
    async with (
        Endpoint(broker, namespace=namespace) as a,
        Endpoint(broker, namespace=namespace) as b,
        Endpoint(broker, namespace=namespace) as c,
    ):
        async with a.subscribe("/r", local=True, kind=Kind.COMMAND) as mine, \
                b.subscribe("/r", kind=Kind.COMMAND) as at_b, c.subscribe("/r", kind=Kind.COMMAND) as at_c:
            await settled_peers(a, b, ("/r",))
            await settled_peers(a, c, ("/r",))
            await a.send_node(Kind.COMMAND, "/r/1", "a and b", receivers=(a.id, b.id))
            await a.send_node(Kind.COMMAND, "/r/2", "b and c", receivers=(b.id, c.id))
            assert [m.data for m in await take(mine, 1)] == ["a and b"]
            assert [m.data for m in await take(at_b, 2)] == ["a and b", "b and c"]
            assert [m.data for m in await take(at_c, 1)] == ["b and c"]
            await nothing_more(mine)


@mosquitto
async def test_own_messages_respect_kind_and_prefix(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as a:
        async with (
            a.subscribe("/k", local=True) as data,
            a.subscribe("/k", "/k/deep", local=True, kind=Kind.COMMAND) as commands,
            a.subscribe("/k/deep", local=True) as deep,
            a.subscribe("/other", local=True) as other,
        ):
            await a.publish("/k/deep/1", "d1")
            await a.send_node(Kind.COMMAND, "/k/deep/2", "c1")
            await a.unicast(a.id, "/k/3", "d2")
            await a.send_node(Kind.COMMAND, "/k/4", "c2", receivers=(a.id,))
            await a.send_node(Kind.CONTROL, "/k/5", "ctl")
            await a.publish("/kk", "not under /k")
            assert [m.data for m in await take(data, 2)] == ["d1", "d2"]
            assert [m.data for m in await take(commands, 2)] == ["c1", "c2"]  # once, though two prefixes match
            assert [m.data for m in await take(deep, 1)] == ["d1"]
            for sub in (data, commands, deep, other):
                await nothing_more(sub, 0.1)


@mosquitto
async def test_local_may_name_some_of_the_prefixes(broker: EmbeddedBroker, namespace: str) -> None:
    """``local=("/w",)``: own messages on ``/w`` only; a peer's messages on every prefix."""
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        async with a.subscribe("/log", "/w", local=("/w",), kind=Kind.COMMAND) as sub:
            await settled_peers(b, a, ("/log", "/w"))
            await a.send_node(Kind.COMMAND, "/log/1", "own log")
            await a.send_node(Kind.COMMAND, "/w/1", "own write", receivers=(a.id,))
            await a.send_node(Kind.COMMAND, "/w/2", "own broadcast write")
            await b.send_node(Kind.COMMAND, "/log/2", "peer log")
            await b.send_node(Kind.COMMAND, "/w/3", "peer write", receivers=(a.id,))
            got = [m.data for m in await take(sub, 4)]
            assert got[:2] == ["own write", "own broadcast write"]  # in-process, at send time
            assert sorted(got[2:]) == ["peer log", "peer write"]
            await nothing_more(sub, 0.1)


async def test_local_prefixes_must_lie_under_subscribed_ones() -> None:
    ep = Endpoint("mqtt://127.0.0.1:1")  # never entered: subscribe checks its arguments first
    with pytest.raises(UsageError, match="not under a subscribed prefix"):
        ep.subscribe("/a", "/b", local=("/c",))
    with pytest.raises(UsageError, match="not under a subscribed prefix"):
        ep.subscribe("/a/b", local=("/a",))  # wider than what is subscribed
    for bad in ("/a", None, [["/a"]], [b"/a"]):
        with pytest.raises(UsageError, match="local takes"):
            ep.subscribe("/a", local=bad)  # type: ignore[arg-type]
    assert _local_prefixes(["a"], ("/a", "/b")) == ("a",)  # "a" and "/a" are one topic
    assert _local_prefixes(("/a/deep",), ("/a",)) == ("/a/deep",)
    assert _local_prefixes(True, ("/a", "/b")) == ("/a", "/b")
    assert _local_prefixes(False, ("/a",)) == ()


@mosquitto
async def test_a_local_prefix_below_a_subscribed_one(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as a, a.subscribe("/a", local=("/a/own",)) as sub:
        await a.publish("/a/other", "not delivered")
        await a.publish("/a/own/1", "delivered")
        assert [m.data for m in await take(sub, 1)] == ["delivered"]
        await nothing_more(sub, 0.1)


# -- without a broker: the endpoint is fed PUBLISHes directly ---------------------------------------


def _publish(topic: str, payload: bytes, sub_id: int | None) -> Received:
    return Received(topic, payload, qos=1, retain=False, subscription_ids=() if sub_id is None else (sub_id,))


@pytest.mark.parametrize("with_ids", [True, False])
async def test_own_messages_that_come_back_anyway_are_dropped(with_ids: bool) -> None:
    """A broker that ignores No Local: the echo must not reach a local subscriber a second time."""
    ep = Endpoint("mqtt://127.0.0.1:1", namespace="ns")  # never connected
    mine_enc = NodeEncoder(ep.id.bytes)
    peer = uuid.uuid4()
    peer_enc = NodeEncoder(peer.bytes)
    async with ep.subscribe("/e", local=True) as mine, ep.subscribe("/e") as plain:
        await ep.publish("/e/1", "own")
        assert [m.data for m in await take(mine, 1)] == ["own"]
        sub_id = next(iter(ep._table.by_filter.values())).sub_id if with_ids else None
        echo = mine_enc.encode(Kind.DATA, "/e/1", cbor2.dumps("own"))
        other = peer_enc.encode(Kind.DATA, "/e/1", cbor2.dumps("peer"))
        await ep._receiver.dispatch(_publish(f"ns/d/{ep.client_id}/e/1", echo, sub_id))  # each PUBLISH names its sender
        await ep._receiver.dispatch(_publish(f"ns/d/{default_client_id(peer)}/e/1", other, sub_id))
        unicast_echo = mine_enc.encode(Kind.DATA, "/e/2", cbor2.dumps("own unicast"), (ep.id.bytes,))
        await ep._receiver.dispatch(_publish(f"ns/u/{ep.id.hex}/{ep.client_id}/e/2", unicast_echo, 2 if with_ids else None))
        assert [(m.data, m.sender) for m in await take(mine, 1)] == [("peer", peer)]
        assert [(m.data, m.sender) for m in await take(plain, 1)] == [("peer", peer)]
        await nothing_more(mine, 0.1)
        await nothing_more(plain, 0.05)


async def test_full_local_subscriber_keeps_arrival_order() -> None:
    """Own messages beyond the buffer wait in order; a PUBLISH received meanwhile waits behind them."""
    ep = Endpoint("mqtt://127.0.0.1:1", namespace="ns")  # never connected
    peer = uuid.uuid4()
    peer_enc = NodeEncoder(peer.bytes)
    async with ep.subscribe("/o", local=True, buffer=2) as mine:
        sub_id = next(iter(ep._table.by_filter.values())).sub_id
        with anyio.fail_after(30):
            for i in range(10):
                await ep.publish("/o", i)  # never waits, though the buffer holds 2
        assert len(mine._own) == 8
        dispatched = anyio.Event()

        async def receive() -> None:
            await ep._receiver.dispatch(_publish(f"ns/d/{default_client_id(peer)}/o", peer_enc.encode(Kind.DATA, "/o", cbor2.dumps("peer")), sub_id))
            dispatched.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(receive)
            await anyio.sleep(0.05)
            assert not dispatched.is_set()  # the receiver waits behind the own messages
            got = [m.data for m in await take(mine, 11)]
        assert got == [*range(10), "peer"]
        assert dispatched.is_set() and not mine._own
        await ep.publish("/o", "next")
        assert [m.data for m in await take(mine, 1)] == ["next"]


async def test_no_local_subscriber_no_extra_work() -> None:
    """Without local subscribers the send path does not look for any (one cheap check)."""
    ep = Endpoint("mqtt://127.0.0.1:1", namespace="ns")  # never connected
    calls: list[object] = []
    ep._deliver_own = lambda *args: calls.append(args)  # type: ignore[method-assign]
    async with ep.subscribe("/n") as plain:
        await ep.publish("/n", 1)
        await ep.publish_encoded("/n", [codec.encode(2)])
        await ep.send_node(Kind.COMMAND, "/n", 3)
        await ep.unicast(ep.id, "/n", 4)
        assert calls == []
        await nothing_more(plain, 0.05)
    async with ep.subscribe("/n", local=True):
        await ep.publish("/n", 5)
        assert len(calls) == 1
    await ep.publish("/n", 6)
    assert len(calls) == 1  # unsubscribed: back to no work


@mosquitto
async def test_each_subscriber_gets_its_own_copy_of_a_message(broker: EmbeddedBroker, namespace: str) -> None:
    """Two subscribers of one endpoint on one prefix, from a peer and (``local=True``) from the
    endpoint itself: one changing the value it received changes nothing the other sees."""
    async with Endpoint(broker, namespace=namespace) as a, Endpoint(broker, namespace=namespace) as b:
        async with b.subscribe("/cfg", local=True) as first, b.subscribe("/cfg", local=True) as second:
            await settled_peers(a, b, ("/cfg",))
            for publisher, sent in ((a, ["h1"]), (b, ["h2"])):  # from a peer (one PUBLISH), then own (in-process)
                await publisher.publish("/cfg/x", {"hosts": sent})
                one, other = (await take(first, 1))[0], (await take(second, 1))[0]
                assert one is not other
                one.data["hosts"].append("changed")
                one.data["new"] = 1
                assert other.data == {"hosts": sent}
