"""Rows per second from a local[2] Spark job through the bridge to a subscriber in another process.

One run, one embedded mosquitto, one local[2] Spark session; for each sink a fresh subscriber
process (an ordinary broker_mqtt Endpoint, decoding every message) counts the rows:

- bridge: ``df.write.format("broker_mqtt")`` (Arrow batches, one Endpoint per task, many node
  messages per PUBLISH, QoS 1, row ids on);
- baseline: ``df.foreachPartition`` with paho, one PUBLISH per row, QoS 1, the same node-message
  encoding (so the same subscriber receives it): the straightforward sink.

Rate = rows / (time from starting the Spark job to the subscriber's last row), wall clock on
one host (2 cores shared by Spark's JVM, its Python workers, mosquitto and the subscriber).
"job rows/s" = rows / the job's duration (publisher side: every row acknowledged by the broker,
not yet necessarily received); when it is well above "rows/s", the subscriber is the bottleneck.
Prints a table and writes bench/results/spark_emit.json. Run: ``python bench/spark_emit.py
[--rows N] [--baseline-rows N]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOPIC = "/bench/rows"


# -- the subscriber process ------------------------------------------------------------------
def subscriber(url: str, namespace: str, count: int) -> None:
    import anyio

    from broker_mqtt import Endpoint

    async def main() -> None:
        async with Endpoint(url, namespace=namespace, name="bench-sub", subscriber_buffer=4096) as ep:
            async with ep.subscribe(TOPIC) as sub:
                print("READY", flush=True)
                n = 0
                first = 0.0
                with anyio.move_on_after(600):
                    async for _msg in sub:  # the subscription decodes each message's data
                        if n == 0:
                            first = time.time()
                        n += 1
                        if n >= count:
                            break
                print(json.dumps({"received": n, "first": first, "last": time.time()}), flush=True)

    anyio.run(main)


def _start_subscriber(url: str, namespace: str, count: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, __file__, "--subscriber", url, namespace, str(count)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "READY":
        proc.kill()
        raise RuntimeError(f"subscriber did not start: {line!r}")
    return proc


def _finish_subscriber(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    out = proc.stdout.readline()
    proc.wait(30)
    return json.loads(out)  # type: ignore[no-any-return]


# -- the baseline sink: foreachPartition + paho, one PUBLISH per row ---------------------------
def _paho_partition(rows: Any, host: str, port: int, namespace: str) -> None:
    import paho.mqtt.client as mqtt

    from broker_mqtt.wire import codec
    from broker_mqtt.wire.message import Kind, NodeEncoder
    from broker_mqtt.wire.topics import TopicLayout

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"bm-{uuid.uuid4().hex}",
                         protocol=mqtt.MQTTv5)
    client.max_inflight_messages_set(1000)
    client.connect(host, port)
    client.loop_start()
    encoder = NodeEncoder(uuid.uuid4().bytes)
    mqtt_topic = TopicLayout(namespace).data(TOPIC)
    infos = []
    utc = dt.UTC
    for row in rows:
        value = row.asDict()
        value["ts"] = value["ts"].replace(tzinfo=utc)  # Row timestamps are naive (TZ=UTC below)
        infos.append(client.publish(mqtt_topic, encoder.encode(Kind.DATA, TOPIC, codec.encode(value)), qos=1))
    for info in infos:
        info.wait_for_publish(60)
    client.loop_stop()
    client.disconnect()


def _rows(spark: Any, n: int) -> Any:
    return spark.range(n, numPartitions=2).selectExpr(
        "id", "concat('device-', cast(id % 16 as string)) as device", "cast(id as double) * 0.25 as value",
        "timestamp_seconds(1700000000 + id) as ts",
    )


def run_bridge(spark: Any, url: str, n: int) -> dict[str, Any]:
    ns = "bench" + uuid.uuid4().hex[:8]
    df = _rows(spark, n).cache()
    df.count()  # materialize the input: measure the sink, not the generator
    sub = _start_subscriber(url, ns, n)
    start = time.time()
    df.write.format("broker_mqtt").option("broker", url).option("namespace", ns).option("topic", TOPIC) \
        .mode("append").save()
    job = time.time() - start
    got = _finish_subscriber(sub)
    df.unpersist()
    return {"rows": n, "received": got["received"], "job_s": job, "end_to_end_s": got["last"] - start,
            "rows_per_s": got["received"] / (got["last"] - start)}


def run_baseline(spark: Any, url: str, n: int) -> dict[str, Any]:
    from broker_mqtt import BrokerURL

    ns = "bench" + uuid.uuid4().hex[:8]
    parsed = BrokerURL.parse(url)
    host, port = parsed.host, parsed.port
    df = _rows(spark, n).cache()
    df.count()
    sub = _start_subscriber(url, ns, n)
    start = time.time()
    df.foreachPartition(lambda rows: _paho_partition(rows, host, port, ns))
    job = time.time() - start
    got = _finish_subscriber(sub)
    df.unpersist()
    return {"rows": n, "received": got["received"], "job_s": job, "end_to_end_s": got["last"] - start,
            "rows_per_s": got["received"] / (got["last"] - start)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=300_000, help="rows through the bridge")
    parser.add_argument("--baseline-rows", type=int, default=100_000, help="rows through the paho baseline")
    parser.add_argument("--subscriber", nargs=3, metavar=("URL", "NS", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.subscriber:
        url, ns, count = args.subscriber
        subscriber(url, ns, int(count))
        return

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # keep Spark's own sockets on loopback
    os.environ["TZ"] = "UTC"  # Python workers: Row timestamps come out naive in local time
    from pyspark.sql import SparkSession

    from broker_mqtt import EmbeddedBroker
    from broker_mqtt.spark import register

    spark = (
        SparkSession.builder.master("local[2]").appName("bench-spark-emit")
        .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    load_before = os.getloadavg()
    with EmbeddedBroker() as broker:
        run_bridge(spark, broker.url, 20_000)  # warm-up: Python workers, imports, JIT
        bridge = run_bridge(spark, broker.url, args.rows)
        baseline = run_baseline(spark, broker.url, args.baseline_rows)
    spark.stop()

    ratio = bridge["rows_per_s"] / baseline["rows_per_s"]
    print()
    print(f"{'sink':<44} {'rows':>8} {'received':>9} {'job s':>7} {'e2e s':>7} {'rows/s':>9} {'job rows/s':>10}")
    for name, r in (("bridge: format(broker_mqtt), QoS 1, batched", bridge),
                    ("baseline: foreachPartition + paho, 1 msg/row", baseline)):
        print(f"{name:<44} {r['rows']:>8} {r['received']:>9} {r['job_s']:>7.2f} {r['end_to_end_s']:>7.2f} "
              f"{r['rows_per_s']:>9,.0f} {r['rows'] / r['job_s']:>10,.0f}")
    print(f"bridge / baseline: {ratio:.1f}x   (targets: >= 100,000 rows/s and >= 3x)")
    out = ROOT / "bench" / "results" / "spark_emit.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "spark_emit",
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "spark_master": "local[2]",
                    "load_average_1m": {"before": load_before[0], "after": os.getloadavg()[0]}},
        "bridge": bridge, "baseline": baseline, "ratio": ratio,
        "targets": {"rows_per_s": 100_000, "ratio": 3},
    }, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
