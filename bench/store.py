"""Data store throughput and latency on the embedded mosquitto, against raw Endpoint baselines.

One run, memory backend, every node its own OS process (tests/store_node.py for store nodes; this
script with ``--role raw`` for the baselines). The orchestrator (this script without ``--role``)
starts one embedded mosquitto and measures, in one session:

- master put/s: puts applied at the master and queued for its clone (1 clone attached);
- clone put visible at the master/s: from the clone's first put to the master holding the last;
- put_unique/s from a clone: one caller (sequential round trips, bound by the raw ping-pong) and
  16 concurrent callers (the figure the 2,000/s target applies to);
- local get/s at a clone (``await get`` and ``get_nowait``);
- replication latency p50/p99, master put -> change event at each of 3 clones (500 puts/s);

and the baselines, same payload shapes: raw ``Endpoint.publish`` -> subscriber throughput, raw
publish -> receive latency at the same rate to 3 subscriber processes (the store's fan-out), raw unicast ping-pong round trips, and a plain dict
lookup. Figures are reported with their ratio to the baseline. It prints a table and writes
bench/results/store.json. Run: ``python bench/store.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from quantile import nearest_rank  # noqa: E402 - bench/ is this script's own directory

NODE = ROOT / "tests" / "store_node.py"


# -- the raw baseline role (its own process; JSON lines on stdin/stdout) ------------------------------
async def _raw_role(args: argparse.Namespace) -> None:
    import anyio

    from broker_mqtt import Endpoint

    async with Endpoint(args.url, namespace=args.namespace, id=uuid.UUID(args.id)) as ep:
        print("READY", ep.id.hex, flush=True)
        stdin = anyio.wrap_file(sys.stdin)
        async with anyio.create_task_group() as tg:
            while line := await stdin.readline():
                req = json.loads(line)
                op, kw = req["op"], req.get("kwargs", {})
                result: Any = None
                if op == "publish":  # n values shaped like a store put event, as fast as possible
                    start = time.time()
                    for i in range(kw["n"]):
                        await ep.publish("/raw/x", ["event", "p", i + 1, ["put", f"k{i}", i, None]])
                    await ep.flush()
                    result = {"start": start}
                elif op == "paced_publish":
                    sent, next_at = {}, time.monotonic()
                    for i in range(kw["n"]):
                        sent[f"lat{i}"] = time.time()
                        await ep.publish("/raw/x", ["event", "p", i + 1, ["put", f"lat{i}", i, None]])
                        next_at += kw["interval"]
                        await anyio.sleep(max(0.0, next_at - time.monotonic()))
                    result = sent
                elif op == "receive":  # answer "subscribed" at once, then arrival times when n arrived
                    async with ep.subscribe("/raw/x") as sub:
                        print(json.dumps({"ok": "subscribed"}), flush=True)
                        seen: dict[str, float] = {}
                        with anyio.fail_after(60):
                            async for msg in sub:
                                seen[msg.data[3][1]] = time.time()
                                if len(seen) >= kw["n"]:
                                    break
                    result = {"first": min(seen.values()), "last": max(seen.values()), "seen": seen}
                elif op == "echo":  # answer every /raw/ping with a unicast /raw/pong, in the background
                    async def echo() -> None:
                        async with ep.subscribe("/raw/ping") as sub:
                            async for msg in sub:
                                await ep.unicast(msg.sender, "/raw/pong", msg.data)

                    tg.start_soon(echo)
                    await anyio.sleep(0.2)
                elif op == "ping":  # n sequential unicast round trips
                    peer = uuid.UUID(hex=kw["peer"])
                    async with ep.subscribe("/raw/pong") as sub:
                        t0 = time.perf_counter()
                        for i in range(kw["n"]):
                            await ep.unicast(peer, "/raw/ping/x", ["put_unique", f"u{i}", i])
                            await sub.get()
                        result = time.perf_counter() - t0
                print(json.dumps({"ok": result}), flush=True)
            tg.cancel_scope.cancel()


# -- the orchestrator -------------------------------------------------------------------------------
class Node:
    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        self.node_id = ""

    def ready(self) -> Node:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "READY":
            raise RuntimeError(f"node did not start: {line}")
        self.node_id = line[1]
        return self

    def send(self, op: str, **kwargs: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "kwargs": kwargs}) + "\n")
        self.proc.stdin.flush()

    def answer(self) -> Any:
        assert self.proc.stdout is not None
        reply = json.loads(self.proc.stdout.readline())
        if "error" in reply:
            raise RuntimeError(f"{reply['error']}: {reply['message']}")
        return reply["ok"]

    def call(self, op: str, **kwargs: Any) -> Any:
        self.send(op, **kwargs)
        return self.answer()

    def stop(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def store_node(url: str, ns: str, role: str, *extra: str) -> Node:
    return Node([sys.executable, str(NODE), url, ns, str(uuid.uuid4()), role, "--hb", "1.0", *extra])


def raw_node(url: str, ns: str) -> Node:
    return Node([sys.executable, __file__, "--role", "raw", url, ns, str(uuid.uuid4())])


def orchestrate(args: argparse.Namespace) -> None:
    from broker_mqtt import EmbeddedBroker

    n_put, n_unique, n_get, n_lat = (20_000, 500, 100_000, 200) if args.quick else (100_000, 2_000, 300_000, 1_000)
    interval = 0.002
    rows: list[dict[str, Any]] = []
    with EmbeddedBroker() as broker:
        url = broker.url

        # baselines: raw endpoints
        ns = "b" + uuid.uuid4().hex[:8]
        pub, sub = raw_node(url, ns).ready(), raw_node(url, ns).ready()
        sub.send("receive", n=n_put)
        assert sub.answer() == "subscribed"
        time.sleep(0.3)
        start = pub.call("publish", n=n_put)["start"]
        raw_rate = n_put / (sub.answer()["last"] - start)
        # latency baseline with the store's fan-out: one publisher, 3 subscriber processes
        lat_subs = [sub, raw_node(url, ns).ready(), raw_node(url, ns).ready()]
        for s in lat_subs:
            s.send("receive", n=n_lat)
            assert s.answer() == "subscribed"
        time.sleep(0.3)
        sent = pub.call("paced_publish", n=n_lat, interval=interval)
        raw_lat = []
        for s in lat_subs:
            seen = s.answer()["seen"]
            raw_lat.extend((seen[k] - sent[k]) * 1000 for k in sent)
        for s in lat_subs[1:]:
            s.stop()
        sub.call("echo")
        raw_rtt = n_unique / pub.call("ping", n=n_unique, peer=sub.node_id.split(".")[0])
        pub.stop()
        sub.stop()
        d = {f"k{i}": i for i in range(1000)}
        t0 = time.perf_counter()
        for _ in range(n_get):
            d.get("k7")
        dict_rate = n_get / (time.perf_counter() - t0)

        # the store: master + 1 clone for throughput
        ns = "s" + uuid.uuid4().hex[:8]
        master = store_node(url, ns, "master").ready()
        clone = store_node(url, ns, "clone", "--write-buffer", str(2 * n_put)).ready()
        assert clone.call("await_synced", timeout=10)
        r = master.call("bench_put", n=n_put, prefix="m")
        master_rate = n_put / r["elapsed"]
        assert clone.call("await_idle", timeout=60) and master.call("await_idle", timeout=60)
        master_replicated = n_put / (time.time() - r["start"])  # upper bound of the time taken
        master.send("bench_watch", key=f"c{n_put - 1}", timeout=120)
        time.sleep(0.2)
        r = clone.call("bench_put", n=n_put, prefix="c")
        clone_visible = n_put / (master.answer() - r["start"])
        clone_queue_rate = n_put / r["elapsed"]
        assert clone.call("await_idle", timeout=60) and master.call("await_idle", timeout=60)
        unique_rate = n_unique / clone.call("bench_put_unique", n=n_unique)
        unique_conc_rate = n_unique / clone.call("bench_put_unique_concurrent", n=n_unique, workers=16)
        g = clone.call("bench_get", key="m7", n=n_get)
        get_rate, get_nowait_rate = n_get / g["get"], n_get / g["get_nowait"]
        clone.stop()
        master.stop()

        # replication latency to 3 clones (a fresh store: a 200k-key snapshot is not what is measured)
        ns = "l" + uuid.uuid4().hex[:8]
        master = store_node(url, ns, "master").ready()
        clones = [store_node(url, ns, "clone").ready() for _ in range(3)]
        for c in clones:
            assert c.call("await_synced", timeout=30)
            c.send("bench_latency", n=n_lat, timeout=60)
            assert c.answer() == "watching"
        assert master.call("await_idle", timeout=30)  # every clone has ACKed its snapshot
        sent = master.call("bench_paced_put", n=n_lat, interval=interval)
        lat: list[float] = []
        for c in clones:
            seen = c.answer()
            mine = [(seen[k] - sent[k]) * 1000 for k in sent]
            if args.verbose:
                print("latency ms, first 5:", [round(x, 1) for x in mine[:5]], "last 5:",
                      [round(x, 1) for x in mine[-5:]], file=sys.stderr)
            lat.extend(mine)
            c.stop()
        master.stop()

    p50, p99 = nearest_rank(lat, 0.5), nearest_rank(lat, 0.99)
    rp50, rp99 = nearest_rank(raw_lat, 0.5), nearest_rank(raw_lat, 0.99)
    rows = [
        {"case": "master put/s (applied, queued to 1 clone)", "value": master_rate, "target": 100_000,
         "baseline": raw_rate, "baseline_case": "raw publish->receive msg/s"},
        {"case": "master put/s until 1 clone idle", "value": master_replicated, "target": None,
         "baseline": raw_rate, "baseline_case": "raw publish->receive msg/s"},
        {"case": "clone put visible at master/s", "value": clone_visible, "target": 50_000,
         "baseline": raw_rate, "baseline_case": "raw publish->receive msg/s"},
        {"case": "clone put queued/s (caller side)", "value": clone_queue_rate, "target": None,
         "baseline": raw_rate, "baseline_case": "raw publish->receive msg/s"},
        # One caller waits for each answer: bound by one endpoint round trip (the raw ping-pong),
        # so the 2,000/s target is read as throughput from concurrent callers of one clone (next row).
        {"case": "clone put_unique/s, 1 caller (sequential)", "value": unique_rate, "target": None,
         "baseline": raw_rtt, "baseline_case": "raw unicast ping-pong/s"},
        {"case": "clone put_unique/s, 16 callers in parallel", "value": unique_conc_rate, "target": 2_000,
         "baseline": raw_rtt, "baseline_case": "raw unicast ping-pong/s"},
        {"case": "clone await get/s", "value": get_rate, "target": 200_000,
         "baseline": dict_rate, "baseline_case": "dict.get/s"},
        {"case": "clone get_nowait/s", "value": get_nowait_rate, "target": 200_000,
         "baseline": dict_rate, "baseline_case": "dict.get/s"},
        {"case": "replication latency p50 ms (3 clones)", "value": p50, "target": 2.0,
         "baseline": rp50, "baseline_case": "raw publish->3 subscribers p50 ms"},
        {"case": "replication latency p99 ms (3 clones)", "value": p99, "target": None,
         "baseline": rp99, "baseline_case": "raw publish->3 subscribers p99 ms"},
    ]
    print(f"{'case':44} {'value':>12} {'target':>10} {'baseline':>12} {'ratio':>7}  baseline case")
    for row in rows:
        target = "" if row["target"] is None else f"{row['target']:,.0f}" if row["target"] > 10 else f"<={row['target']}"
        row["ratio"] = row["value"] / row["baseline"] if row["baseline"] else None
        def fmt(v: float) -> str:
            return f"{v:,.0f}" if v > 100 else f"{v:.2f}"

        print(f"{row['case']:44} {fmt(row['value']):>12} {target:>10} {fmt(row['baseline']):>12} "
              f"{row['ratio']:>7.2f}  {row['baseline_case']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cases": rows, "counts": {"put": n_put, "put_unique": n_unique, "get": n_get,
                                                         "latency": n_lat, "latency_interval_s": interval},
                               "cores": os.cpu_count(), "time": time.time()}, indent=2))
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["raw"])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "store.json"))
    parser.add_argument("rest", nargs="*")
    args = parser.parse_args()
    if args.role == "raw":
        import anyio

        args.url, args.namespace, args.id = args.rest
        anyio.run(_raw_role, args)
    else:
        orchestrate(args)


if __name__ == "__main__":
    main()
