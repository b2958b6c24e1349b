"""Three actors on one MQTT topic take turns being "it"; the application reads events with async for.

Each slot one node is "it" (TagEvent until UntagEvent); the others see a PingEvent. Run:
python examples/actor_events.py
"""

import anyio

from asyncactor import Actor, PingEvent, TagEvent, UntagEvent
from broker_mqtt import Endpoint
from broker_mqtt.election import MQTTTransport

CONFIG = {"cycle": 0.6, "gap": 0.2}  # short slots for a quick example (default: cycle 10 s, gap 1.5 s)


async def node(ep: Endpoint, name: str, turns: dict[str, int], stop: anyio.Event) -> None:
    async with Actor(MQTTTransport(ep, "bm/actor/example"), name=name, cfg=CONFIG, value=1) as actor:
        with anyio.move_on_after(30):
            async for event in actor:
                if isinstance(event, TagEvent):
                    turns[name] += 1
                    print(f"{name}: I am it")
                elif isinstance(event, UntagEvent):
                    print(f"{name}: my turn is over")
                elif isinstance(event, PingEvent) and name == "n1":
                    print(f"n1 sees: {event.node} pinged")
                if stop.is_set() or sum(turns.values()) >= 6:
                    stop.set()
                    break


async def main() -> None:
    turns = {"n1": 0, "n2": 0, "n3": 0}
    stop = anyio.Event()
    async with Endpoint(name="example") as ep, anyio.create_task_group() as tg:
        for name in turns:
            tg.start_soon(node, ep, name, turns, stop)
    print(f"turns taken: {turns}")


if __name__ == "__main__":
    anyio.run(main)
