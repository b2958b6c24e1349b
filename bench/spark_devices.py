"""Ingest rate of plain-MQTT device telemetry: a hand-written paho subscriber vs the Spark source.

One run, one embedded mosquitto (unlimited queues). N simulated devices (tests/fleet.py: ordinary
paho clients, one connection each) are spread over P publisher processes; at GO each device publishes
M JSON messages ``{"device", "seq", "temp"}`` on ``<prefix>/<device>/telemetry`` as fast as it can
(QoS 1: at most 100 unacknowledged per device; QoS 0 row with ``--qos0``). For each consumer a fresh
prefix and fresh publisher processes:

- baseline: a paho-mqtt 2.x subscriber in its own process (threaded loop, TCP_NODELAY, QoS 1
  subscription on ``<prefix>/+/telemetry``), ``json.loads`` per message, count per device; no Spark;
- spark: ``spark.readStream.format("broker_mqtt").option("payload", "json")`` with a jsonSchema and the
  ``<prefix>/{device}/telemetry`` pattern, rows counted per device in ``foreachBatch`` (groupBy device,
  count) on local[2];
- sparkplug (``--sparkplug``): edge nodes with 3 devices each publishing DDATA (2 aliased metrics),
  ``payload=sparkplug``, metric rows counted per device.

Rate = messages fully received (and parsed/counted) / (first publish -> last message received; for
Spark: the end of the micro-batch in which the running total reached N*M). All processes share the
machine's cores (2 on the build machines) with mosquitto and each other. "pub msg/s" is what the
publishers achieved (sent / their own first publish -> last acknowledgement): when it is close to the
consumer's rate, the publishers, not the consumer, set the pace. Under each row, "CPU us/msg": CPU time
per message received, by role (publishers and the baseline subscriber measure their own process time;
the Spark driver, its JVM, its Python workers, the source's receiver process and mosquitto are read from
/proc), which says where the time goes and is steadier than the rates on a shared machine.

Prints a table and writes bench/results/spark_devices.json. Run: ``python bench/spark_devices.py
[--devices N] [--messages M] [--procs P] [--quick] [--qos0] [--sparkplug] [--no-spark]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FLEET = ROOT / "tests" / "fleet.py"
SCHEMA = "seq LONG, temp DOUBLE"  # the device comes from the topic level {device} (a `device` field too would clash)
PROBE = "_probe"  # a device the bench publishes from until the Spark job sees it (not counted)


# -- the baseline subscriber process: paho, threaded loop, json.loads, count per device ----------
def baseline_subscriber(url: str, topic_filter: str, expected: int, qos: int, timeout: float) -> None:
    import paho.mqtt.client as mqtt

    from tests.fleet import _host_port

    host, port = _host_port(url)
    counts: Counter[str] = Counter()
    state = {"n": 0, "first": 0.0, "last": 0.0}
    done = threading.Event()
    subscribed = threading.Event()

    def on_connect(client: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        client.subscribe(topic_filter, qos=qos)

    def on_subscribe(*_a: Any) -> None:
        subscribed.set()

    def on_message(_c: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        doc = json.loads(msg.payload)
        counts[doc["device"]] += 1
        n = state["n"] = state["n"] + 1
        if n == 1:
            state["first"] = time.time()
        if n >= expected:
            state["last"] = time.time()
            done.set()

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"bench-sub-{uuid.uuid4().hex[:8]}",
                         protocol=mqtt.MQTTv5)
    client.max_inflight_messages_set(1000)
    client.on_connect, client.on_subscribe, client.on_message = on_connect, on_subscribe, on_message
    client.connect(host, port)
    sock = client.socket()
    assert isinstance(sock, socket.socket)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.loop_start()
    if not subscribed.wait(30):
        raise SystemExit("baseline subscriber: no SUBACK")
    print("READY", flush=True)
    cpu = time.process_time()
    done.wait(timeout)
    last = state["last"] or time.time()
    cpu = time.process_time() - cpu
    client.loop_stop()
    client.disconnect()
    print(json.dumps({"received": state["n"], "first": state["first"], "last": last, "devices": len(counts),
                      "cpu_s": cpu,
                      "min_per_device": min(counts.values(), default=0)}), flush=True)


# -- publishers ----------------------------------------------------------------------------------
class Publishers:
    """P fleet processes (tests/fleet.py), connected and waiting for GO."""

    def __init__(self, url: str, prefix: str, devices: int, messages: int, procs: int, qos: int, *,
                 edge_nodes: int = 0, node_devices: int = 3) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.procs: list[subprocess.Popen[str]] = []
        for k in range(procs):
            args = [sys.executable, str(FLEET), "--broker", url, "--prefix", prefix, "--messages", str(messages),
                    "--qos", str(qos)]
            if edge_nodes:
                lo, hi = edge_nodes * k // procs, edge_nodes * (k + 1) // procs
                args += ["--group", prefix, "--edge-nodes", str(hi - lo), "--first-node", str(lo),
                         "--node-devices", str(node_devices)]
            else:
                lo, hi = devices * k // procs, devices * (k + 1) // procs
                args += ["--first", str(lo), "--devices", str(hi - lo)]
            self.procs.append(subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                               env=env))
        for p in self.procs:
            assert p.stdout is not None
            line = p.stdout.readline().strip()
            if line != "READY":
                self.kill()
                raise RuntimeError(f"publisher did not start: {line!r}")

    def go(self) -> None:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write("GO\n")
            p.stdin.flush()

    def results(self, timeout: float = 900) -> dict[str, Any]:
        outs = []
        for p in self.procs:
            assert p.stdout is not None
            outs.append(json.loads(p.stdout.readline()))
            p.wait(timeout)
        errors = [e for o in outs for e in o["errors"]]
        if errors:
            raise RuntimeError(f"publishers: {errors[:3]}")
        first = min(o["first_publish"] for o in outs)
        done = max(o["done"] for o in outs)
        sent = sum(o["sent"] for o in outs)
        return {"sent": sent, "first_publish": first, "done": done, "pub_rate": sent / (done - first),
                "connect_s": max(o["connect_s"] for o in outs), "cpu_s": sum(o["cpu_s"] for o in outs)}

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def _row(kind: str, devices: int, messages: int, qos: int, got: int, first: float, last: float,
         pub: dict[str, Any], cpu: dict[str, float]) -> dict[str, Any]:
    """``cpu``: CPU seconds per role during the run; reported as CPU microseconds per message."""
    cpu = {"publishers": pub["cpu_s"], **cpu}
    return {"consumer": kind, "devices": devices, "messages_per_device": messages, "qos": qos,
            "expected": devices * messages, "received": got, "seconds": last - first,
            "msg_per_s": got / (last - first), "pub_msg_per_s": pub["pub_rate"],
            "publish_seconds": pub["done"] - pub["first_publish"],
            "cpu_us_per_msg": {role: round(1e6 * s / max(got, 1), 1) for role, s in cpu.items()}}


_TICK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a live process; 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def _role(cmdline: str) -> str | None:
    if "fleet.py" in cmdline or "--subscriber" in cmdline:
        return None  # they report their own CPU time
    for needle, role in (("python_streaming_source_runner", "spark_source_receiver"),
                         ("pyspark.daemon", "spark_python_workers"), ("java", "spark_jvm")):
        if needle in cmdline:
            return role
    return None


def cpu_snapshot(broker_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of this bench's live processes by role: the Spark driver (this process), the
    JVM, its Python workers, the source's receiver process, and mosquitto."""
    parents: dict[int, int] = {}
    cmd: dict[int, str] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
    me = os.getpid()
    out: dict[str, float] = {"spark_driver": _proc_cpu(me)}
    if broker_pid:
        out["mosquitto"] = _proc_cpu(broker_pid)
    for pid in parents:
        p, hops = pid, 0
        while p not in (me, 0, 1) and hops < 20:
            p, hops = parents.get(p, 0), hops + 1
        if p != me or pid == me:
            continue
        role = _role(cmd.get(pid, ""))
        if role:
            out[role] = out.get(role, 0.0) + _proc_cpu(pid)
    return out


