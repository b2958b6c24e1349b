"""Time from a network heal to rejoined, under random overlapping cuts (issue 23, item 3).

``--nodes`` endpoints (one process, one event loop), each behind its own cuttable TCP relay
(tests/transport/cuttable.py) to one mosquitto, and a watcher connected directly. Every node runs
``--episodes`` seeded episodes: up for 0.5-2 s; the relay goes down (every link cut, new ones
refused); with probability 1/2, 1-3 *flaps* (down 0.5-3 s, up for only 0.05-0.6 s, down again:
overlapping cuts, the link comes back too briefly to rejoin or drops right after); down 0.5-4 s;
then the heal. Measured per final heal: heal -> the node's own ConnectionRestored, and heal -> the
watcher's PeerAdded for it (its presence seen by a peer). A heal not followed by a rejoin within
``--timeout`` counts as missing.

Run it twice, back to back, to compare the backoff of two trees: the ``broker_mqtt`` imported is
the first on ``PYTHONPATH`` (printed), ``--reconnect-delay`` is passed explicitly::

    PYTHONPATH=/work/main python bench/rejoin.py --label before --reconnect-delay 0.05,5
    PYTHONPATH=. python bench/rejoin.py --label after --reconnect-delay 0.05,1

Each run is stored under its label in bench/results/rejoin.json; the table shows every label there.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "transport"))
sys.path.insert(0, str(ROOT / "bench"))

from cuttable import CuttableRelay  # noqa: E402 - the test suite's relay
from quantile import nearest_rank  # noqa: E402

import broker_mqtt  # noqa: E402 - the tree PYTHONPATH names, before or after the change
from broker_mqtt import ConnectionRestored, EmbeddedBroker, Endpoint, PeerAdded  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "rejoin.json"
TREE = str(Path(broker_mqtt.__file__).resolve().parent.parent)  # which broker_mqtt this run measures


class Node:
    def __init__(self, index: int, relay: CuttableRelay, rng: random.Random) -> None:
        self.index, self.relay, self.rng = index, relay, rng
        self.restored: list[float] = []  # monotonic times of ConnectionRestored
        self.seen: list[float] = []  # times the watcher saw its PeerAdded
        self.changed = anyio.Event()
        self.flaps = 0
        self.rejoin: list[float] = []
        self.peer_seen: list[float] = []
        self.missing = 0

    def note(self, times: list[float]) -> None:
        times.append(time.monotonic())
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_after(self, times: list[float], t: float, timeout: float) -> float | None:
        with anyio.move_on_after(timeout):
            while not any(x >= t for x in times):
                await self.changed.wait()
            return next(x for x in times if x >= t) - t
        return None


async def run(args: argparse.Namespace) -> dict[str, Any]:
    low, high = (float(x) for x in args.reconnect_delay.split(","))
    master = random.Random(args.seed)
    with EmbeddedBroker() as broker:
        relays = [CuttableRelay(broker.port) for _ in range(args.nodes)]
        nodes = [Node(i, r, random.Random(master.random())) for i, r in enumerate(relays)]
        try:
            async with Endpoint(broker.url, name="watcher") as watcher, watcher.status() as wevents, \
                    anyio.create_task_group() as tg:
                by_id: dict[Any, Node] = {}

                async def watch() -> None:
                    async for e in wevents:
                        if isinstance(e, PeerAdded) and e.peer.id in by_id:
                            by_id[e.peer.id].note(by_id[e.peer.id].seen)

                tg.start_soon(watch)

                async def one(node: Node, *, task_status: Any) -> None:
                    url = f"mqtt://127.0.0.1:{node.relay.port}"
                    async with Endpoint(url, name=f"n{node.index}", reconnect_delay=(low, high)) as ep, \
                            ep.status() as events:
                        by_id[ep.id] = node
                        task_status.started()

                        async def listen() -> None:
                            async for e in events:
                                if isinstance(e, ConnectionRestored):
                                    node.note(node.restored)

                        async with anyio.create_task_group() as inner:
                            inner.start_soon(listen)
                            await episodes(node, args)
                            inner.cancel_scope.cancel()

                async with anyio.create_task_group() as nodes_tg:
                    for node in nodes:
                        await nodes_tg.start(one, node)
                tg.cancel_scope.cancel()
        finally:
            for r in relays:
                r.close()
    rejoin = [x for n in nodes for x in n.rejoin]
    seen = [x for n in nodes for x in n.peer_seen]

    def q(xs: list[float], p: float) -> float | None:
        return round(nearest_rank(xs, p), 3) if xs else None

    return {
        "broker_mqtt": TREE,
        "reconnect_delay": [low, high], "nodes": args.nodes, "episodes": args.episodes, "seed": args.seed,
        "heals": len(rejoin) + sum(n.missing for n in nodes), "missing": sum(n.missing for n in nodes),
        "flaps": sum(n.flaps for n in nodes),
        "rejoin_p50": q(rejoin, 0.5), "rejoin_p99": q(rejoin, 0.99), "rejoin_max": q(rejoin, 1.0),
        "seen_p50": q(seen, 0.5), "seen_p99": q(seen, 0.99), "seen_max": q(seen, 1.0),
        "rejoin_samples": [round(x, 3) for x in rejoin],
    }


async def episodes(node: Node, args: argparse.Namespace) -> None:
    rng, relay = node.rng, node.relay
    for _ in range(args.episodes):
        await anyio.sleep(rng.uniform(0.5, 2.0))
        relay.down()
        if rng.random() < 0.5:
            for _ in range(rng.randint(1, 3)):
                await anyio.sleep(rng.uniform(0.5, 3.0))
                relay.up()
                await anyio.sleep(rng.uniform(0.05, 0.6))
                relay.down()
                node.flaps += 1
        await anyio.sleep(rng.uniform(0.5, 4.0))
        healed = time.monotonic()
        relay.up()
        took = await node.wait_after(node.restored, healed, args.timeout)
        if took is None:
            node.missing += 1
            continue
        node.rejoin.append(took)
        seen = await node.wait_after(node.seen, healed, 5.0)
        if seen is not None:
            node.peer_seen.append(seen)


def table(results: dict[str, dict[str, Any]]) -> str:
    cols = ["label", "reconnect_delay", "heals", "flaps", "missing", "rejoin p50", "rejoin p99", "rejoin max",
            "seen p50", "seen p99"]
    rows = [cols]
    for label, r in results.items():
        rows.append([label, f"{r['reconnect_delay'][0]:g},{r['reconnect_delay'][1]:g}", str(r["heals"]),
                     str(r["flaps"]), str(r["missing"]),
                     *(f"{r[k]:.2f} s" if r[k] is not None else "-" for k in
                       ("rejoin_p50", "rejoin_p99", "rejoin_max", "seen_p50", "seen_p99"))])
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="run")
    parser.add_argument("--reconnect-delay", default="0.05,1", help="low,high seconds (passed explicitly)")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--timeout", type=float, default=30.0, help="a heal not rejoined by then is missing")
    args = parser.parse_args()
    result = anyio.run(run, args)
    print(f"broker_mqtt from {result['broker_mqtt']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    stored = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    stored[args.label] = result
    RESULTS.write_text(json.dumps(stored, indent=2) + "\n")
    print(table(stored))
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
