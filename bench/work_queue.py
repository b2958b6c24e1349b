"""Work-queue throughput and redelivery time on the embedded mosquitto, against an elected-store baseline.

Every node is its own OS process (tests/queue_node.py); one embedded mosquitto, memory backend,
durability "one". One run measures:

- publish->accept msg/s with 1 and with 4 consumers: one publisher (the queue's master, the only
  candidate) publishes N messages (100,000; ``-n``; 5,000 with ``--quick``) from 256 concurrent tasks (group-committed); a standby replica
  confirms writes (durability "one"); consumers without a replica (``replica=False``, prefetch 100;
  a second 4-consumer run with prefetch 1000, which makes every acquire and settle write carry more
  messages; a third with the consumers' processes at nice 5, the replicas first, as an operator
  would run them on a host they share) accept them with ``accept_nowait()`` (no task, no wait per message; ``drain()`` every 0.05 s
  counts what the master confirmed). From the publisher's start to the last confirmed accept.
- redelivery after a consumer dies: consumer A holds 50 messages, consumer B waits; A is killed
  with SIGKILL; the time until B receives the first and the last of them again (master sees A's
  endpoint gone through its last will).
- publishing alone (the publisher and the standby, no consumer), and the CPU each process spends
  per message in the 4-consumer run and in this one (from /proc; the publisher's start-up left out):
  what acquiring and settling add to a message, process by process.
- the baseline, in the same run: elected-store put/s, one writer (not master) with 256 concurrent
  tasks into a store whose master is another process (every put is one write, like every queue
  operation). Ratios are queue figure / baseline.

Every node process calls ``tune_garbage_collector()`` at start-up, as ``broker-mqtt node`` does
(``--python-gc``: they keep Python's collector settings, for comparison).

Prints a table and writes bench/results/queue.json. Run: ``python bench/work_queue.py [--quick]``.
The figures swing with the machine (the baseline by up to 2x between runs on a shared 2-core
machine); the ratios to the baseline of the same run are the comparable part.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "queue"))

from line_procs import PYTHON_GC  # noqa: E402 - the node helpers live with the tests
from process_cpu import cpu_seconds  # noqa: E402 - bench/ is this script's own directory
from queue_procs import QueueProc, wait_for  # noqa: E402 - the node helpers live with the tests

from broker_mqtt import EmbeddedBroker  # noqa: E402

PREFETCH = 100  # each consumer's window (``consume(prefetch=...)``) in the main runs
LARGE_PREFETCH = 1000  # and in a second 4-consumer run: fuller acquires and settle writes
#: a third 4-consumer run starts its consumers at this niceness: on a host they share with the
#: replicas, the replicas' round trip paces the publishes, and consumers that keep up take less of
#: the CPU from it (an operator's ``nice -n 5``; docs/queues.md § 5)
CONSUMER_NICE = 5


def _cpu_s(proc: QueueProc) -> float | None:
    """The CPU seconds (user + system) the node's process has used so far; None without /proc."""
    try:
        return cpu_seconds(proc.proc.pid)
    except OSError:
        return None


def _cpu_per_message(n: int, pub: QueueProc, others: dict[str, list[QueueProc]],
                     before: dict[QueueProc, float | None]) -> dict[str, float] | None:
    """CPU µs per message of each role over a run of ``n`` messages: the publisher (the queue's master)
    from its ``PUBLISH_START`` (its start-up left out), the others from ``before`` (read while they
    idled, before the publisher started), each up to now; None where /proc is not there."""
    spent: dict[str, float] = {}
    end = _cpu_s(pub)
    if end is None or pub.publish_start_cpu is None:
        return None
    spent["publisher (master)"] = end - pub.publish_start_cpu
    for role, procs in others.items():
        total = 0.0
        for p in procs:
            now, then = _cpu_s(p), before.get(p)
            if now is None or then is None:
                return None
            total += now - then
        spent[role] = total
    per = {role: s / n * 1e6 for role, s in spent.items()}
    per["total (without mosquitto)"] = sum(per.values())
    return per


def _start_of(proc: QueueProc) -> float:
    """The time of the last progress line before the node's first message (0.1 s resolution)."""
    before = [t for published, _, t in proc.progress if published == 0]
    return before[-1] if before else proc.progress[0][2]


def _accepted(nodes: list[QueueProc]) -> int:
    return sum(n.progress[-1][1] for n in nodes if n.progress)


def _published(nodes: list[QueueProc]) -> int:
    return sum(n.progress[-1][0] for n in nodes if n.progress)


