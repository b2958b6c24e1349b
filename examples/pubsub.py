"""Two endpoints on an embedded broker: publish, subscribe, peer events. Run: python examples/pubsub.py"""

import anyio

from broker_mqtt import Endpoint, PeerAdded


async def main() -> None:
    async with Endpoint(name="sensor") as sensor, Endpoint(name="dashboard") as dashboard:
        async with dashboard.status() as events, dashboard.subscribe("/sensors") as readings:
            assert await dashboard.await_peer(sensor.id, timeout=5)
            for i in range(3):
                await sensor.publish(f"/sensors/temp/{i}", {"celsius": 20 + i})
            for _ in range(3):
                msg = await readings.get()
                print(f"{msg.topic}: {msg.data} from {msg.sender}")
            with anyio.move_on_after(1):
                async for event in events:
                    if isinstance(event, PeerAdded):
                        print(f"peer: {event.peer.name}")
                        break


if __name__ == "__main__":
    anyio.run(main)
