"""Elected-store write throughput, latency and snapshot joins, against the master/clone store in the same run.

Every node is its own OS process: store nodes of the master/clone baseline are tests/store_node.py,
elected-store nodes are this script with ``--role node`` (an endpoint that attaches one elected store
and answers JSON lines on stdin, like bench/store.py's nodes). The orchestrator (this script without
``--role``) starts one embedded mosquitto (``set_tcp_nodelay true``; ``--max-packet``, default MQTT's
largest packet size: the snapshots of today's stores travel as one message) and measures, in one session:

- the baseline: master/clone store, puts of distinct keys at the master until the master and its one
  clone are idle (bench/store.py's "master put/s until 1 clone idle"), before and after the elected
  rows; the ratios use the mean of the two;
- elected store, memory backend, 3 replicas (the writer's own replica, which is master, and two other
  node processes), durability "one", "all" and "master", with 1, 16 and 256 writes in flight
  (concurrent tasks of the writer, each awaiting ``put`` of a distinct key, int values as the
  baseline's): acknowledged writes/s and latency p50/p99 over a fixed window after a warm-up; and the
  same for durability "one" with the writer's replica not a candidate (the master elsewhere);
  whether the master moved during a row is reported (``moved``), as it would spoil the figure;
- work queue, 4 consumers: publish->accept msg/s (bench/work_queue.py's 4-consumer run, reused);
- snapshot joins: a store of 10k and 1M keys (10M with ``--huge``), 100-byte values, SQLite
  backend; the master's file is written beforehand with the store's own state file
  (``StateFile.write``), so the master starts holding it and the log cannot serve a joiner by tail;
  then a new replica (not a candidate) joins, with the memory and with the SQLite backend. Join time:
  from ``attach_store`` to the joiner holding every key and not stale; peak RSS (VmHWM, reset
  before the join) of the master and the joiner, beside their RSS before the join (the baseline).
  A join that fails is reported as failed, the run goes on.

Every node process, the baseline's too, calls ``tune_garbage_collector()`` once started, as
``broker-mqtt node`` does.

The Zeek Broker 1.4 column is the anchor from ../shared/FACTS.md (two processes on loopback, same kind
of machine): store master put 84k/s. It prints the tables and writes bench/results/elected_store.json.
Run: ``python bench/elected_store.py [--quick] [--huge]``. On a shared 2-core machine the absolute
figures swing by up to 2x between runs; the ratios to the baseline of the same run are comparable.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import itertools
import json
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from quantile import nearest_rank  # noqa: E402 - bench/ is this script's own directory
from store import Node, store_node  # noqa: E402 - bench/store.py's node handles and master/clone nodes

ZEEK_MASTER_PUT = 84_000  # Zeek Broker 1.4, store master put/s (../shared/FACTS.md)
STORE = "e"
VALUE_SIZE = 100
ISSUE_TARGETS = {  # issue 20's targets, shown beside the rows they apply to
    ("one", True, 256): ">=30,000/s and >=0.3x",
    ("one", True, 1): "p50 <=1 ms",
}


# -- the node role (its own process; JSON lines on stdin/stdout) --------------------------------------
def _memory() -> dict[str, float]:
    """This process's resident set now and at its peak (VmRSS, VmHWM), MB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(rest.split()[0]) / 1024
    return {"rss_mb": fields.get("VmRSS", 0.0), "peak_mb": fields.get("VmHWM", 0.0)}


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # a /proc file: no disk, never blocks
        f.write("5")


async def _put_loop(put: Any, counter: Any, prefix: str, deadline: float, lat: list[float]) -> None:
    while time.perf_counter() < deadline:
        i = next(counter)
        t = time.perf_counter()
        await put(f"{prefix}{i}", i)
        lat.append(time.perf_counter() - t)