def throughput(url: str, n: int, consumers: int, prefetch: int, consume: str = "accept-nowait",
               consumer_nice: int = 0) -> dict[str, Any]:
    """``consumer_nice``: the consumers' processes run at that niceness (``nice -n``), the replicas at
    the default: the replicas first on a shared host."""
    ns = "bq" + uuid.uuid4().hex[:8]
    procs: list[QueueProc] = []
    try:
        cons = [QueueProc(url, ns, "jobs", "--no-replica", "--consume", consume, "--prefetch", str(prefetch),
                          "--quiet")
                for _ in range(consumers)]
        for c in cons:
            if consumer_nice:
                os.setpriority(os.PRIO_PROCESS, c.proc.pid, consumer_nice)
        standby = QueueProc(url, ns, "jobs", "--no-candidate", "--quiet")  # a second replica: durability "one"
        procs += [*cons, standby]
        for c in [*cons, standby]:
            c.wait_ready()
        before = {p: _cpu_s(p) for p in [*cons, standby]}
        pub = QueueProc(url, ns, "jobs", "--publish", str(n), "--concurrency", "256", "--quiet")
        procs.append(pub)
        if not wait_for(lambda: _accepted(cons) >= n, 300):
            raise RuntimeError(f"accepted {_accepted(cons)} of {n}")
        cpu = _cpu_per_message(n, pub, {"standby": [standby], f"{consumers} consumers": cons}, before)
        done = min(t for c in cons for _, a, t in c.progress if sum(
            max((x[1] for x in other.progress if x[2] <= t), default=0) for other in cons) >= n)
        start = _start_of(pub)
        published = pub.publish_done or done
        return {"n": n, "consumers": consumers, "prefetch": prefetch, "seconds": done - start, "accepted_per_s": n / (done - start),
                "published_per_s": n / (published - start),
                "per_consumer": [c.progress[-1][1] for c in cons], "cpu_us_per_msg": cpu}
    finally:
        for p in procs:
            p.kill()


def publish_only(url: str, n: int) -> dict[str, Any]:
    """The publishing part alone: throughput()'s publisher and standby, no consumer (what the
    acquires and settlements add to a message is the 4-consumer run's figures less these)."""
    ns = "bq" + uuid.uuid4().hex[:8]
    procs: list[QueueProc] = []
    try:
        standby = QueueProc(url, ns, "jobs", "--no-candidate", "--quiet")
        procs.append(standby)
        standby.wait_ready()
        before = {standby: _cpu_s(standby)}
        pub = QueueProc(url, ns, "jobs", "--publish", str(n), "--concurrency", "256", "--quiet")
        procs.append(pub)
        if not wait_for(lambda: pub.publish_done is not None, 300):
            raise RuntimeError(f"published {_published([pub])} of {n}")
        cpu = _cpu_per_message(n, pub, {"standby": [standby]}, before)
        assert pub.publish_done is not None
        return {"n": n, "published_per_s": n / (pub.publish_done - _start_of(pub)), "cpu_us_per_msg": cpu}
    finally:
        for p in procs:
            p.kill()


def redelivery(url: str, held: int) -> dict[str, Any]:
    ns = "bq" + uuid.uuid4().hex[:8]
    procs: list[QueueProc] = []
    try:
        pub = QueueProc(url, ns, "jobs", "--publish", str(held), "--concurrency", "16")
        a = QueueProc(url, ns, "jobs", "--no-candidate", "--consume", "hold", "--prefetch", str(2 * held))
        procs += [pub, a]
        if not wait_for(lambda: len(a.delivered) >= held, 60):
            raise RuntimeError(f"consumer A holds {len(a.delivered)} of {held}")
        b = QueueProc(url, ns, "jobs", "--no-candidate", "--consume", "accept", "--prefetch", str(held))
        procs.append(b)
        b.wait_ready()
        if not wait_for(lambda: b.current_master() is not None, 30):
            raise RuntimeError("consumer B found no master")
        time.sleep(0.5)
        killed = time.monotonic()
        a.kill()
        if not wait_for(lambda: len(b.delivered) >= held, 60):
            raise RuntimeError(f"redelivered {len(b.delivered)} of {held}")
        times = sorted(t for _, count, _, t in b.delivered if count == 2)
        return {"held": held, "first_s": times[0] - killed, "all_s": times[-1] - killed,
                "counts": sorted({count for _, count, _, _ in b.delivered})}
    finally:
        for p in procs:
            p.kill()


def baseline(url: str, n: int) -> dict[str, Any]:
    ns = "bq" + uuid.uuid4().hex[:8]
    procs: list[QueueProc] = []
    try:
        master = QueueProc(url, ns, "jobs", "--quiet", "--store-puts", "0")
        procs.append(master)
        master.wait_ready()
        writer = QueueProc(url, ns, "jobs", "--no-candidate", "--store-puts", str(n), "--concurrency", "256",
                           "--quiet")
        procs.append(writer)
        if not wait_for(lambda: writer.publish_done is not None, 300):
            raise RuntimeError(f"baseline: {_published([writer])} of {n} puts")
        assert writer.publish_done is not None
        return {"n": n, "put_per_s": n / (writer.publish_done - _start_of(writer))}
    finally:
        for p in procs:
            p.kill()


