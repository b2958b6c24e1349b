"""The real-broker part of bench/election.py: actors as OS processes on an embedded mosquitto.

Three actor nodes (sticky mode, as stores use it) run as separate processes over
``broker_mqtt.election.MQTTTransport``. Repeatedly: wait until one node reports TagEvent, SIGKILL
that process, measure the wall-clock time until another node reports TagEvent, start a
replacement. Also counts the actor PUBLISHes per slot (from a raw subscriber) and the CPU seconds
each node used per hour of running. Run alone: ``python bench/election_real.py [--kills 10]``.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from quantile import nearest_rank  # noqa: E402 - bench/ is this script's own directory


def _node_role(url: str, namespace: str, name: str, cycle: float, gap: float) -> None:
    import anyio

    from asyncactor import Actor, TagEvent
    from broker_mqtt import Endpoint
    from broker_mqtt.election import MQTTTransport

    async def main() -> None:
        async with Endpoint(url, namespace=namespace, name=name) as ep:
            transport = MQTTTransport(ep, f"{namespace}/actor")
            async with Actor(transport, name=name, cfg={"cycle": cycle, "gap": gap}, value=1, sticky=True) as actor:
                print("READY", flush=True)
                async for event in actor:
                    if isinstance(event, TagEvent):
                        print(f"TAG {time.time()}", flush=True)

    anyio.run(main)


class _Node:
    def __init__(self, url: str, namespace: str, name: str, cycle: float, gap: float, events: queue.Queue[Any]):
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--role", "node", "--url", url, "--namespace", namespace,
             "--name", name, "--cycle", str(cycle), "--gap", str(gap)],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )
        self.started = time.monotonic()
        self.cpu = 0.0
        self._thread = threading.Thread(target=self._read, args=(events,), daemon=True)
        self._thread.start()

    def _read(self, events: queue.Queue[Any]) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if parts and parts[0] == "TAG":
                events.put((self, float(parts[1])))

    def cpu_seconds(self) -> float:
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (FileNotFoundError, IndexError):
            return self.cpu

    def kill(self) -> None:
        self.cpu = self.cpu_seconds()
        self.proc.kill()
        self.proc.wait()
        self._thread.join(2)
        if self.proc.stdout:
            self.proc.stdout.close()


def run(kills: int = 10, cycle: float = 1.0, gap: float = 0.25) -> dict[str, Any]:
    import anyio

    from broker_mqtt import EmbeddedBroker, Endpoint

    events: queue.Queue[Any] = queue.Queue()
    namespace = "benchactor"
    publishes = 0
    stop = threading.Event()

    with EmbeddedBroker() as broker:
        def count_publishes() -> None:
            async def main() -> None:
                nonlocal publishes
                async with Endpoint(broker, namespace=namespace) as ep, ep.subscribe_raw(f"{namespace}/actor") as raw:
                    ready.set()
                    with anyio.CancelScope() as scope:
                        async def watch() -> None:
                            while not stop.is_set():
                                await anyio.sleep(0.1)
                            scope.cancel()

                        async with anyio.create_task_group() as tg:
                            tg.start_soon(watch)
                            async for _ in raw:
                                publishes += 1

            anyio.run(main)

        ready = threading.Event()
        counter = threading.Thread(target=count_publishes, daemon=True)
        counter.start()
        ready.wait(10)

        serial = 0
        nodes: list[_Node] = []
        dead: list[_Node] = []
        failovers: list[float] = []

        def spawn() -> None:
            nonlocal serial
            serial += 1
            nodes.append(_Node(broker.url, namespace, f"n{serial}", cycle, gap, events))

        for _ in range(3):
            spawn()
        t0 = time.monotonic()
        try:
            current, _ = events.get(timeout=30)  # the first "it"
            while len(failovers) < kills:
                killed_at = time.time()
                print(f"  kill {len(failovers) + 1}/{kills}: {current.name}", file=sys.stderr, flush=True)
                current.kill()
                nodes.remove(current)
                dead.append(current)
                while True:  # sticky: the next TagEvent is the takeover
                    other, tagged_at = events.get(timeout=30)
                    if other is not current:
                        failovers.append(tagged_at - killed_at)
                        current = other
                        break
                spawn()
                time.sleep(cycle)  # let the replacement join before the next kill
            elapsed = time.monotonic() - t0
        finally:
            for node in nodes:
                node.kill()
            stop.set()
            counter.join(10)

    all_nodes = dead + nodes
    node_hours = sum(time.monotonic() - n.started for n in all_nodes) / 3600
    return {
        "cycle": cycle,
        "gap": gap,
        "kills": len(failovers),
        "failover_p50_s": round(statistics.median(failovers), 3),
        "failover_p99_s": round(nearest_rank(failovers, 0.99), 3),
        "failover_max_s": round(max(failovers), 3),
        "bound_cycle_plus_gap_s": cycle + gap,
        "messages_per_slot": round(publishes / (elapsed / cycle), 2),
        "cpu_s_per_node_hour": round(sum(n.cpu for n in all_nodes) / node_hours, 1) if node_hours else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role")
    parser.add_argument("--url")
    parser.add_argument("--namespace")
    parser.add_argument("--name")
    parser.add_argument("--cycle", type=float, default=1.0)
    parser.add_argument("--gap", type=float, default=0.25)
    parser.add_argument("--kills", type=int, default=10)
    args = parser.parse_args()
    if args.role == "node":
        _node_role(args.url, args.namespace, args.name, args.cycle, args.gap)
        return
    print(json.dumps(run(args.kills, args.cycle, args.gap), indent=2))


if __name__ == "__main__":
    main()