def _cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}


def run_baseline(url: str, devices: int, messages: int, procs: int, qos: int,
                 broker_pid: int | None = None) -> dict[str, Any]:
    prefix = "b" + uuid.uuid4().hex[:8]
    expected = devices * messages
    sub = subprocess.Popen([sys.executable, __file__, "--subscriber", url, f"{prefix}/+/telemetry", str(expected),
                            str(qos)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert sub.stdout is not None
    if sub.stdout.readline().strip() != "READY":
        sub.kill()
        raise RuntimeError("baseline subscriber did not start")
    pubs = Publishers(url, prefix, devices, messages, procs, qos)
    try:
        broker_cpu = _proc_cpu(broker_pid) if broker_pid else 0.0
        pubs.go()
        pub = pubs.results()
    finally:
        pubs.kill()
    got = json.loads(sub.stdout.readline())
    cpu = {"subscriber": got["cpu_s"]}
    if broker_pid:
        cpu["mosquitto"] = _proc_cpu(broker_pid) - broker_cpu
    sub.wait(30)
    if got["devices"] != devices or got["received"] != expected:
        print(f"baseline: received {got['received']} of {expected} from {got['devices']} devices", file=sys.stderr)
    return _row("baseline: paho subscriber, json.loads", devices, messages, qos, got["received"],
                pub["first_publish"], got["last"], pub, cpu)


class BatchCounter:
    """foreachBatch target: counts rows per device; notes when the total reaches ``expected``."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.counts: Counter[str] = Counter()
        self.total = 0
        self.reached = 0.0
        self.batches = 0
        self.event = threading.Event()
        self.probed = threading.Event()

    def __call__(self, batch: Any, batch_id: int) -> None:
        for row in batch.groupBy("device").count().collect():
            if row["device"] == PROBE:
                self.probed.set()
                continue
            self.counts[row["device"]] += row["count"]
            self.total += row["count"]
        self.batches += 1
        if self.total >= self.expected and not self.reached:
            self.reached = time.time()
            self.event.set()


def run_spark(spark: Any, url: str, devices: int, messages: int, procs: int, qos: int, *,
              sparkplug: bool = False, node_devices: int = 3, broker_pid: int | None = None) -> dict[str, Any]:
    prefix = ("s" if not sparkplug else "g") + uuid.uuid4().hex[:8]
    if sparkplug:
        edge_nodes = max(1, devices // node_devices)
        devices = edge_nodes * node_devices
        reader = (spark.readStream.format("broker_mqtt").option("broker", url).option("payload", "sparkplug")
                  .option("topics", f"spBv1.0/{prefix}/#").load()
                  .where("message_type = 'DDATA' AND metric = 'temp'"))
        expected = devices * messages
    else:
        edge_nodes = 0
        reader = (spark.readStream.format("broker_mqtt").option("broker", url).option("payload", "json")
                  .option("topics", f"{prefix}/{{device}}/telemetry").option("jsonSchema", SCHEMA)
                  .option("qos", str(qos)).load())
        expected = devices * messages
    counter = BatchCounter(expected)
    chk = tempfile.mkdtemp(prefix="bench-spark-devices-")
    query = reader.select("device").writeStream.foreachBatch(counter) \
        .option("checkpointLocation", chk).trigger(processingTime="200 milliseconds").start()
    try:
        _wait_for_source(url, prefix, sparkplug, counter, query)
        pubs = Publishers(url, prefix, devices, messages, procs, qos, edge_nodes=edge_nodes,
                          node_devices=node_devices)
        try:
            before = cpu_snapshot(broker_pid)
            pubs.go()
            pub = pubs.results()
        finally:
            pubs.kill()
        deadline = time.monotonic() + 600
        while not counter.event.wait(0.2):
            if query.exception() is not None:
                raise RuntimeError(f"spark query failed: {query.exception()}")
            if time.monotonic() > deadline:
                break
        cpu = _cpu_delta(before, cpu_snapshot(broker_pid))
        last = counter.reached or time.time()
    finally:
        query.stop()
    if counter.total != expected or len(counter.counts) != devices:
        print(f"spark: counted {counter.total} of {expected} rows from {len(counter.counts)} devices",
              file=sys.stderr)
    kind = "spark: format(broker_mqtt) payload=" + ("sparkplug" if sparkplug else "json")
    row = _row(kind, devices, messages, qos, counter.total, pub["first_publish"], last, pub, cpu)
    row["batches"] = counter.batches
    return row


def _wait_for_source(url: str, prefix: str, sparkplug: bool, counter: BatchCounter, query: Any,
                     timeout: float = 120) -> None:
    """Until the job counted a message of the probe device: the source is subscribed and running."""
    from tests.fleet import Fleet

    with Fleet(url) as fleet:
        if sparkplug:
            fleet.add_edge_node(prefix, "probe", [PROBE])
        else:
            fleet.add_json_devices(prefix, 1, name=PROBE)
        fleet.connect()
        deadline = time.monotonic() + timeout
        while not counter.probed.is_set():
            if query.exception() is not None:
                raise RuntimeError(f"spark query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError("the streaming query never saw the probe device")
            if sparkplug:
                fleet.rebirth()  # the source may have subscribed after the last birth: it needs one
            fleet.publish_telemetry(1, qos=1)
            counter.probed.wait(0.5)


def _print(rows: list[dict[str, Any]]) -> None:
    print()
    print(f"{'consumer':<40} {'devices':>7} {'msgs':>9} {'qos':>3} {'received':>9} {'secs':>7} {'msg/s':>9} "
          f"{'pub msg/s':>9}")
    for r in rows:
        print(f"{r['consumer']:<40} {r['devices']:>7} {r['expected']:>9} {r['qos']:>3} {r['received']:>9} "
              f"{r['seconds']:>7.2f} {r['msg_per_s']:>9,.0f} {r['pub_msg_per_s']:>9,.0f}")
        print("    CPU us/msg: " + ", ".join(f"{k} {v:g}" for k, v in r["cpu_us_per_msg"].items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--messages", type=int, default=200, help="per device")
    ap.add_argument("--procs", type=int, default=4, help="publisher processes")
    ap.add_argument("--quick", action="store_true", help="100 devices x 50 messages, 2 publisher processes")
    ap.add_argument("--qos0", action="store_true", help="also QoS 0 rows")
    ap.add_argument("--sparkplug", action="store_true", help="also a Sparkplug row")
    ap.add_argument("--no-spark", action="store_true", help="baseline only")
    ap.add_argument("--no-baseline", action="store_true", help="Spark rows only (e.g. to profile them)")
    ap.add_argument("--subscriber", nargs=4, metavar=("URL", "FILTER", "COUNT", "QOS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.subscriber:
        url, flt, count, qos = args.subscriber
        baseline_subscriber(url, flt, int(count), int(qos), timeout=600)
        return
    if args.quick:
        args.devices, args.messages, args.procs = 100, 50, 2

    from broker_mqtt import EmbeddedBroker

    qoses = [1, 0] if args.qos0 else [1]
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    with EmbeddedBroker() as broker:
        url = broker.url
        for qos in [] if args.no_baseline else qoses:
            rows.append(run_baseline(url, args.devices, args.messages, args.procs, qos, broker.pid))
            _print(rows[-1:])
        spark = None
        if not args.no_spark:
            spark = _session()
            run_spark(spark, url, 20, 20, 1, 1)  # warm-up: Python workers, imports
            for qos in qoses:
                rows.append(run_spark(spark, url, args.devices, args.messages, args.procs, qos, broker_pid=broker.pid))
                _print(rows[-1:])
            if args.sparkplug:
                rows.append(run_spark(spark, url, args.devices, args.messages, args.procs, 1, sparkplug=True,
                                      broker_pid=broker.pid))
            spark.stop()
    _print(rows)
    ratios = {}
    for qos in qoses:
        base = next((r for r in rows if r["qos"] == qos and r["consumer"].startswith("baseline")), None)
        sp = next((r for r in rows if r["qos"] == qos and r["consumer"].endswith("payload=json")), None)
        if sp and base:
            ratios[f"qos{qos}"] = sp["msg_per_s"] / base["msg_per_s"]
            print(f"spark json / baseline, QoS {qos}: {ratios[f'qos{qos}']:.2f}x")
    print("target: >= 50,000 msg/s with 1,000 devices (Spark source)")
    out = ROOT / "bench" / "results" / "spark_devices.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "spark_devices",
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "spark_master": "local[2]",
                    "load_average_1m": {"before": load_before[0], "after": os.getloadavg()[0]}},
        "args": {"devices": args.devices, "messages": args.messages, "procs": args.procs},
        "rows": rows, "ratio_spark_to_baseline": ratios, "target_msg_per_s": 50_000,
    }, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


def _session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from broker_mqtt.spark import ensure_java, register

    ensure_java()
    spark = (SparkSession.builder.master("local[2]").appName("bench-spark-devices")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.showConsoleProgress", "false")
             .config("spark.python.worker.reuse", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


if __name__ == "__main__":
    main()
