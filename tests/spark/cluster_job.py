"""A Spark driver on a standalone cluster, for tests/spark/test_spark_cluster.py (see cluster.py).

    python cluster_job.py spark://127.0.0.1:PORT WORKDIR

Builds a SparkSession on the master, registers the bridge, answers ``RESULT {"event": "ready"}``,
then runs requests read from stdin, one JSON object per line, answering each with ``RESULT <json>``
lines on stdout (Spark's JVM writes to the same stdout: other lines are not answers):

- ``{"op": "emit", broker, namespace, topic, rows, partitions}``: ``rows`` rows through
  ``format("broker_mqtt")`` with option ``topic``; answers ``written``;
- ``{"op": "store", broker, namespace, store, rows, partitions}``: rows ``(device, reading)`` put
  into the elected store keyed by ``device``; answers ``written``;
- ``{"op": "read", broker, namespace, topics, count, checkpoint, timeout}``: a ``readStream`` of the
  bridge into ``foreachBatch``; answers ``started`` once the query runs, then ``read`` with the rows
  once ``count`` arrived;
- ``{"op": "quit"}``.

A request that fails answers ``{"event": "error", "error": <traceback>}``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from typing import Any


def answer(event: str, **fields: Any) -> None:
    sys.stdout.write("RESULT " + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def executors(spark: Any) -> list[str]:
    """The ids of the application's executors (the driver is not one)."""
    ids = spark.sparkContext._jsc.sc().getExecutorIds()  # a Scala Seq
    return [str(ids.apply(i)) for i in range(ids.size())]


def _writer(df: Any, req: dict[str, Any]) -> Any:
    return df.write.format("broker_mqtt").option("broker", req["broker"]).option("namespace", req["namespace"])


def emit(spark: Any, req: dict[str, Any]) -> None:
    df = spark.range(req["rows"], numPartitions=req["partitions"]).selectExpr(
        "id", "cast(id % 7 as int) as device", "cast(id as double) * 0.5 as value")
    _writer(df, req).option("topic", req["topic"]).mode("append").save()
    answer("written", rows=req["rows"], executors=executors(spark))


def store(spark: Any, req: dict[str, Any]) -> None:
    from pyspark.sql import functions as F  # noqa: N812

    df = spark.range(req["rows"], numPartitions=req["partitions"]).select(
        F.concat(F.lit("dev-"), F.col("id")).alias("device"), F.col("id").alias("reading"))
    _writer(df, req).option("store", req["store"]).option("key", "device").mode("append").save()
    answer("written", rows=req["rows"], executors=executors(spark))


def read(spark: Any, req: dict[str, Any]) -> None:
    count: int = req["count"]
    rows: list[dict[str, Any]] = []
    lock = threading.Lock()
    enough = threading.Event()

    def collect(batch: Any, batch_id: int) -> None:  # on the driver; the micro-batch ran on executors
        got = [{"topic": r.topic, "sender": r.sender, "data": json.loads(r.data), "batch": batch_id}
               for r in batch.collect()]
        with lock:
            rows.extend(got)
            if len(rows) >= count:
                enough.set()

    stream = (
        spark.readStream.format("broker_mqtt")
        .option("broker", req["broker"]).option("namespace", req["namespace"]).option("topics", req["topics"])
        .load()
    )
    query = (
        stream.writeStream.foreachBatch(collect).option("checkpointLocation", req["checkpoint"])
        .trigger(processingTime="300 milliseconds").start()
    )
    try:
        answer("started", query=query.id)
        deadline = time.monotonic() + req["timeout"]
        while not enough.wait(0.2):
            error = query.exception()
            if error is not None:
                raise RuntimeError(f"the query failed: {error}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"got {len(rows)} of {count} rows")
    finally:
        query.stop()
    with lock:
        answer("read", rows=rows, executors=executors(spark))


OPS = {"emit": emit, "store": store, "read": read}


def main() -> None:
    master, workdir = sys.argv[1], sys.argv[2]
    from pyspark.sql import SparkSession

    from broker_mqtt.spark import ensure_java, register

    ensure_java()
    spark = (
        SparkSession.builder.master(master).appName("broker-mqtt-cluster-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", workdir)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    answer("ready", master=spark.sparkContext.master)
    try:
        for line in sys.stdin:
            req = json.loads(line)
            if req["op"] == "quit":
                break
            try:
                OPS[req["op"]](spark, req)
            except Exception:
                answer("error", error=traceback.format_exc())
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
