"""Signed node messages against a real mosquitto (docs/signing.md, docs/security.md).

Every endpoint here holds its own Ed25519 key and trusts the others' public keys by client id. What
an untrusted party sends — unsigned, signed by a key the receiver does not trust for that client id,
sealed for another topic, replayed — is dropped whole and counted; the trusted traffic around it
still flows. Non-delivery is proved with a marker sent after the dropped message on the same topic:
MQTT keeps one publisher's order per topic, so once the marker arrived the dropped one would have too.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from subscriber_helpers import take

from broker_mqtt import EmbeddedBroker, Endpoint, ErrorCode, ErrorEvent, PeerAdded
from broker_mqtt.store import attach_store
from broker_mqtt.wire.message import Kind, NodeEncoder
from broker_mqtt.wire.signing import Signer, TrustStore, generate_private_key

pytestmark = [pytest.mark.anyio, pytest.mark.mosquitto]

CLIENTS = ("alpha", "beta", "gamma")


@pytest.fixture(scope="module")
def keys() -> dict[str, object]:
    return {name: generate_private_key() for name in (*CLIENTS, "mallory")}


def trust_of(keys: dict[str, object], *names: str) -> TrustStore:
    return TrustStore({n: keys[n].public_key() for n in names})  # type: ignore[attr-defined]


@asynccontextmanager
async def signed(broker: EmbeddedBroker, namespace: str, keys: dict[str, object], name: str,
                 **kw: object) -> AsyncIterator[Endpoint]:
    async with Endpoint(broker, namespace=namespace, client_id=name, signing_key=keys[name],  # type: ignore[arg-type]
                        trust=trust_of(keys, *CLIENTS), **kw) as ep:  # type: ignore[arg-type]
        yield ep


async def errors_until(events: AsyncIterator[object], code: ErrorCode, n: int = 1) -> list[ErrorEvent]:
    got: list[ErrorEvent] = []
    with anyio.fail_after(20):
        async for e in events:
            if isinstance(e, ErrorEvent) and e.code is code:
                got.append(e)
                if len(got) == n:
                    return got
    raise AssertionError("status stream ended")


async def test_signed_endpoints_talk_and_see_each_other(broker: EmbeddedBroker, namespace: str,
                                                        keys: dict[str, object]) -> None:
    async with signed(broker, namespace, keys, "alpha") as a, signed(broker, namespace, keys, "beta") as b:
        assert await a.await_peer(b.id, timeout=20) and await b.await_peer(a.id, timeout=20)  # signed presence
        async with b.subscribe("/t") as sub:
            assert await a.await_peer(b.id, timeout=20)
            for i in range(500):
                await a.publish("/t/x", i)
            await a.unicast(b.id, "/t/direct", "just b")
            got = await take(sub, 501)
        assert [m.data for m in got if m.topic == "/t/x"] == list(range(500))
        assert [m.data for m in got if m.topic == "/t/direct"] == ["just b"]
        assert all(m.sender == a.id for m in got)
        assert b.statistics().bad_signatures == 0 and a.statistics().bad_signatures == 0


async def test_unsigned_untrusted_resealed_and_replayed_publishes_are_dropped(
        broker: EmbeddedBroker, namespace: str, keys: dict[str, object]) -> None:
    async with signed(broker, namespace, keys, "alpha") as a, signed(broker, namespace, keys, "beta") as b, \
            Endpoint(broker, namespace=namespace, client_id="mallory") as m:  # no key: sends unsigned
        async with b.status() as events, b.subscribe("/t") as sub, m.subscribe_raw(f"{namespace}/d/alpha/#") as spy:
            # 1. unsigned, on mallory's own topic
            await m.publish("/t/x", "unsigned")
            await a.publish("/t/x", "marker-1")
            assert [x.data for x in await take(sub, 1)] == ["marker-1"]
            # 2. alpha's sealed batch captured and replayed verbatim (same topic, same counter)
            captured = await spy.__anext__()
            await m.publish_raw(captured.topic, captured.payload)
            await a.publish("/t/x", "marker-2")
            assert [x.data for x in await take(sub, 1)] == ["marker-2"]
            # 3. sealed by mallory's own key but published as alpha (the ACL would stop the topic; the
            #    seal names mallory, and mallory's key is not trusted anyway)
            mallory = Signer(keys["mallory"], "alpha", clock=lambda: 2**60)  # type: ignore[arg-type]
            batch = NodeEncoder(a.id.bytes).encode(Kind.DATA, "/t/x", b"\x63bad")
            await m.publish_raw(f"{namespace}/d/alpha/t/x", mallory.seal(f"{namespace}/d/alpha/t/x", batch))
            # 4. alpha's seal moved to another topic, one alpha never publishes on: were it /t/y, alpha's
            #    marker-4 there could reach b first (two publishers: no order between them), and the seal's
            #    older counter would then be rejected as a replay before its signature is checked
            await m.publish_raw(f"{namespace}/d/alpha/t/z", captured.payload)
            await a.publish("/t/x", "marker-3")
            await a.publish("/t/y", "marker-4")
            assert sorted(x.data for x in await take(sub, 2)) == ["marker-3", "marker-4"]
            dropped = await errors_until(events, ErrorCode.BAD_SIGNATURE, 5)
            got = sorted((e.message.split(":")[0], e.topic) for e in dropped)
            d = f"{namespace}/d"
            assert got == [("bad-signature", f"{d}/alpha/t/x"), ("bad-signature", f"{d}/alpha/t/z"),
                           ("replay", f"{d}/alpha/t/x"), ("unsigned", f"{d}/mallory/t/x"),
                           ("unsigned", f"{namespace}/p/mallory")]  # its presence too: not a peer
            assert b.statistics().bad_signatures == 5


async def test_an_untrusted_presence_is_not_a_peer(broker: EmbeddedBroker, namespace: str,
                                                   keys: dict[str, object]) -> None:
    async with signed(broker, namespace, keys, "alpha") as a, a.status() as events:
        async with Endpoint(broker, namespace=namespace, client_id="mallory",
                            signing_key=keys["mallory"]) as m:  # type: ignore[arg-type]
            await errors_until(events, ErrorCode.BAD_SIGNATURE)  # its signed hello: an unknown signer
            async with signed(broker, namespace, keys, "beta") as b:
                with anyio.fail_after(20):
                    async for e in events:
                        if isinstance(e, PeerAdded):
                            assert e.peer.id == b.id  # beta, never mallory
                            break
                assert m.id not in {p.id for p in a.peers()}


async def test_an_elected_store_runs_signed_and_a_forger_changes_nothing(
        broker: EmbeddedBroker, namespace: str, keys: dict[str, object]) -> None:
    election = {"cycle": 0.5, "gap": 0.1}
    async with signed(broker, namespace, keys, "alpha") as a, signed(broker, namespace, keys, "beta") as b, \
            Endpoint(broker, namespace=namespace, client_id="mallory") as m, b.status() as events:
        sa = await attach_store(a, "s", election=election)
        assert await sa.await_master(20)
        sb = await attach_store(b, "s", election=election)
        await sa.put("k", 1)
        assert await sb.await_idle(20) and await sb.get("k") == 1
        epoch = sb.epoch
        assert epoch is not None
        # mallory, unsigned, claims a huge epoch in alpha's name on the replication topic
        hijack = ["hb", sa.node_id, [10**9, sa.node_id], "master", [0, None], sa.node_id]
        for _ in range(5):
            await m.send_node(Kind.COMMAND, "/$store/s/e", hijack)
        await errors_until(events, ErrorCode.BAD_SIGNATURE)
        await sa.put("k", 2)
        assert await sb.await_idle(20) and await sb.get("k") == 2
        assert sb.epoch == epoch and sb.master == sa.node_id
        await sb.close()
        await sa.close()


async def test_the_cli_signs_and_checks_with_key_and_trust_files(broker: EmbeddedBroker, namespace: str,
                                                                 keys: dict[str, object], tmp_path: Path) -> None:
    from broker_mqtt.transport.keyfiles import save_private_key
    from broker_mqtt.wire.identity import endpoint_id

    for name in ("beta", "gamma"):
        save_private_key(tmp_path / f"{name}.pem", keys[name])  # type: ignore[arg-type]
    (tmp_path / "trust.toml").write_text(trust_of(keys, *CLIENTS).to_toml())
    cli = [sys.executable, "-m", "broker_mqtt"]
    common = ["--broker", broker.url, "--namespace", namespace, "--trust", str(tmp_path / "trust.toml")]
    sub = await anyio.open_process([*cli, "sub", *common, "--client-id", "beta", "--signing-key",
                                    str(tmp_path / "beta.pem"), "--count", "1", "--json", "/t"])
    try:
        async with signed(broker, namespace, keys, "alpha") as a, \
                Endpoint(broker, namespace=namespace, client_id="mallory") as m, a.subscribe("/t/cli") as mine:
            beta = endpoint_id("beta")
            assert beta is not None and await a.await_peer(beta, timeout=30)  # signed presence: beta is up
            with anyio.fail_after(30):
                # the CLI subscribes once its presence is up: send until it has taken one (it exits)
                while sub.returncode is None:
                    await m.publish("/t/x", "forged")  # unsigned: the CLI drops it
                    assert await m.flush(10)  # (the broker has it before "ok")
                    await a.publish("/t/x", "ok")
                    assert await a.flush(10)
                    with anyio.move_on_after(0.5):
                        await sub.wait()
            assert sub.stdout is not None
            out = (await sub.stdout.receive()).decode()
            assert '"ok"' in out and "forged" not in out and sub.returncode == 0
            done = await anyio.run_process([*cli, "pub", *common, "--client-id", "gamma", "--signing-key",
                                            str(tmp_path / "gamma.pem"), "/t/cli", '"from the cli"'])
            assert done.returncode == 0
            assert [x.data for x in await take(mine, 1)] == ["from the cli"]
            bad = await anyio.run_process([*cli, "pub", *common, "--client-id", "bm-x", "/t/cli", "1"], check=False)
            assert bad.returncode == 2 and b"reserved" in bad.stderr
    finally:
        if sub.returncode is None:
            sub.kill()
        await sub.aclose()


async def test_keys_learned_from_fleet_signed_key_records(broker: EmbeddedBroker, namespace: str,
                                                          keys: dict[str, object]) -> None:
    import time

    from broker_mqtt.wire.signing import KeyRecord

    fleet, rogue_fleet = generate_private_key(), generate_private_key()

    def record(name: str, signer: object) -> bytes:
        raw = keys[name].public_key().public_bytes_raw()  # type: ignore[attr-defined]
        return KeyRecord(name, raw, int(time.time()), None).sign(signer)  # type: ignore[arg-type]

    def endpoint(name: str, rec: bytes) -> Endpoint:
        return Endpoint(broker, namespace=namespace, client_id=name, signing_key=keys[name],  # type: ignore[arg-type]
                        trust=TrustStore(fleet_key=fleet.public_key()), key_record=rec)

    async with endpoint("alpha", record("alpha", fleet)) as a, a.status() as events:
        async with endpoint("beta", record("beta", fleet)) as b, b.subscribe("/t") as sub:
            assert await a.await_peer(b.id, timeout=20) and await b.await_peer(a.id, timeout=20)
            await a.publish("/t/x", "known by its record")
            assert [x.data for x in await take(sub, 1)] == ["known by its record"]
            # gamma's record is signed by another fleet key: nobody learns its key, its messages are dropped
            async with endpoint("gamma", record("gamma", rogue_fleet)) as g:
                bad = await errors_until(events, ErrorCode.BAD_SIGNATURE, 1)
                assert "key record" in bad[0].message
                assert g.id not in {p.id for p in a.peers()}
        assert a.statistics().bad_signatures >= 1