async def _node_op(ep: Any, mine: dict[str, Any], op: str, kw: dict[str, Any]) -> Any:
    import anyio

    from broker_mqtt.store import attach_store

    store = mine.get("store")
    if op == "attach":
        mine["t_attach"] = time.perf_counter()
        mine["store"] = await attach_store(
            ep, kw.get("store", STORE), backend=kw.get("backend", "memory"), path=kw.get("path"),
            resident=kw.get("resident", "memory"),
            election={"cycle": kw["cycle"], "gap": kw["gap"]}, durability=kw.get("durability", "one"),
            candidate=kw.get("candidate", True), write_timeout=120)
        return None
    if op == "memory":  # and the longest event-loop stall since the last reset_peak
        return {**_memory(), "stall_s": mine.get("stall", 0.0)}
    if op == "reset_peak":  # VmHWM := VmRSS (Linux >= 4.0); the longest stall := 0
        gc.collect()
        _reset_peak()
        mine["stall"] = 0.0
        watch = mine.pop("watch_stalls", None)  # from now on: its wake-ups every 2 ms would cost the write rows CPU
        if watch is not None:
            mine["tg"].start_soon(watch)
        return _memory()
    assert store is not None, "attach first"
    if op == "await_master":
        ok = await store.await_master(kw.get("timeout", 60))
        return {"ok": ok, "is_master": store.is_master, "master": store.master,
                "epoch": list(store.epoch) if store.epoch else None}
    if op == "await_len":  # until every key is here and the copy is current: seconds since attach, and the
        # longest the event loop did not come back meanwhile (a 2 ms sleep that took longer: a stall)
        stall = 0.0
        with anyio.move_on_after(kw.get("timeout", 600)):
            while len(store) < kw["n"] or store.stale:
                t = time.perf_counter()
                await anyio.sleep(0.002)
                stall = max(stall, time.perf_counter() - t - 0.002)
            return {"join_s": time.perf_counter() - mine["t_attach"], "stall_s": stall}
        raise TimeoutError(f"not joined after {kw.get('timeout', 600)} s: holds {len(store)} of {kw['n']} keys, "
                           f"stale {store.stale}")
    if op == "stats":
        return dataclasses.asdict(store.statistics())
    if op == "await_idle":
        return await store.await_idle(kw.get("timeout", 60))
    if op == "bench":  # `inflight` tasks putting distinct keys: a warm-up, then a measured window
        counter, put, prefix = itertools.count(), store.put, kw["prefix"]
        warm: list[float] = []
        for seconds, lat in ((kw["warmup"], warm), (kw["seconds"], [])):
            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for _ in range(kw["inflight"]):
                    tg.start_soon(_put_loop, put, counter, prefix, t0 + seconds, lat)
            elapsed = time.perf_counter() - t0
        ms = [x * 1000 for x in lat]
        return {"n": len(lat), "elapsed": elapsed, "rate": len(lat) / elapsed, "written": len(warm) + len(lat),
                "p50_ms": nearest_rank(ms, 0.5), "p99_ms": nearest_rank(ms, 0.99)}
    if op == "len":  # once this copy is current
        await store.await_idle(kw.get("timeout", 60))
        return len(store)
    raise ValueError(f"unknown op {op!r}")


async def _node_role(args: argparse.Namespace) -> None:
    import anyio

    from broker_mqtt import Endpoint, tune_garbage_collector

    mine: dict[str, Any] = {}

    async def watch_stalls() -> None:  # the longest the event loop did not come back (a 2 ms sleep that took longer)
        while True:
            t = time.perf_counter()
            await anyio.sleep(0.002)
            mine["stall"] = max(mine.get("stall", 0.0), time.perf_counter() - t - 0.002)

    async with Endpoint(args.url, namespace=args.namespace) as ep, anyio.create_task_group() as tg:
        mine["tg"], mine["watch_stalls"] = tg, watch_stalls  # started by the first reset_peak (a join row)
        tune_garbage_collector()  # every role alike, as `broker-mqtt node` does (docs/queues.md § 5)
        print("READY", ep.id.hex, flush=True)
        stdin = anyio.wrap_file(sys.stdin)
        while line := await stdin.readline():
            req = json.loads(line)
            try:
                answer = {"ok": await _node_op(ep, mine, req["op"], req.get("kwargs", {}))}
            except Exception as exc:  # noqa: BLE001 - every error goes back to the orchestrator
                answer = {"error": type(exc).__name__, "message": str(exc)}
            print(json.dumps(answer), flush=True)
        if mine.get("store") is not None:
            await mine["store"].close()
        tg.cancel_scope.cancel()


# -- the orchestrator -------------------------------------------------------------------------------
def node(url: str, ns: str) -> Node:
    return Node([sys.executable, __file__, "--role", "node", url, ns]).ready()


def master_clone_rate(url: str, n: int) -> float:
    """Puts at the master until it and its clone are idle, per second (bench/store.py's row)."""
    ns = "mc" + uuid.uuid4().hex[:8]
    master = store_node(url, ns, "master").ready()
    clone = store_node(url, ns, "clone", "--write-buffer", str(2 * n)).ready()
    try:
        assert clone.call("await_synced", timeout=30)
        r = master.call("bench_put", n=n, prefix="m")
        assert clone.call("await_idle", timeout=120) and master.call("await_idle", timeout=120)
        return n / (time.time() - r["start"])
    finally:
        clone.stop()
        master.stop()


