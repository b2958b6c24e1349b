"""An actor in its own process for tests: ``actor_node.py URL NAMESPACE NAME CYCLE GAP [sticky]``.

Prints READY once its actor runs, then one line per event (``TAG <t>``, ``UNTAG``, ``DETAG``,
``PING <node>``), until killed.
"""

import sys
import time

import anyio

from asyncactor import Actor, DetagEvent, PingEvent, TagEvent, UntagEvent
from broker_mqtt import Endpoint
from broker_mqtt.election import MQTTTransport


async def main() -> None:
    url, namespace, name, cycle, gap, *flags = sys.argv[1:]
    async with Endpoint(url, namespace=namespace, name=name) as ep:
        transport = MQTTTransport(ep, f"{namespace}/actor")
        cfg = {"cycle": float(cycle), "gap": float(gap)}
        async with Actor(transport, name=name, cfg=cfg, value=1, sticky="sticky" in flags) as actor:
            print("READY", flush=True)
            async for event in actor:
                match event:
                    case TagEvent():
                        print(f"TAG {time.time()}", flush=True)
                    case UntagEvent():
                        print("UNTAG", flush=True)
                    case DetagEvent(node):
                        print(f"DETAG {node}", flush=True)
                    case PingEvent():
                        print(f"PING {event.node}", flush=True)


anyio.run(main)