def print_cpu(runs: dict[str, dict[str, float] | None]) -> None:
    """CPU µs per message, a row per run, a column per process role."""
    roles = list(dict.fromkeys(role for per in runs.values() if per for role in per))
    if not roles:
        print("\n(CPU per message: no /proc here)")
        return
    print(f"\n{'CPU us per message':36}" + "".join(f" {role:>20}" for role in roles))
    for run, per in runs.items():
        print(f"{run:36}" + "".join(f" {'' if not per or role not in per else f'{per[role]:.1f}':>20}" for role in roles))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "queue.json"))
    parser.add_argument("--prefetch", type=int, default=PREFETCH, help="each consumer's window")
    parser.add_argument("--large-prefetch", type=int, default=LARGE_PREFETCH,
                        help="the window of the second 4-consumer run")
    parser.add_argument("-n", type=int, default=None, help="messages per throughput run")
    parser.add_argument("--python-gc", action="store_true",
                        help="node processes keep Python's collector settings (default: tune_garbage_collector(), "
                             "as broker-mqtt node does)")
    args = parser.parse_args()
    collector = "Python's defaults" if args.python_gc else "tune_garbage_collector()"
    if args.python_gc:
        os.environ[PYTHON_GC] = "1"  # (inherited by the node processes)
    n = args.n or (5_000 if args.quick else 100_000)
    trials = 2 if args.quick else 3
    with EmbeddedBroker() as broker:
        base = baseline(broker.url, n)
        one = throughput(broker.url, n, 1, args.prefetch)
        four = throughput(broker.url, n, 4, args.prefetch)
        four_large = throughput(broker.url, n, 4, args.large_prefetch)
        four_nice = throughput(broker.url, n, 4, args.prefetch, consumer_nice=CONSUMER_NICE)
        alone = publish_only(broker.url, n)
        redo = [redelivery(broker.url, 50) for _ in range(trials)]
    put = base["put_per_s"]
    pf, large = f"prefetch {args.prefetch}", f"prefetch {args.large_prefetch}"
    rows = [
        {"case": f"publish->accept msg/s, 1 consumer, {pf}", "value": one["accepted_per_s"], "target": None,
         "baseline": put, "baseline_case": "elected-store put/s (1 writer)"},
        {"case": f"publish->accept msg/s, 4 consumers, {pf}", "value": four["accepted_per_s"], "target": 30_000,
         "baseline": put, "baseline_case": "elected-store put/s (1 writer)"},
        {"case": f"publish->accept msg/s, 4 consumers, {large}", "value": four_large["accepted_per_s"],
         "target": 30_000, "baseline": put, "baseline_case": "elected-store put/s (1 writer)"},
        {"case": f"  the same, {pf}, the consumers at nice {CONSUMER_NICE}", "value": four_nice["accepted_per_s"],
         "target": None, "baseline": put, "baseline_case": "elected-store put/s (1 writer)"},
        {"case": f"publish msg/s (1 publisher, 4 consumers, {pf})", "value": four["published_per_s"],
         "target": None, "baseline": put, "baseline_case": "elected-store put/s (1 writer)"},
        {"case": "publish msg/s, no consumer (publisher and standby)", "value": alone["published_per_s"],
         "target": None, "baseline": put, "baseline_case": "elected-store put/s (1 writer)"},
        {"case": "redelivery after kill -9, first msg s", "value": statistics.median(r["first_s"] for r in redo),
         "target": None, "baseline": None, "baseline_case": f"median of {trials}"},
        {"case": "redelivery after kill -9, all 50 msgs s", "value": statistics.median(r["all_s"] for r in redo),
         "target": None, "baseline": None, "baseline_case": f"median of {trials}"},
    ]
    print(f"node processes' garbage collector: {collector}")
    print(f"{'case':52} {'value':>10} {'target':>8} {'baseline':>10} {'ratio':>6}  baseline case")
    for row in rows:
        row["ratio"] = row["value"] / row["baseline"] if row["baseline"] else None

        def fmt(v: float | None) -> str:
            return "" if v is None else f"{v:,.0f}" if v > 100 else f"{v:.2f}"

        print(f"{row['case']:52} {fmt(row['value']):>10} {fmt(row['target']):>8} {fmt(row['baseline']):>10} "
              f"{fmt(row['ratio']):>6}  {row['baseline_case']}")
    print_cpu({f"4 consumers, {pf}": four["cpu_us_per_msg"], f"4 consumers, {large}": four_large["cpu_us_per_msg"],
               f"4 consumers, {pf}, nice {CONSUMER_NICE}": four_nice["cpu_us_per_msg"],
               "publish only": alone["cpu_us_per_msg"]})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cases": rows, "runs": {"baseline": base, "one_consumer": one, "four_consumers": four,
                                                       "four_consumers_large_prefetch": four_large,
                                                       "four_consumers_nice": four_nice,
                                                       "publish_only": alone,
                                                       "redelivery": redo},
                               "quick": args.quick, "collector": collector, "cores": os.cpu_count(),
                               "time": time.time()}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
