"""The real-broker part of bench/election.py: actors as OS processes on an embedded mosquitto.

Three actor nodes (sticky mode, as stores use it) run as separate processes over
``broker_mqtt.election.MQTTTransport``. Repeatedly: wait until one node reports TagEvent, SIGKILL
that process, measure the wall-clock time until another node reports TagEvent, start a
replacement. Also counts the actor PUBLISHes per slot (from a raw subscriber) and the CPU seconds
each node used per hour of running. Run alone: ``python bench/election_real.py [--kills 10]``.

``--members N`` (e.g. 100): N members (sticky, each its own Endpoint, MQTT connection and Actor, as
a deployment has one per node) hosted ``--per-process`` to an OS process over one embedded
mosquitto; a 3-member election (3 processes, one member each) runs first as the baseline. Each
measures the time from start to the first TagEvent, messages per second at the broker (a raw
subscriber on the actor topic) and CPU per idle member (the member processes' CPU time over a
steady idle window, divided by the members; mosquitto's own CPU beside it), then the failover
after ``--kills`` kill -9 of the process holding the current "it" member (time to the next TagEvent
in another process). Prints a table, writes bench/results/election_real_members.json.
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

from process_cpu import cpu_seconds  # noqa: E402 - bench/ is this script's own directory
from quantile import nearest_rank  # noqa: E402


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


def _host_role(url: str, namespace: str, names: list[str], cycle: float, gap: float) -> None:
    """Several members in one process: each its own Endpoint (MQTT connection) and Actor."""
    import anyio

    from asyncactor import Actor, TagEvent
    from broker_mqtt import Endpoint
    from broker_mqtt.election import MQTTTransport

    async def member(name: str, ready: list[str]) -> None:
        async with Endpoint(url, namespace=namespace, name=name) as ep:
            transport = MQTTTransport(ep, f"{namespace}/actor")
            async with Actor(transport, name=name, cfg={"cycle": cycle, "gap": gap}, value=1, sticky=True) as actor:
                ready.append(name)
                if len(ready) == len(names):
                    print("READY", flush=True)
                async for event in actor:
                    if isinstance(event, TagEvent):
                        print(f"TAG {time.time()} {name}", flush=True)

    async def main() -> None:
        ready: list[str] = []
        async with anyio.create_task_group() as tg:
            for name in names:
                tg.start_soon(member, name, ready)

    anyio.run(main)


def _floor_role(url: str, namespace: str, names: list[str], kind: str) -> None:
    """Idle clients with no actor, for the floor under a member's CPU: ``bare`` aiomqtt clients
    (MQTT 5, keepalive 10 s as an Endpoint's, subscribed to the actor topic) or ``endpoint``
    Endpoints with a raw subscription on it."""
    import anyio

    async def bare(name: str, ready: list[str]) -> None:
        import aiomqtt

        from broker_mqtt.transport.broker_url import BrokerURL

        u = BrokerURL.parse(url)
        async with aiomqtt.Client(u.host, u.port, identifier=name, protocol=aiomqtt.ProtocolVersion.V5,
                                  keepalive=10) as client:
            await client.subscribe(f"{namespace}/actor", qos=1)
            ready.append(name)
            if len(ready) == len(names):
                print("READY", flush=True)
            async for _ in client.messages:
                pass

    async def endpoint(name: str, ready: list[str]) -> None:
        from broker_mqtt import Endpoint

        async with Endpoint(url, namespace=namespace, name=name) as ep, ep.subscribe_raw(f"{namespace}/actor") as raw:
            ready.append(name)
            if len(ready) == len(names):
                print("READY", flush=True)
            async for _ in raw:
                pass

    async def main() -> None:
        ready: list[str] = []
        async with anyio.create_task_group() as tg:
            for name in names:
                tg.start_soon(bare if kind == "bare" else endpoint, name, ready)

    anyio.run(main)


def run_floor(clients: int, per_process: int, kind: str, idle: float = 30.0) -> dict[str, Any]:
    """CPU of ``clients`` idle clients of ``kind`` (see :func:`_floor_role`) over one broker."""
    from broker_mqtt import EmbeddedBroker

    with EmbeddedBroker() as broker:
        procs = [subprocess.Popen(
            [sys.executable, __file__, "--role", f"floor-{kind}", "--url", broker.url, "--namespace", "benchactor",
             "--name", ",".join(f"{kind}{j:03d}" for j in range(i, min(i + per_process, clients)))],
            stdout=subprocess.PIPE, text=True, cwd=ROOT) for i in range(0, clients, per_process)]
        try:
            for proc in procs:
                assert proc.stdout is not None
                proc.stdout.readline()  # READY
            time.sleep(5)
            cpu0, w0 = sum(cpu_seconds(p.pid) for p in procs), time.monotonic()
            time.sleep(idle)
            window = time.monotonic() - w0
            cpu = sum(cpu_seconds(p.pid) for p in procs) - cpu0
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    return {"kind": kind, "clients": clients, "processes": len(procs), "idle_window_s": round(window, 1),
            "cpu_ms_per_client_s": round(1000 * cpu / window / clients, 3),
            "cpu_pct_core_all": round(100 * cpu / window, 2)}


class _Host:
    """An OS process hosting ``names`` as members; its TagEvents go to ``events``."""

    def __init__(self, url: str, namespace: str, names: list[str], cycle: float, gap: float,
                 events: queue.Queue[Any]) -> None:
        self.names = names
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--role", "host", "--url", url, "--namespace", namespace,
             "--name", ",".join(names), "--cycle", str(cycle), "--gap", str(gap)],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(events,), daemon=True)
        self._thread.start()

    def _read(self, events: queue.Queue[Any]) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if parts and parts[0] == "READY":
                self.ready.set()
            elif parts and parts[0] == "TAG":
                events.put((self, float(parts[1]), parts[2]))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._thread.join(2)
        if self.proc.stdout:
            self.proc.stdout.close()


def run_members(members: int, per_process: int, kills: int = 3, cycle: float = 1.0, gap: float = 0.25,
                idle: float = 30.0) -> dict[str, Any]:
    """One election of ``members`` members, ``per_process`` to a process (module docstring)."""
    import anyio

    from broker_mqtt import EmbeddedBroker, Endpoint
    from broker_mqtt.wire import codec

    events: queue.Queue[Any] = queue.Queue()
    namespace = "benchactor"
    publishes = 0
    kinds: dict[str, int] = {}
    stop = threading.Event()

    with EmbeddedBroker() as broker:
        assert broker.pid is not None

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
                            async for msg in raw:
                                publishes += 1
                                try:
                                    kind = str(codec.decode(msg.payload).get("t"))
                                except Exception:  # noqa: BLE001 - counted as "?"
                                    kind = "?"
                                kinds[kind] = kinds.get(kind, 0) + 1

            anyio.run(main)

        ready = threading.Event()
        counter = threading.Thread(target=count_publishes, daemon=True)
        counter.start()
        ready.wait(10)

        hosts: list[_Host] = []
        names = [f"m{i:03d}" for i in range(1, members + 1)]
        t0 = time.time()
        for i in range(0, members, per_process):
            hosts.append(_Host(broker.url, namespace, names[i:i + per_process], cycle, gap, events))
        try:
            current, first_tag, _ = events.get(timeout=120)
            for host in hosts:
                host.ready.wait(120)
            all_ready = time.time()
            # settled: a window of max(3 s, 2 cycles) with at most ~2 messages per cycle (the joiners'
            # init/vers/ping storm is over: at 100 members it can last a minute, docs/asyncactor.md)
            span = max(3.0, 2 * cycle)
            while True:
                n0 = publishes
                time.sleep(span)
                if publishes - n0 <= 2 * span / cycle or time.time() - all_ready > 300:
                    break
            settled = time.time()
            while not events.empty():  # sticky: the holder keeps the tag; drain, keep the latest
                current, _, _ = events.get_nowait()
            # the idle window: CPU of every member process, mosquitto's, and the broker's PUBLISHes
            cpu0 = {h: cpu_seconds(h.proc.pid) for h in hosts}
            broker_cpu0, pub0, w0 = cpu_seconds(broker.pid), publishes, time.monotonic()
            kinds0 = dict(kinds)
            time.sleep(idle)
            window = time.monotonic() - w0
            cpu = sum(cpu_seconds(h.proc.pid) - cpu0[h] for h in hosts)
            broker_cpu = cpu_seconds(broker.pid) - broker_cpu0
            msgs = publishes - pub0
            idle_kinds = {k: n - kinds0.get(k, 0) for k, n in sorted(kinds.items()) if n - kinds0.get(k, 0)}
            while not events.empty():
                current, _, _ = events.get_nowait()
            failovers: list[float] = []
            alive = members
            while len(failovers) < kills and len(hosts) > 1:
                killed_at = time.time()
                print(f"  kill {len(failovers) + 1}/{kills}: the process of the 'it' member", file=sys.stderr,
                      flush=True)
                current.kill()
                hosts.remove(current)
                alive -= len(current.names)
                while True:
                    other, tagged_at, _ = events.get(timeout=60)
                    if other is not current:
                        failovers.append(tagged_at - killed_at)
                        current = other
                        break
                time.sleep(2 * cycle)
                while not events.empty():
                    current, _, _ = events.get_nowait()
        finally:
            for host in hosts:
                host.kill()
            stop.set()
            counter.join(10)

    return {
        "members": members,
        "processes": -(-members // per_process),
        "cycle": cycle,
        "gap": gap,
        "first_tag_after_start_s": round(first_tag - t0, 2),
        "all_ready_after_start_s": round(all_ready - t0, 2),
        "settled_after_start_s": round(settled - t0, 1),
        "idle_window_s": round(window, 1),
        "broker_msgs_per_s": round(msgs / window, 2),
        "idle_msgs_by_type": idle_kinds,
        "cpu_ms_per_member_s": round(1000 * cpu / window / members, 3),
        "cpu_pct_core_all_members": round(100 * cpu / window, 2),
        "cpu_s_per_member_hour": round(3600 * cpu / window / members, 1),
        "broker_cpu_pct_core": round(100 * broker_cpu / window, 2),
        "kills": len(failovers),
        "failover_s": [round(f, 3) for f in failovers],
        "failover_max_s": round(max(failovers), 3) if failovers else None,
        "bound_cycle_plus_gap_s": cycle + gap,
    }


def _table(rows: list[dict[str, Any]]) -> str:
    cols = [("members", "members"), ("processes", "procs"), ("first_tag_after_start_s", "first tag s"),
            ("settled_after_start_s", "settled s"),
            ("broker_msgs_per_s", "msgs/s"), ("cpu_ms_per_member_s", "CPU ms/member/s"),
            ("cpu_pct_core_all_members", "CPU % core, all"), ("broker_cpu_pct_core", "mosquitto %"),
            ("failover_max_s", "failover max s")]
    lines = [" | ".join(h for _, h in cols)]
    for r in rows:
        lines.append(" | ".join(str(r[k]) for k, _ in cols))
    return "\n".join(lines)


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
            return cpu_seconds(self.proc.pid)
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
    parser.add_argument("--kills", type=int, default=None)
    parser.add_argument("--members", type=int, default=0, help="N members over one broker (module docstring)")
    parser.add_argument("--per-process", type=int, default=10)
    parser.add_argument("--floor", type=int, default=0, help="N idle bare aiomqtt clients, then N Endpoints")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of the idle CPU window")
    parser.add_argument("--label", default="", help="a note stored with the results")
    args = parser.parse_args()
    if args.role == "node":
        _node_role(args.url, args.namespace, args.name, args.cycle, args.gap)
        return
    if args.role == "host":
        _host_role(args.url, args.namespace, args.name.split(","), args.cycle, args.gap)
        return
    if args.role in ("floor-bare", "floor-endpoint"):
        _floor_role(args.url, args.namespace, args.name.split(","), args.role.split("-")[1])
        return
    if args.floor:
        rows = [run_floor(args.floor, args.per_process, kind, args.idle) for kind in ("bare", "endpoint")]
        print(json.dumps(rows, indent=2))
        out = ROOT / "bench" / "results" / "election_real_floor.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                   "loadavg": [round(x, 2) for x in os.getloadavg()], "label": args.label,
                                   "runs": rows}, indent=2) + "\n")
        return
    if args.members:
        kills = 3 if args.kills is None else args.kills
        rows = [run_members(3, 1, kills, args.cycle, args.gap, args.idle),
                run_members(args.members, args.per_process, kills, args.cycle, args.gap, args.idle)]
        base, big = rows
        if base["cpu_ms_per_member_s"]:
            big["cpu_per_member_vs_3"] = round(big["cpu_ms_per_member_s"] / base["cpu_ms_per_member_s"], 2)
        print(_table(rows))
        print(json.dumps(rows, indent=2))
        out = ROOT / "bench" / "results" / "election_real_members.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        load = os.getloadavg()
        out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                   "loadavg": [round(x, 2) for x in load], "cpus": os.cpu_count(),
                                   "label": args.label, "runs": rows}, indent=2) + "\n")
        return
    args.kills = 10 if args.kills is None else args.kills
    print(json.dumps(run(args.kills, args.cycle, args.gap), indent=2))


if __name__ == "__main__":
    main()
