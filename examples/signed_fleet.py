"""A fleet that signs what it sends (docs/signing.md, docs/security.md). Run: python examples/signed_fleet.py

The gateway and the dashboard each hold an Ed25519 key and trust the other's public key by client
id. A third client without a trusted key publishes on the same topic: the dashboard drops its
message and says why, and still gets the gateway's. In a deployment the keys come from files
(`broker-mqtt keys generate`, `load_private_key`, `load_trust_file`) and the broker's ACL comes from
`broker-mqtt acl generate`.
"""

import anyio

from broker_mqtt import Endpoint, ErrorCode, ErrorEvent, TrustStore, generate_private_key


async def main() -> None:
    gateway_key, dashboard_key = generate_private_key(), generate_private_key()
    trust = TrustStore({"gateway-7": gateway_key.public_key(), "dashboard": dashboard_key.public_key()})

    async with Endpoint(client_id="gateway-7", signing_key=gateway_key, trust=trust) as gateway, \
            Endpoint(client_id="dashboard", signing_key=dashboard_key, trust=trust) as dashboard, \
            Endpoint(client_id="intruder") as intruder:
        async with dashboard.status() as events, dashboard.subscribe("/sensors") as readings:
            assert await gateway.await_peer(dashboard.id, timeout=10)  # its signed hello was verified
            await intruder.publish("/sensors/temp", {"celsius": -273})  # unsigned: dropped
            await gateway.publish("/sensors/temp", {"celsius": 21.5})
            msg = await readings.get()
            print(f"{msg.topic}: {msg.data} from {msg.sender} (gateway-7 is {gateway.id})")
            with anyio.fail_after(10):
                async for event in events:
                    if isinstance(event, ErrorEvent) and event.code is ErrorCode.BAD_SIGNATURE:
                        print(f"dropped: {event.message} on {event.topic}")  # its presence, then its reading
                        if "/d/intruder/" in (event.topic or ""):
                            break
            print(f"dashboard dropped {dashboard.statistics().bad_signatures} unsigned or untrusted PUBLISH(es)")


if __name__ == "__main__":
    anyio.run(main)
