"""A small data pipeline on Spark whose results reach an edge node through broker_mqtt.

Sensor readings are generated (3 devices, one reading per second for two minutes), Spark
aggregates them per device and 30-second window, and writes the aggregates through the bridge
(format "broker_mqtt") to topic /sensors/agg. An edge node — an ordinary broker_mqtt subscriber,
here in a thread of this process — receives each aggregate exactly once (de-duplicated by row id)
and prints it. Runs on its own: an embedded mosquitto and a local[2] Spark session.

    python examples/spark_pipeline.py

Needs the spark extra (pyspark, pyarrow) and Java 17.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import anyio

from broker_mqtt import EmbeddedBroker, Endpoint
from broker_mqtt.spark import Deduplicator, dedup, register

DEVICES = 3
SECONDS = 120
WINDOW = "30 seconds"
EXPECTED = DEVICES * (SECONDS // 30)


class EdgeNode:
    """Subscribes to /sensors/agg and prints each aggregate once, in its own thread and event loop
    (Spark's calls stay on the main thread: its session is thread-local in the JVM)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.received: list[dict] = []
        self.deduplicator = Deduplicator()
        self.ready = threading.Event()
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
        async with Endpoint(self.url, name="edge-node") as ep, ep.subscribe("/sensors/agg") as sub:
            self.ready.set()
            with anyio.move_on_after(300):  # a bound for a stuck run; Spark's start can be slow on a busy host
                async for msg in dedup(sub, self.deduplicator):
                    row = msg.data
                    self.received.append(row)
                    print(f"edge node: {row['device']:>8} {row['window_start']:%H:%M:%S}-"
                          f"{row['window_end']:%H:%M:%S}  n={row['n']:>2}  avg={row['avg_temp']:.2f}  "
                          f"min={row['min_temp']:.2f}  max={row['max_temp']:.2f}", flush=True)
                    store_sink(row)
                    if len(self.received) == EXPECTED:
                        break


def store_sink(row: dict) -> None:
    """TODO(stores): put the aggregate into a data store that edge nodes read, keyed by
    (device, window_start), once broker_mqtt.store lands — either here on the edge node
    (``await clone.put(key, row)``) or, better, straight from Spark with the store sink option of
    the bridge (``.option("store", "sensor-agg").option("key", "device")``: issue 6)."""


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local demo: Spark stays on loopback
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F  # noqa: N812

    started = time.monotonic()
    with EmbeddedBroker() as broker:
        edge = EdgeNode(broker.url)
        edge.thread.start()
        if not edge.ready.wait(30) or edge.error is not None:
            raise SystemExit(f"edge node did not subscribe: {edge.error!r}")

        spark = (
            SparkSession.builder.master("local[2]").appName("broker-mqtt-example")
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
            (aggregates.write.format("broker_mqtt").option("broker", broker.url)
             .option("topic", "/sensors/agg").mode("append").save())
            print(f"spark: emitted {EXPECTED} aggregates through the bridge", flush=True)
        finally:
            spark.stop()
        if not edge.done.wait(60) or edge.error is not None:
            raise SystemExit(f"edge node got {len(edge.received)} of {EXPECTED} aggregates"
                             + (f": {edge.error!r}" if edge.error is not None else ""))
        stats = edge.deduplicator.statistics()
        print(f"edge node: {len(edge.received)} aggregates, {stats.dropped} repeats dropped; "
              f"took {time.monotonic() - started:.1f}s", flush=True)
        assert len(edge.received) == EXPECTED


if __name__ == "__main__":
    main()
