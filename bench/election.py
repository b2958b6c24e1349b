"""asyncactor election benchmark, simulated part (trio MockClock over the in-memory hub).

For each mode (rotation = the established asyncactor behaviour, d = 0.875 for the oldest chain
member; sticky = ours) it measures:

* failover: kill the "it" node at a random point of its tenure, >= 200 times; time from the
  victim's TagEvent and from its death to the next TagEvent (p50 / p99 / max);
* messages per slot and CPU seconds per node per simulated hour in a steady 5-node group;
  the same with ``heal_beacon`` on (docs/asyncactor.md §7: one mid-slot ``hist`` per tenure).

Rotation is the baseline; the table shows sticky / rotation ratios.  Writes
bench/results/election.json.  Then the real-broker part (bench/election_real.py): actor
processes on an embedded mosquitto, the "it" node SIGKILLed ``--real-kills`` times.

Usage: python bench/election.py [--kills 200] [--nodes 5] [--hours 1]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import time
from typing import Any

import anyio
import trio.testing
from quantile import nearest_rank  # bench/ is this script's own directory

from asyncactor import MemoryHub, TagEvent
from asyncactor.testing import Cluster, overlaps, tenures

CFG = {"cycle": 10.0, "gap": 1.5}
LATENCY, JITTER = 0.05, 0.15  # seconds, one hop (well under gap)
RESULTS = pathlib.Path(__file__).parent / "results" / "election.json"


async def _failover(sticky: bool, kills: int, nodes: int, seed: int) -> dict[str, Any]:
    since_tag: list[float] = []
    since_death: list[float] = []
    rng = random.Random(seed)
    async with MemoryHub(latency=LATENCY, jitter=JITTER, rng=random.Random(seed)) as hub:
        async with anyio.create_task_group() as tg:
            c = Cluster(hub, tg, cfg=CFG, seed=seed, actor_kw={"value": 1, "sticky": sticky})
            await c.spawn_many(f"n{i:03d}" for i in range(nodes))
            spawned = nodes
            await anyio.sleep(5 * (CFG["cycle"] + CFG["gap"]))
            while len(since_tag) < kills:
                its = c.its()
                if not its:
                    await anyio.sleep(0.05)
                    continue
                victim = its[0]
                tagged = c.events(TagEvent, victim)[-1].time
                # die somewhere in the tenure (sticky tenures are long: anywhere in 3 cycles)
                await anyio.sleep(rng.uniform(0, CFG["cycle"] * (3 if sticky else 0.9)))
                if victim not in c.actors or not c.actors[victim].is_it:
                    continue
                died, nxt = await c.kill_and_await_tag(victim, poll=0.01)
                since_tag.append(nxt - tagged)
                since_death.append(nxt - died)
                await c.spawn(f"n{spawned:03d}")
                spawned += 1
                await anyio.sleep(3 * (CFG["cycle"] + CFG["gap"]))
            c.kill_all()
    ts = tenures(c.log)
    return {
        "kills": kills,
        "since_victim_tag": {
            "p50": nearest_rank(since_tag, 0.5),
            "p99": nearest_rank(since_tag, 0.99),
            "max": max(since_tag),
        },
        "since_death": {
            "p50": nearest_rank(since_death, 0.5),
            "p99": nearest_rank(since_death, 0.99),
            "max": max(since_death),
        },
        "double_it": len(overlaps(ts)),
    }


async def _steady(sticky: bool, nodes: int, hours: float, seed: int, beacon: bool = False) -> dict[str, Any]:
    cfg = {**CFG, "heal_beacon": beacon}
    async with MemoryHub(latency=LATENCY, jitter=JITTER, rng=random.Random(seed)) as hub:
        async with anyio.create_task_group() as tg:
            c = Cluster(hub, tg, cfg=cfg, seed=seed, actor_kw={"value": 1, "sticky": sticky})
            await c.spawn_many(f"n{i:03d}" for i in range(nodes))
            await anyio.sleep(60)
            sent0, t0 = hub.sent, time.process_time()
            slots0 = sum(a.core.stats.pings_sent for a in c.actors.values())
            await anyio.sleep(hours * 3600)
            cpu = time.process_time() - t0
            sent = hub.sent - sent0
            pings = sum(a.core.stats.pings_sent for a in c.actors.values()) - slots0
            c.kill_all()
    slot_s = CFG["cycle"] + CFG["gap"]
    slots = hours * 3600 / slot_s  # rotation: one slot per ping round; sticky: same cadence basis
    return {
        "messages_per_slot": sent / slots,
        "pings_per_slot": pings / slots,
        "cpu_s_per_node_per_sim_hour": cpu / nodes / hours,
        "tags": len([r for r in c.events(TagEvent)]),
    }


def real_broker_part(results: dict[str, Any], kills: int) -> dict[str, Any] | None:
    """The real-broker part: actor processes on an embedded mosquitto, SIGKILLed for real.

    See bench/election_real.py (sticky mode, cycle 1 s, gap 0.25 s; failover measured from the
    kill to the survivor's TagEvent). ``kills`` 0 skips it.
    """
    if kills <= 0:
        return None
    from election_real import run  # bench/ is on sys.path when this script runs

    return run(kills=kills)


def _run(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    sticky = mode == "sticky"
    clock = trio.testing.MockClock(autojump_threshold=0)
    opts = {"backend": "trio", "backend_options": {"clock": clock}}
    fo = anyio.run(_failover, sticky, args.kills, args.nodes, args.seed, **opts)
    clock = trio.testing.MockClock(autojump_threshold=0)
    st = anyio.run(_steady, sticky, args.nodes, args.hours, args.seed, backend="trio",
                   backend_options={"clock": clock})  # fmt: skip
    clock = trio.testing.MockClock(autojump_threshold=0)
    sb = anyio.run(_steady, sticky, args.nodes, args.hours, args.seed, True, backend="trio",
                   backend_options={"clock": clock})  # fmt: skip
    return {"failover": fo, "steady": st, "steady_heal_beacon": sb}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=200)
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--hours", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--real-kills", type=int, default=10, help="kills on a real broker (0: skip)")
    args = p.parse_args()
    results: dict[str, Any] = {
        "config": {**CFG, "latency": LATENCY, "jitter": JITTER, "nodes": args.nodes, "kills": args.kills},
        "rotation": _run("rotation", args),  # the baseline: established behaviour
        "sticky": _run("sticky", args),
    }
    results["real_broker"] = real_broker_part(results, args.real_kills)
    rows = [
        ("failover from victim's tag p50 (s)", ("failover", "since_victim_tag", "p50")),
        ("failover from victim's tag p99 (s)", ("failover", "since_victim_tag", "p99")),
        ("failover from victim's tag max (s)", ("failover", "since_victim_tag", "max")),
        ("failover from death p50 (s)", ("failover", "since_death", "p50")),
        ("failover from death p99 (s)", ("failover", "since_death", "p99")),
        ("failover from death max (s)", ("failover", "since_death", "max")),
        ("two 'it' at once (count)", ("failover", "double_it")),
        ("messages per slot", ("steady", "messages_per_slot")),
        ("messages per slot, heal_beacon on", ("steady_heal_beacon", "messages_per_slot")),
        ("CPU s / node / simulated hour", ("steady", "cpu_s_per_node_per_sim_hour")),
    ]

    def get(mode: str, path: tuple[str, ...]) -> float:
        v: Any = results[mode]
        for k in path:
            v = v[k]
        return float(v)

    print(f"asyncactor election, simulated: cycle {CFG['cycle']} s, gap {CFG['gap']} s, "
          f"latency {LATENCY}+{JITTER} s, {args.nodes} nodes, {args.kills} kills per mode")  # fmt: skip
    print(f"{'metric':38} {'rotation (baseline)':>20} {'sticky':>10} {'ratio':>7}")
    table = []
    for label, path in rows:
        r, s = get("rotation", path), get("sticky", path)
        ratio = s / r if r else float("nan")
        table.append({"metric": label, "rotation": r, "sticky": s, "ratio": ratio})
        print(f"{label:38} {r:20.3f} {s:10.3f} {ratio:7.2f}")
    results["table"] = table
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    real = results["real_broker"]
    if real:
        print(f"\nreal broker (mosquitto, {real['kills']} SIGKILLs, sticky, cycle {real['cycle']} s, "
              f"gap {real['gap']} s)")
        for key in ("failover_p50_s", "failover_p99_s", "failover_max_s", "bound_cycle_plus_gap_s",
                    "messages_per_slot", "cpu_s_per_node_hour"):
            print(f"  {key:28} {real[key]}")
    RESULTS.write_text(json.dumps(results, indent=2))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
