"""asyncactor over the real embedded mosquitto: rotation, exclusivity, failover after a real kill."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import cbor2
import pytest

from asyncactor import Actor, DetagEvent, PingEvent, TagEvent, UntagEvent
from broker_mqtt import EmbeddedBroker, Endpoint, TopicError
from broker_mqtt.election import MQTTTransport

sys.path.insert(0, str(Path(__file__).resolve().parent / "transport"))  # cuttable

pytestmark = [pytest.mark.anyio, pytest.mark.mosquitto]

# Exclusivity needs latency well under gap: a busy 2-core CI machine delays messages by tens of ms,
# at worst a few hundred, so the gap here is far above that (the protocol's tests in simulated time,
# tests/actor/, cover tight settings).
CFG = {"cycle": 1.5, "gap": 0.5}


async def test_three_actors_rotate_and_never_overlap(broker: EmbeddedBroker, namespace: str) -> None:
    """Tenures (Tag .. Untag/Detag) of different nodes never overlap, and the tag moves around."""
    tenures: list[tuple[str, float, float]] = []
    enough = anyio.Event()

    async def run(name: str) -> None:
        async with Endpoint(broker, namespace=namespace, name=name) as ep:
            async with Actor(MQTTTransport(ep, f"{namespace}/actor"), name=name, cfg=CFG, value=1) as actor:
                start = None
                async for event in actor:
                    now = anyio.current_time()
                    if isinstance(event, TagEvent):
                        start = now
                    elif isinstance(event, (UntagEvent, DetagEvent)) and start is not None:
                        tenures.append((name, start, now))
                        start = None
                        if len(tenures) >= 4 and len({n for n, _, _ in tenures}) >= 2:
                            enough.set()

    with anyio.fail_after(90):  # a bound for a stuck run: 4 tenures take ~15 s
        async with anyio.create_task_group() as tg:
            for name in ("a", "b", "c"):
                tg.start_soon(run, name)
            await enough.wait()
            tg.cancel_scope.cancel()
    tenures.sort(key=lambda t: t[1])
    for (n1, _, end1), (n2, start2, _) in zip(tenures, tenures[1:], strict=False):
        assert start2 >= end1 - 0.01, f"{n1} and {n2} were 'it' at the same time"


async def test_own_messages_come_back_exactly_once_and_bare(broker: EmbeddedBroker, namespace: str) -> None:
    async with Endpoint(broker, namespace=namespace) as ep, Endpoint(broker, namespace=namespace) as spy:
        transport = MQTTTransport(ep, f"{namespace}/actor")
        async with transport.monitor() as msgs, spy.subscribe_raw(f"{namespace}/actor") as raw:
            await transport.send({"t": "init", "node": "x"})
            with anyio.fail_after(5):
                assert await msgs.__anext__() == {"t": "init", "node": "x"}
                bare = await raw.__anext__()
            assert cbor2.loads(bare.payload) == {"t": "init", "node": "x"}  # no envelope
            with anyio.move_on_after(0.3):
                pytest.fail(f"echoed twice: {await msgs.__anext__()}")
        with pytest.raises(TopicError):
            MQTTTransport(ep, "a/+/b")


async def test_sticky_failover_after_a_real_kill(broker: EmbeddedBroker, namespace: str) -> None:
    """The "it" node's process is SIGKILLed; a survivor takes the tag. (How soon: bench/election_real.py.)
    The gap is wider than CFG's: the victim, a process of its own, must ping within it slot after
    slot while the survivor watches, or the survivor rightly takes the tag from it."""
    cfg = {"cycle": 3.0, "gap": 1.0}
    here = Path(__file__).parent
    proc = subprocess.Popen(
        [sys.executable, str(here / "actor_node.py"), broker.url, namespace, "victim",
         str(cfg["cycle"]), str(cfg["gap"]), "sticky"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(here.parent)},
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "READY"
        line = ""
        with anyio.fail_after(15):
            while not line.startswith("TAG"):
                line = await anyio.to_thread.run_sync(proc.stdout.readline)
        async with Endpoint(broker, namespace=namespace, name="survivor") as ep:
            transport = MQTTTransport(ep, f"{namespace}/actor")
            async with Actor(transport, name="survivor", cfg=cfg, value=1, sticky=True) as actor:
                pings = 0
                with anyio.fail_after(60):  # sticky: the living 'it' keeps the tag, slot after slot
                    async for event in actor:
                        assert not isinstance(event, TagEvent), "the survivor took the tag from a living 'it'"
                        if isinstance(event, PingEvent) and event.node == "victim":
                            pings += 1
                            if pings == 3:
                                break
                assert not actor.is_it
                proc.kill()
                with anyio.fail_after(60):  # a bound for a stuck run: the protocol takes ~cycle + gap
                    async for event in actor:
                        if isinstance(event, TagEvent):
                            break
                assert actor.is_it
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


async def test_the_transport_reports_its_links_and_sends_nothing_while_cut_off(
        broker: EmbeddedBroker, namespace: str) -> None:
    """``MQTTTransport.links()`` follows the endpoint's connection (the actor bids only while
    connected, docs/asyncactor.md §10), and what it is given while disconnected is dropped, not
    queued for the reconnect (a stale ping would count as a bid on a view the group has left)."""
    from cuttable import CuttableRelay

    relay = CuttableRelay(broker.port)
    try:
        async with Endpoint(f"mqtt://127.0.0.1:{relay.port}", namespace=namespace, reconnect_delay=(0.05, 0.2)) as ep, \
                Endpoint(broker, namespace=namespace) as watcher:
            transport = MQTTTransport(ep, f"{namespace}/links", bound=True)
            seen = MQTTTransport(watcher, f"{namespace}/links", bound=True)
            async with transport.links() as states, seen.monitor() as arrived:
                assert await anext(states) is True
                relay.down()
                with anyio.fail_after(30):
                    assert await anext(states) is False
                await transport.send({"t": "ping", "node": ep.id.hex, "value": 1, "history": [ep.id.hex]})
                assert transport.dropped_offline == 1
                relay.up()
                with anyio.fail_after(30):
                    assert await anext(states) is True
                await transport.send({"t": "init", "node": ep.id.hex})
                with anyio.fail_after(30):
                    first = await anext(arrived)
                assert first["t"] == "init"  # the ping sent while cut off never arrived
    finally:
        relay.close()