def elected_rows(url: str, durability: str, master_here: bool, inflights: list[int], args: argparse.Namespace,
                 seconds: float, warmup: float) -> list[dict[str, Any]]:
    """Three replicas (the writer and two others); the writer's replica master or not a candidate."""
    ns = "el" + uuid.uuid4().hex[:8]
    common = {"durability": durability, "cycle": args.cycle, "gap": args.gap}
    writer, others = node(url, ns), [node(url, ns), node(url, ns)]
    try:
        first, then = ([writer], others) if master_here else (others, [writer])
        for group in (first, then):
            for n in group:
                n.call("attach", **common, candidate=n is not writer or master_here)
            for n in group:
                assert n.call("await_master", timeout=60)["ok"], "no master"
        info = writer.call("await_master")
        assert info["is_master"] == master_here, info
        assert writer.call("await_idle", timeout=60)
        rows = []
        for inflight in inflights:
            before = writer.call("await_master")["epoch"]
            r = writer.call("bench", inflight=inflight, seconds=seconds, warmup=warmup, prefix=f"w{inflight}-")
            after = writer.call("await_master")["epoch"]
            rows.append({"durability": durability, "master_here": master_here, "inflight": inflight, **r,
                         "moved": before != after})
            writer.call("await_idle", timeout=60)
        # every acknowledged put is in every replica (a check of the bench, not a figure)
        written = sum(r["written"] for r in rows)
        held = [n.call("len") for n in [writer, *others]]
        for r in rows:
            r["keys_check"] = {"written": written, "replicas": held}
        return rows
    finally:
        for n in [writer, *others]:
            n.stop()


