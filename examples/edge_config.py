"""IoT edge nodes that report telemetry and follow a config store whose master is elected.

Three gateways share the elected store "site-config". Whichever gateway the election picks is the
store's master; every gateway reads the config locally and applies changes as they arrive. Then the
master leaves (as if its process were stopped), another gateway takes over, and a config change
made after that reaches the remaining gateway.

Run: python examples/edge_config.py
"""

import anyio

from broker_mqtt import Endpoint
from broker_mqtt.store import MasterChanged, Updated, attach_store

ELECTION = {"cycle": 1.0, "gap": 0.25}  # small, for a quick example; the default is cycle 10 s, gap 1.5 s


async def gateway(ep: Endpoint, store, done: anyio.Event) -> None:
    """Report telemetry at the configured interval; follow config changes."""
    async with store.events() as changes:
        async with anyio.create_task_group() as tg:

            async def follow() -> None:
                async for change in changes:
                    if isinstance(change, Updated) and change.key == "interval":
                        print(f"{ep.name}: interval {change.old_value} -> {change.new_value}")
                    elif isinstance(change, MasterChanged) and change.master is not None:
                        print(f"{ep.name}: store master is {change.master[:8]}, epoch {change.epoch[0]}")

            async def report() -> None:
                while not done.is_set():
                    await ep.publish(f"/telemetry/{ep.name}", {"temp": 21.5})
                    interval = await store.get("interval") if await store.exists("interval") else 0.2
                    with anyio.move_on_after(interval):
                        await done.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(follow)
            tg.start_soon(report)


async def main() -> None:
    async with Endpoint(name="gw-1") as a, Endpoint(name="gw-2") as b, Endpoint(name="gw-3") as c:
        stores = {ep.name: await attach_store(ep, "site-config", election=ELECTION) for ep in (a, b, c)}
        await stores["gw-1"].await_master(10)
        await stores["gw-1"].put("interval", 0.2)
        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            for ep in (a, b, c):
                tg.start_soon(gateway, ep, stores[ep.name], done)
            await anyio.sleep(0.5)
            await stores["gw-2"].put("interval", 0.1)  # from any gateway: it goes to the master
            await anyio.sleep(0.5)

            master = next(name for name, s in stores.items() if s.is_master)
            print(f"{master} leaves; another gateway takes over")
            await stores[master].close()  # hands over at once
            rest = [s for name, s in stores.items() if name != master]
            with anyio.fail_after(10):
                while not any(s.is_master for s in rest):
                    await anyio.sleep(0.05)
            await rest[0].put("interval", 0.3)
            await anyio.sleep(0.5)
            for s in rest:
                print(f"{s.endpoint.name} reads interval = {await s.get('interval')} (master {s.master[:8]})")
            done.set()
        for s in rest:
            await s.close()


if __name__ == "__main__":
    anyio.run(main)