def fill_state_file(path: Path, n: int, random_keys: bool = False, resident: str = "memory") -> float:
    """Write an n-key state (keys ``k<i>``, or with ``random_keys`` a random 32-character hex string
    before it, as UUID keys come; 100-byte str values, 1,000 keys a record) with the store's own state
    file, in transactions of 100,000 rows; ``resident="disk"``: in the form a disk-resident state
    keeps (``versions`` with its columns, the header saying so), as ``open_disk_state`` would have
    written it. Return the seconds taken."""
    from broker_mqtt.store.history import Version, lineage_to_wire
    from broker_mqtt.store.packing import pack
    from broker_mqtt.store.versioned_disk import open_disk_state
    from broker_mqtt.store.versioned_sqlite import StateFile

    t0 = time.perf_counter()
    origin, writer = uuid.uuid4().hex, "bench-fill"
    epoch = (1, f"{origin}.00000000")
    hlc = int(time.time() * 1_000_000)
    per_record, last_seq = 1000, (n + 999) // 1000
    header = {"seq": last_seq, "lineage": lineage_to_wire([(epoch, 1)]), "hlc": hlc,
              "applied": [[writer, last_seq, last_seq, []]]}

    def rows(start: int) -> list[tuple[bytes, bytes]]:
        return [(pack(f"{uuid.uuid4().hex}-k{i}" if random_keys else f"k{i}"),
                 pack(Version(f"{i:0{VALUE_SIZE}d}", hlc, origin, i // per_record + 1).to_wire()))
                for i in range(start, min(n, start + 100_000))]

    if resident == "disk":
        open_disk_state(path).close()  # its schema and indexes
        db = sqlite3.connect(path, isolation_level=None)
        try:
            for start in range(0, n, 100_000):
                db.execute("BEGIN")
                db.executemany("INSERT INTO versions (k, v, seq) VALUES (?, ?, ?)",
                               ((k, v, i // per_record + 1) for i, (k, v) in enumerate(rows(start), start)))
                db.execute("COMMIT")
            db.execute("INSERT OR REPLACE INTO meta (name, v) VALUES ('state', ?)",
                       (pack({**header, "disk": 1, "live": n, "dead": 0}),))
        finally:
            db.close()
        return time.perf_counter() - t0
    file = StateFile.open(path, lambda rows, meta: None)
    try:
        for start in range(0, n, 100_000):
            file.write(header, rows(start), [], replace_all=False)
    finally:
        file.close()
    return time.perf_counter() - t0


def join_rows(url: str, n: int, backends: list[str], tmp: Path, args: argparse.Namespace,
              master_resident: str = "memory") -> list[dict[str, Any]]:
    """A new replica joins an n-key store, once per joiner backend: ``memory``, ``sqlite`` (its entries
    in memory, the file their copy) or ``disk`` (an SQLite file, the entries kept there only). The
    master's SQLite file is written first, its entries in memory or (``master_resident="disk"``) kept
    in the file."""
    ns = "j" + uuid.uuid4().hex[:8]
    path = tmp / f"master-{n}.db"
    fill_s = fill_state_file(path, n, getattr(args, "random_keys", False), master_resident)
    common = {"cycle": args.cycle, "gap": args.gap}
    master = node(url, ns)
    rows: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        master.call("attach", **common, backend="sqlite", path=str(path), resident=master_resident)
        assert master.call("await_master", timeout=600)["is_master"]
        load_s = time.perf_counter() - t0
        for backend in backends:
            row: dict[str, Any] = {"keys": n, "joiner_backend": backend, "master_resident": master_resident,
                                   "fill_s": fill_s, "master_load_s": load_s}
            joiner = node(url, ns)
            try:
                row["master_before_mb"] = master.call("reset_peak")["rss_mb"]
                row["joiner_before_mb"] = joiner.call("memory")["rss_mb"]
                jpath = str(tmp / f"joiner-{n}-{uuid.uuid4().hex[:6]}.db") if backend != "memory" else None
                joiner.call("attach", **common, backend="memory" if backend == "memory" else "sqlite", path=jpath,
                            resident="disk" if backend == "disk" else "memory", candidate=False)
                joined = joiner.call("await_len", n=n, timeout=args.join_timeout)
                row["join_s"], row["joiner_stall_s"] = joined["join_s"], joined["stall_s"]
                row["keys_per_s"] = n / row["join_s"]
                row["joiner_peak_mb"] = joiner.call("memory")["peak_mb"]
                after = master.call("memory")
                row["master_peak_mb"], row["master_stall_s"] = after["peak_mb"], after["stall_s"]
                stats = joiner.call("stats")
                row["via"] = "snapshot" if stats["snapshots_installed"] else "tail"
                row["stats"] = stats
            except Exception as exc:  # noqa: BLE001 - today's one-message snapshot may not fit: report it
                row["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                joiner.stop()
                for p in tmp.glob("joiner-*"):
                    p.unlink()
            rows.append(row)
    finally:
        master.stop()
        for p in tmp.glob("master-*"):
            p.unlink()
    return rows


def queue_row(url: str, n: int) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests" / "queue"))
    from work_queue import PREFETCH, throughput  # bench/work_queue.py's machinery

    return throughput(url, n, 4, PREFETCH)


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"


def print_tables(result: dict[str, Any]) -> None:
    base = result["master_clone"]["mean"]
    print(f"\nbaseline: master/clone store, puts until the clone is idle: {_fmt(base)}/s "
          f"(runs: {', '.join(_fmt(x) for x in result['master_clone']['runs'])}); "
          f"Zeek Broker 1.4 store master put {_fmt(ZEEK_MASTER_PUT)}/s")
    print("(every node process: tune_garbage_collector(), as broker-mqtt node does)")
    print(f"{'case':58} {'acked/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'x m/c':>6} {'x Zeek':>6}  target")
    for r in result["elected"]:
        where = "writer is master" if r["master_here"] else "master elsewhere"
        case = f"elected, durability {r['durability']}, {r['inflight']} in flight, {where}"
        target = ISSUE_TARGETS.get((r["durability"], r["master_here"], r["inflight"]), "")
        moved = "  (master moved)" if r["moved"] else ""
        check = r["keys_check"]
        if any(h != check["written"] for h in check["replicas"]):
            moved += f"  (replicas hold {check['replicas']} keys, {check['written']} acked)"
        print(f"{case:58} {_fmt(r['rate']):>9} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} {r['ratio']:>6.3f} "
              f"{r['rate'] / ZEEK_MASTER_PUT:>6.3f}  {target}{moved}")
    if q := result.get("queue"):
        print(f"{'work queue, 4 consumers, publish->accept msg/s':58} {_fmt(q['accepted_per_s']):>9} {'':>7} {'':>7} "
              f"{q['accepted_per_s'] / base:>6.3f} {q['accepted_per_s'] / ZEEK_MASTER_PUT:>6.3f}  >=30,000/s")
        if cpu := q.get("cpu_us_per_msg"):
            print("  (CPU per message: " + ", ".join(f"{role} {us:.1f} us" for role, us in cpu.items()) + ")")
    print(f"\n{'snapshot join (SQLite master, 100-byte values)':48} {'join s':>7} {'keys/s':>9} "
          f"{'master MB':>14} {'joiner MB':>14} {'stall s':>13}  via / target")
    for r in result["joins"]:
        case = f"{r['keys']:,} keys, joiner {r['joiner_backend']}"
        if r.get("master_resident") == "disk":
            case += ", master disk"
        if "error" in r:
            print(f"{case:48} FAILED: {r['error'][:100]}")
            continue
        target = "<300 MB each, >=100k keys/s" if r["keys"] >= 10_000_000 else ""
        print(f"{case:48} {r['join_s']:>7.2f} {_fmt(r['keys_per_s']):>9} "
              f"{_fmt(r['master_before_mb']):>5} -> {_fmt(r['master_peak_mb']):>5} "
              f"{_fmt(r['joiner_before_mb']):>5} -> {_fmt(r['joiner_peak_mb']):>5} "
              f"{r['master_stall_s']:>6.2f} {r['joiner_stall_s']:>6.2f}  {r['via']} {target}")
    print("(MB: resident before the join -> peak during it; stall s: the master's and the joiner's longest "
          "event-loop stall during it)")


def orchestrate(args: argparse.Namespace) -> None:
    from broker_mqtt import EmbeddedBroker

    quick = args.quick
    n_mc = 20_000 if quick else 100_000
    seconds, warmup = (0.5, 0.2) if quick else (args.seconds, 0.5)
    inflights = [1, 16, 256]
    durabilities = ["one", "all", "master"]
    sizes = [2_000] if quick else [10_000, 1_000_000] + ([10_000_000] if args.huge else [])
    if args.join_keys is not None:
        sizes = [int(n) for n in args.join_keys.split(",") if n]
    result: dict[str, Any] = {"quick": quick, "cores": os.cpu_count(), "time": time.time(),
                              "config": {"seconds": seconds, "warmup": warmup, "cycle": args.cycle, "gap": args.gap,
                                         "master_clone_puts": n_mc, "value_size": VALUE_SIZE},
                              "anchor": {"zeek_broker_1_4_store_master_put_per_s": ZEEK_MASTER_PUT}}
    with EmbeddedBroker(max_packet_size=args.max_packet) as broker, tempfile.TemporaryDirectory() as tmp:
        url = broker.url
        runs = [master_clone_rate(url, n_mc)]
        elected: list[dict[str, Any]] = []
        for durability in durabilities:
            elected += elected_rows(url, durability, True, inflights, args, seconds, warmup)
        elected += elected_rows(url, "one", False, inflights, args, seconds, warmup)
        if not quick:
            runs.append(master_clone_rate(url, n_mc))
        base = sum(runs) / len(runs)
        for r in elected:
            r["ratio"] = r["rate"] / base
        result["master_clone"] = {"runs": runs, "mean": base}
        result["elected"] = elected
        if not args.no_queue:
            result["queue"] = queue_row(url, 3_000 if quick else args.queue_n)
        result["joins"] = []
        for n in sizes:
            if n < 10_000_000:  # (a 10M-key store held in memory takes 3 GB a process)
                result["joins"] += join_rows(url, n, ["memory", "sqlite"], Path(tmp), args)
            result["joins"] += join_rows(url, n, ["disk"], Path(tmp), args, master_resident="disk")
    print_tables(result)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["node"])
    parser.add_argument("--quick", action="store_true", help="a smoke run: short windows, a 2,000-key join")
    parser.add_argument("--huge", action="store_true", help="also join a 10,000,000-key store")
    parser.add_argument("--seconds", type=float, default=3.0, help="measured window per elected row")
    parser.add_argument("--cycle", type=float, default=2.0, help="the election's cycle (s)")
    parser.add_argument("--gap", type=float, default=0.5, help="the election's gap (s)")
    parser.add_argument("--queue-n", type=int, default=50_000, help="messages of the work-queue row")
    parser.add_argument("--no-queue", action="store_true", help="skip the work-queue row")
    parser.add_argument("--join-timeout", type=float, default=1800.0, help="seconds a join may take")
    parser.add_argument("--join-keys", help="store sizes of the join rows, comma-separated (default 10000,1000000; '' for none)")
    parser.add_argument("--random-keys", action="store_true",
                        help="the joined stores' keys begin with a random hex string (UUID-like) instead of k<i>")
    parser.add_argument("--max-packet", type=int, default=268_435_455,
                        help="the broker's maximum packet size (default: MQTT's largest)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "elected_store.json"))
    parser.add_argument("rest", nargs="*")
    args = parser.parse_args()
    if args.role == "node":
        import anyio

        args.url, args.namespace = args.rest
        anyio.run(_node_role, args)
    else:
        orchestrate(args)


if __name__ == "__main__":
    main()
